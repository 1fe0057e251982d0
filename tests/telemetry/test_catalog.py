"""Tests for telemetry.catalog: real source names resolve, the catalog is consistent."""

import re
from pathlib import Path

import pytest

from telemetry import catalog
from telemetry.catalog import CATALOG, Metric, UnknownMetric

FORMATS = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "formats"


def formats_file(name: str) -> Path:
    path = FORMATS / name
    if not path.exists():
        pytest.skip(f"../shared/reference not present ({path})")
    return path


# --- tests that need nothing outside the repo ----------------------------------------


def test_simulator_names_exist_with_expected_kinds():
    expected = {
        "gpu.util": "gauge", "gpu.mem_copy_util": "gauge", "gpu.power": "gauge", "gpu.energy": "counter",
        "gpu.temp": "gauge", "gpu.mem_temp": "gauge", "gpu.sm_clock": "gauge", "gpu.mem_clock": "gauge",
        "gpu.fb_used": "gauge", "gpu.ecc.sbe_volatile": "counter", "gpu.ecc.dbe_volatile": "counter",
        "gpu.row_remap.pending": "gauge", "gpu.row_remap.correctable": "counter",
        "gpu.row_remap.uncorrectable": "counter", "gpu.pcie.replay": "counter", "gpu.xid": "gauge",
        "gpu.clock_event_reasons": "gauge", "gpu.throttle.thermal_ns": "counter",
        "nvlink.crc_flit_errors": "counter", "nvlink.replay_errors": "counter",
        "nvlink.recovery_errors": "counter", "nvlink.bandwidth": "counter", "nvswitch.temp": "gauge",
        "nvswitch.fatal_error": "gauge", "nvswitch.nonfatal_error": "gauge", "net.rx_bytes": "counter",
        "net.tx_bytes": "counter", "net.symbol_errors": "counter", "net.fec_corrected": "counter",
        "net.link_down": "counter", "net.cnp_sent": "counter", "net.ecn_marked": "counter",
        "cooling.inlet_temp": "gauge", "cooling.fan_rpm": "gauge", "power.psu_input_power": "gauge",
        "storage.write_bytes": "counter", "job.step_time_s": "gauge", "job.nccl_timeouts": "counter",
    }
    for name, kind in expected.items():
        assert catalog.get(name).kind == kind, name
    assert catalog.get("gpu.energy").is_counter
    assert not catalog.get("gpu.temp").is_counter


def test_fixed_aliases_resolve_to_the_right_metric():
    cases = {
        "DCGM_FI_DEV_GPU_TEMP": "gpu.temp",
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS": "gpu.temp",
        "DCGM_FI_DEV_XID_ERRORS": "gpu.xid",
        "node_hwmon_temp_celsius": "host.sensor_temp",
        "node_hwmon_fan_rpm": "cooling.fan_rpm",
        "node_hwmon_power_watt": "power.sensor_power",
        "node_disk_written_bytes_total": "storage.write_bytes",
        "node_disk_read_bytes_total": "storage.read_bytes",
        "node_network_receive_bytes_total": "net.if_rx_bytes",
        "rx_symbol_err_phy": "net.symbol_errors",
        "node_ethtool_received_symbol_err_phy": "net.symbol_errors",
        "rx_corrected_bits_phy": "net.fec_corrected",
        "link_down_events_phy": "net.link_down",
        "node_ethtool_transmitted_pause_ctrl_phy": "net.tx_pause",
        "np_cnp_sent": "net.cnp_sent",
        "SymbolErrorCounter": "ib.symbol_errors",
        "link_downed": "ib.link_downed",
        "node_infiniband_port_transmit_wait_total": "ib.port_xmit_wait",
    }
    for alias, name in cases.items():
        metric = catalog.resolve(alias)
        assert metric is not None, alias
        assert metric.name == name, alias


def test_resolve_is_exact_and_case_sensitive():
    assert catalog.resolve("dcgm_fi_dev_gpu_temp") is None
    assert catalog.resolve("GPU.TEMP") is None
    assert catalog.resolve("gpu.temp") is catalog.get("gpu.temp")


def test_get_unknown_raises_keyerror_naming_the_metric():
    with pytest.raises(UnknownMetric, match="gpu.not_a_metric") as err:
        catalog.get("gpu.not_a_metric")
    assert isinstance(err.value, KeyError)


def test_is_known_only_accepts_canonical_names():
    assert catalog.is_known("gpu.temp")
    assert not catalog.is_known("DCGM_FI_DEV_GPU_TEMP")
    assert not catalog.is_known("gpu.nope")


def test_every_metric_has_valid_fields_and_prefix_matches_layer():
    assert 120 <= len(CATALOG)
    for name, m in CATALOG.items():
        assert name == m.name
        assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", name), name
        assert m.layer in catalog.LAYERS, name
        assert catalog.PREFIX_LAYER[name.split(".")[0]] == m.layer, name
        assert m.kind in ("gauge", "counter"), name
        assert m.bad in ("up", "down", "none"), name
        assert m.component in catalog.COMPONENT_KINDS, name
        assert m.unit and m.description.strip(), name
        assert m.scale > 0 and all(f > 0 for _, f in m.alias_scales), name


def test_by_layer_partitions_the_catalog():
    seen = []
    for layer in catalog.LAYERS:
        metrics = catalog.by_layer(layer)
        assert metrics, layer
        assert all(m.layer == layer for m in metrics)
        seen += metrics
    assert sorted(m.name for m in seen) == sorted(CATALOG)
    with pytest.raises(ValueError, match="nope"):
        catalog.by_layer("nope")


def test_no_alias_maps_to_two_metrics():
    owners: dict[str, str] = {}
    for m in CATALOG.values():
        for key in (m.name, *m.all_aliases):
            assert owners.setdefault(key, m.name) == m.name, key


def test_index_builder_rejects_colliding_aliases():
    a = Metric("gpu.a", "gpu", "C", "gauge", "up", "gpu", "a", aliases=("X",))
    b = Metric("gpu.b", "gpu", "C", "gauge", "up", "gpu", "b", aliases=("X",))
    with pytest.raises(ValueError, match="'X' maps to both 'gpu.a' and 'gpu.b'"):
        catalog._build_index([a, b])


def test_index_builder_rejects_bad_layer():
    bad = Metric("gpu.a", "gpus", "C", "gauge", "up", "gpu", "a")
    with pytest.raises(ValueError, match="gpu.a"):
        catalog._build_index([bad])


def test_ib_data_counters_are_in_4_byte_words_except_node_exporter():
    for name, words, ne in [
        ("ib.port_xmit_data", "port_xmit_data", "node_infiniband_port_data_transmitted_bytes_total"),
        ("ib.port_rcv_data", "port_rcv_data", "node_infiniband_port_data_received_bytes_total"),
    ]:
        m = catalog.get(name)
        assert m.scale == 4.0
        assert m.unit == "bytes"
        assert m.scale_for(words) == 4.0
        assert catalog.resolve(ne) is m
        assert m.scale_for(ne) == 1.0
        assert m.scale_for(name) == 1.0


def test_unit_conversions_for_renamed_dcgm_fields():
    assert catalog.get("gpu.sm_clock").scale_for("DCGM_FI_DEV_SM_CLOCK_HERTZ") == pytest.approx(1e-6)
    assert catalog.get("gpu.sm_clock").scale_for("DCGM_FI_DEV_SM_CLOCK") == 1.0
    energy = catalog.get("gpu.energy")
    assert energy.unit == "J"
    assert energy.scale_for("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == pytest.approx(1e-3)
    assert energy.scale_for("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL") == 1.0
    with pytest.raises(UnknownMetric):
        energy.scale_for("DCGM_FI_DEV_GPU_TEMP")


# --- tests against the real format samples in ../shared --------------------------------


def test_every_dcgm_default_counter_field_resolves():
    fields = []
    for line in formats_file("dcgm-default-counters.csv").read_text().splitlines():
        match = re.match(r"^#?\s*(DCGM_\w+)\s*,\s*(\w+)\s*,", line)
        if match:  # commented-out rows are fields the exporter can be configured with too
            fields.append((match.group(1), match.group(2)))
    assert len(fields) > 40
    for field, typ in fields:
        if typ == "label":
            assert field in catalog.LABEL_FIELDS, field
        else:
            assert catalog.resolve(field) is not None, field


def test_every_dcgm_field_in_exporter_scrapes_resolves():
    names = set()
    for fname in ("dcgm-exporter-metrics-sample.txt", "dcgm-exporter-metrics-sample-t4.txt",
                  "dcgm-exporter-metrics-snippets.txt"):
        for line in formats_file(fname).read_text().splitlines():
            match = re.match(r"^(DCGM_FI_\w+)[{ ]", line)
            if match:
                names.add(match.group(1))
    assert "DCGM_FI_DEV_GPU_TEMP" in names
    missing = sorted(n for n in names if catalog.resolve(n) is None and n not in catalog.LABEL_FIELDS)
    assert missing == []


def test_deprecated_dcgm_names_resolve_to_the_same_metric_as_new_names():
    text = formats_file("dcgm-fields-reference.md").read_text()
    section = text.split("## 3.", 1)[1]
    pairs = re.findall(r"^\| (DCGM_FI_\w+) \| (DCGM_FI_\w+) \|", section, flags=re.M)
    assert len(pairs) > 100
    checked = 0
    for old, new in pairs:
        old_m, new_m = catalog.resolve(old), catalog.resolve(new)
        if old_m is None and new_m is None:
            continue  # a field we deliberately do not ingest (labels, per-lane, vGPU, ...)
        assert old_m is not None and new_m is not None, (old, new)
        assert old_m is new_m, (old, new)
        checked += 1
    assert checked >= 60


# Families of node_exporter series that are descriptive (info/static), not signals.
NODE_EXPORTER_NOT_METRICS = {
    "node_infiniband_info", "node_network_info", "node_nvme_info", "node_nvme_namespace_info",
    "node_nvme_namespace_logical_block_size_bytes",
}


def test_node_exporter_sample_signal_families_resolve():
    names = set()
    for line in formats_file("node-exporter-sample.txt").read_text().splitlines():
        match = re.match(r"^(node_\w+)[{ ]", line)
        if match:
            names.add(match.group(1))
    covered_prefixes = ("node_infiniband_", "node_network_", "node_edac_", "node_pressure_", "node_load",
                        "node_nvme_", "node_memory_")
    wanted = {n for n in names if n.startswith(covered_prefixes)} - NODE_EXPORTER_NOT_METRICS
    assert len(wanted) > 40
    missing = sorted(n for n in wanted if catalog.resolve(n) is None)
    assert missing == []


def test_ib_sysfs_counter_files_resolve():
    names = set()
    for line in formats_file("ib-sysfs-h100-sample.tsv").read_text().splitlines():
        match = re.match(r"^\w+/ports/\d+/(counters|hw_counters)/(\w+)\t", line)
        if match:
            names.add(match.group(2))
    assert "port_xmit_data" in names
    # lifespan is the counter cache period and the rx_*_requests are traffic mix, not health signals
    ignored = {"lifespan", "rx_read_requests", "rx_write_requests", "rx_atomic_requests", "rx_dct_connect"}
    missing = sorted(n for n in names - ignored if catalog.resolve(n) is None)
    assert missing == []
