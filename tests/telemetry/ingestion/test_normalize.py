"""Normaliser: host/component/metric mapping, blanks, scale, remote-write path."""
import math
import struct
from pathlib import Path

import pytest

from telemetry import catalog, schema
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.normalize import component_of, prom_samples_to_table, rw_series_to_table
from telemetry.ingestion.prometheus_text import PromSample, parse_exposition
from telemetry.ingestion.remote_write import RWSeries, decode_write_request, encode_write_request

FIXTURES = Path(__file__).parent / "fixtures"
TS = 1_710_000_000_000
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def rows(result):
    return result.table.to_pylist()


def test_dcgm_fixture_maps_host_component_metric_and_drops_blank_sentinels():
    samples = parse_exposition((FIXTURES / "dcgm_h100_scrape.txt").read_text(), default_ts_ms=TS)
    res = prom_samples_to_table(samples, cluster="c1")
    assert res.table.schema == schema.SAMPLES
    assert res.dropped_blank == 3  # int64 and int32 memory-temp sentinels, fp64 power sentinel
    got = {(r["component"], r["metric"]): r["value"] for r in rows(res)}
    temp = catalog.resolve("DCGM_FI_DEV_GPU_TEMP").name
    power = catalog.resolve("DCGM_FI_DEV_POWER_USAGE").name
    assert got[("gpu0", temp)] == 41.0 and got[("gpu1", temp)] == 43.0
    assert got[("gpu0", power)] == pytest.approx(312.447)
    assert ("gpu1", power) not in got
    assert {r["host"] for r in rows(res)} == {"gpu-a017"}  # Hostname and the newer hostname label
    assert {r["cluster"] for r in rows(res)} == {"c1"}
    assert res.table.column("ts").to_pylist()[0].timestamp() * 1000 == TS


def test_node_exporter_fixture_keeps_ib_bytes_unscaled_and_unknown_names():
    samples = parse_exposition((FIXTURES / "node_exporter_ib.txt").read_text(), default_ts_ms=TS)
    res = prom_samples_to_table(samples, cluster="c1", default_host="gpu-a017")
    got = {(r["component"], r["metric"]): r["value"] for r in rows(res)}
    rcv = catalog.resolve("node_infiniband_port_data_received_bytes_total")
    assert got[("mlx5_0/1", rcv.name)] == pytest.approx(9.22159499729932e14 * rcv.scale_for(
        "node_infiniband_port_data_received_bytes_total"))
    assert ("platform_coretemp_0/temp1", catalog.resolve("node_hwmon_temp_celsius").name) in got
    assert res.unknown_metrics == {"node_precursor_fixture_only"}
    assert got[("nvme0n1", "node_precursor_fixture_only")] == 7.0
    assert ("", catalog.resolve("node_load1").name if catalog.resolve("node_load1") else "node_load1") in got


def test_raw_ib_word_counters_are_multiplied_by_the_catalog_scale():
    metric = catalog.resolve("port_xmit_data")
    if metric is None:
        pytest.skip("catalog has no raw port_xmit_data alias")
    res = prom_samples_to_table([PromSample("port_xmit_data", (("device", "mlx5_0"), ("port", "1")), 10.0, TS)],
                                cluster="c", default_host="h")
    assert rows(res)[0]["value"] == 10.0 * metric.scale_for("port_xmit_data") == 40.0


def test_host_falls_back_to_instance_without_port_then_default_then_error():
    s = [PromSample("m", (("instance", "node7:9100"),), 1.0, TS), PromSample("m", (("instance", "[fe80::1]:9100"),), 1.0, TS)]
    assert [r["host"] for r in rows(prom_samples_to_table(s, cluster="c"))] == ["node7", "fe80::1"]
    assert rows(prom_samples_to_table([PromSample("m", (), 1.0, TS)], cluster="c", default_host="d"))[0]["host"] == "d"
    with pytest.raises(IngestError) as exc:
        prom_samples_to_table([PromSample("m", (("gpu", "0"),), 1.0, TS)], cluster="c")
    assert exc.value.field == "host" and 'm{gpu="0"}' in exc.value.reason


def test_a_cluster_label_overrides_the_argument():
    res = prom_samples_to_table([PromSample("m", (("cluster", "east"), ("instance", "h")), 1.0, TS)], cluster="c")
    assert rows(res)[0]["cluster"] == "east"


def test_nan_values_are_dropped_and_counted_but_dcgm_ranges_apply_only_to_dcgm():
    s = [
        PromSample("m", (("instance", "h"),), math.nan, TS),
        PromSample("node_big", (("instance", "h"),), 2147483640.0, TS),
        PromSample("DCGM_FI_DEV_GPU_TEMP", (("instance", "h"), ("gpu", "0")), 2147483640.0, TS),
    ]
    res = prom_samples_to_table(s, cluster="c")
    assert res.dropped_blank == 2 and [r["value"] for r in rows(res)] == [2147483640.0]


@pytest.mark.parametrize(
    "labels, component",
    [
        ({"gpu": "3", "UUID": "GPU-x"}, "gpu3"),
        ({"gpu": "0", "GPU_I_ID": "5"}, "gpu0/mig5"),
        ({"UUID": "GPU-abc"}, "GPU-abc"),
        ({"nvswitch": "2"}, "nvswitch2"),
        ({"device": "mlx5_0", "port": "1"}, "mlx5_0/1"),
        ({"device": "nvme0n1"}, "nvme0n1"),
        ({"device": "eth0"}, "eth0"),
        ({"chip": "platform_coretemp_0", "sensor": "temp1"}, "platform_coretemp_0/temp1"),
        ({"bus": "01", "device": "00", "function": "0", "segment": "0000"}, "0000:01:00.0"),
        ({"controller": "0", "csrow": "1", "channel": "0"}, "mc0/csrow1/ch0"),
        ({"instance": "h"}, ""),
    ],
)
def test_component_from_labels(labels, component):
    assert component_of(labels) == component


def test_remote_write_rows_match_the_text_path_and_drop_stale_markers():
    series = [
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "h1"}, [1000, 2000, 3000], [40.0, STALE, 42.0]),
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1", "hostname": "h1", "cluster": "east"}, [1000], [9.223372036854775794e18]),
        RWSeries({"__name__": "node_precursor_fixture_only", "instance": "h2:9100", "device": "eth0"}, [1000], [5.0]),
    ]
    res = rw_series_to_table(decode_write_request(encode_write_request(series)), cluster="c")
    assert res.table.schema == schema.SAMPLES
    assert res.dropped_blank == 2
    temp = catalog.resolve("DCGM_FI_DEV_GPU_TEMP").name
    assert [(r["host"], r["component"], r["metric"], r["value"]) for r in rows(res)] == [
        ("h1", "gpu0", temp, 40.0), ("h1", "gpu0", temp, 42.0), ("h2", "eth0", "node_precursor_fixture_only", 5.0)
    ]
    assert [r["ts"].timestamp() for r in rows(res)] == [1.0, 3.0, 1.0]
    assert res.unknown_metrics == {"node_precursor_fixture_only"}


def test_remote_write_series_without_host_is_rejected():
    with pytest.raises(IngestError):
        rw_series_to_table([RWSeries({"__name__": "m"}, [1], [1.0])], cluster="c")


def test_empty_inputs_give_empty_tables_with_the_schema():
    assert prom_samples_to_table([], cluster="c").table.schema == schema.SAMPLES
    assert rw_series_to_table([], cluster="c").table.num_rows == 0
