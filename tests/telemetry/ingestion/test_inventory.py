"""Inventory from series labels: every ingest path keeps what a GPU, NIC or disk is (model, serial,
UUID, PCI bus id, VBIOS/firmware, the node's driver), so a kernel XID maps to its GPU and a failure
concentrated on one driver or firmware can be tested."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from telemetry import store, writer
from telemetry.ingestion import inventory, service
from telemetry.ingestion.remote_write import RWSeries, encode_write_request
from telemetry.queries import interruptions

NOW = (int(time.time()) // 60 - 90) * 60_000
YEAR = datetime.now(timezone.utc).year


def dcgm_labels(host: str, gpu: int, pci: str) -> dict[str, str]:
    return {"gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "pci_bus_id": pci, "device": f"nvidia{gpu}",
            "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host, "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "DCGM_FI_DEV_SERIAL": f"165{gpu}0000", "DCGM_FI_DEV_VBIOS_VERSION": "96.00.89.00.01"}


def exposition(host: str) -> str:
    lines = []
    for gpu, pci in ((0, "00000000:18:00.0"), (3, "00000000:9A:00.0")):
        labels = ",".join(f'{k}="{v}"' for k, v in dcgm_labels(host, gpu, pci).items())
        lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 41")
        lines.append(f"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{nvlink=\"2\",{labels}}} 0")
    lines.append(f'node_infiniband_info{{board_id="MT_0000000838",device="mlx5_0",firmware_version="28.39.1002",'
                 f'hca_type="MT4129",instance="{host}:9100"}} 1')
    return "\n".join(lines) + "\n"


def components(host: str) -> list[tuple]:
    return store.query_rows(
        "SELECT component, kind, model, serial, uuid, pci_bus_id, firmware FROM components FINAL "
        "WHERE host = {h:String} ORDER BY component", {"h": host}, tag="test")


def test_a_dcgm_scrape_keeps_each_gpus_identity_and_the_nodes_driver(clean_store):
    report = service.ingest_prometheus_text(exposition("inv-t1"), "c1", default_ts_ms=NOW)
    assert report.rows["components"] == 3 and report.rows["hosts"] == 1
    assert components("inv-t1") == [
        ("gpu0", "gpu", "NVIDIA H100 80GB HBM3", "16500000", "GPU-inv-t1-0", "0000:18:00.0", "96.00.89.00.01"),
        ("gpu3", "gpu", "NVIDIA H100 80GB HBM3", "16530000", "GPU-inv-t1-3", "0000:9a:00.0", "96.00.89.00.01"),
        ("mlx5_0", "nic", "MT4129", "", "", "", "28.39.1002"),
    ]
    assert store.query_rows("SELECT gpu_model, driver_version FROM hosts FINAL WHERE host = 'inv-t1'", tag="test") == [
        ("NVIDIA H100 80GB HBM3", "550.54.15")]


def test_a_remote_write_push_keeps_the_same_inventory(clean_store):
    series = [RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", **dcgm_labels("inv-r1", 5, "00000000:BA:00.0")},
                       [NOW], [40.0])]
    report = service.ingest_remote_write(encode_write_request(series), "c1")
    assert report.rows["components"] == 1
    assert components("inv-r1") == [
        ("gpu5", "gpu", "NVIDIA H100 80GB HBM3", "16550000", "GPU-inv-r1-5", "0000:ba:00.0", "96.00.89.00.01")]


def test_labels_fill_in_what_they_know_and_keep_the_rest_of_the_inventory(clean_store):
    writer.write("hosts", pa.table({
        "cluster": ["c1"], "host": ["inv-t2"], "rack": ["r07"], "leaf": ["leaf-3"], "spine": ["s1"], "gpu_model": [""],
        "driver_version": ["535.0"], "firmware_version": ["bmc-1.2"],
        "updated": pa.array([NOW - 86_400_000], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))}))
    service.ingest_prometheus_text(exposition("inv-t2"), "c1", default_ts_ms=NOW)
    assert store.query_rows("SELECT rack, leaf, gpu_model, driver_version, firmware_version FROM hosts FINAL "
                            "WHERE host = 'inv-t2'", tag="test") == [
        ("r07", "leaf-3", "NVIDIA H100 80GB HBM3", "550.54.15", "bmc-1.2")]
    # Nothing new to say: nothing written again.
    assert inventory.write(list(inventory.from_labels("DCGM_FI_DEV_GPU_TEMP", dcgm_labels("inv-t2", 0, "00000000:18:00.0"),
                                                      "c1", "inv-t2", "gpu0"))) == {}


def test_a_kernel_xid_maps_to_the_gpu_named_by_the_scraped_pci_bus_id_and_the_inbox_says_so(clean_store):
    service.ingest_prometheus_text(exposition("inv-t3"), "c1", default_ts_ms=NOW)
    t0 = datetime.fromtimestamp(NOW / 1000 + 120, timezone.utc)
    line = (f"{datetime.fromtimestamp(NOW / 1000, timezone.utc).isoformat()} inv-t3 kernel: NVRM: Xid "
            "(PCI:0000:9a:00): 94, pid=7, name=python3, Contained ECC error.\n")
    report = service.ingest_kernel_log(line, "c1")
    assert report.unmapped_pci == []
    assert store.query_rows("SELECT component, code FROM events", tag="test") == [("gpu3", 94)]
    service.ingest_sacct("JobID|State|Submit|Start|End|NodeList\n"
                         f"9|NODE_FAIL|{(t0.replace(tzinfo=None)).isoformat(timespec='seconds')}|"
                         f"{t0.replace(tzinfo=None).isoformat(timespec='seconds')}|"
                         f"{t0.replace(tzinfo=None).isoformat(timespec='seconds')}|inv-t3\n", "c1")
    row = interruptions.list_interruptions(interruptions.InterruptionQuery(cluster="c1")).rows[0]
    assert row.events[0].label == "XID 94 gpu3@inv-t3"


def test_an_xid_logged_before_the_gpu_was_scraped_still_names_its_gpu_in_the_inbox(clean_store):
    t0 = datetime.fromtimestamp(NOW / 1000 + 120, timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")
    line = (f"{datetime.fromtimestamp(NOW / 1000, timezone.utc).isoformat()} inv-t4 kernel: NVRM: Xid "
            "(PCI:0000:18:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n")
    assert service.ingest_kernel_log(line, "c1").unmapped_pci == ["inv-t4 0000:18:00.0"]
    service.ingest_sacct(f"JobID|State|Submit|Start|End|NodeList\n10|NODE_FAIL|{t0}|{t0}|{t0}|inv-t4\n", "c1")
    service.ingest_prometheus_text(exposition("inv-t4"), "c1", default_ts_ms=NOW)
    row = interruptions.list_interruptions(interruptions.InterruptionQuery(cluster="c1")).rows[0]
    assert row.events[0].label == "XID 79 gpu0@inv-t4"


def test_relayed_scrapes_without_host_labels_keep_each_hosts_own_nic(clean_store):
    # node_exporter scrapes forwarded with ?host=: one label set shared by every host of the cluster.
    body = ('node_infiniband_info{board_id="MT_0000000838",device="mlx5_0",firmware_version="28.39.1002",'
            'hca_type="MT4129"} 1\nnode_load1 0.5\n')
    for host in ("inv-h1", "inv-h2"):
        report = service.ingest_prometheus_text(body, "c1", default_host=host, default_ts_ms=NOW)
        assert report.rows["components"] == 1
    assert service.ingest_prometheus_text(body, "c1", default_host="inv-h1", default_ts_ms=NOW + 1).rows.get(
        "components", 0) == 0  # already known for that host: nothing new to write
    for host in ("inv-h1", "inv-h2"):
        assert components(host) == [("mlx5_0", "nic", "MT4129", "", "", "", "28.39.1002")]
    assert components("default-host") == []


def test_concurrent_requests_share_one_inventory_read_and_write_and_known_rows_cost_no_store_call(
        clean_store, monkeypatch):
    """The warm-up of a fleet: every request notes new GPUs. Requests queued behind a running
    inventory write are merged into one read and one insert per table; a GPU this process has
    already stored costs no store call at all."""
    import threading

    reads: list[str] = []
    entered, release = threading.Event(), threading.Event()
    real_current = inventory._current

    def counted_current(table, clusters, hosts, cols):  # the real read, counted; the first one held
        reads.append(table)
        if not entered.is_set():
            entered.set()
            release.wait(30)
        return real_current(table, clusters, hosts, cols)

    monkeypatch.setattr(inventory, "_current", counted_current)

    def noted(host: str, name: str = "DCGM_FI_DEV_GPU_TEMP") -> list:
        return [e for g, pci in ((0, "00000000:18:00.0"), (1, "00000000:2A:00.0"))
                for e in inventory.from_labels(name, dcgm_labels(host, g, pci), "c1", host, f"gpu{g}")]

    results: dict = {}

    def run(host: str) -> None:
        results[host] = inventory.write(noted(host))

    first = threading.Thread(target=run, args=("inv-c0",))
    first.start()
    assert entered.wait(30)
    others = [threading.Thread(target=run, args=(f"inv-c{k}",)) for k in range(1, 6)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 30
    while inventory._batcher.queued_weight() < 5 * 3:  # 5 requests x (1 host row + 2 GPUs) queued
        assert time.monotonic() < deadline, "the requests never queued"
        time.sleep(0.01)
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert reads == ["hosts", "components", "hosts", "components"]  # 2 writes for 6 requests, not 6
    assert all(results[f"inv-c{k}"] == {"hosts": 1, "components": 2} for k in range(6))
    for k in range(6):
        assert [r[0] for r in components(f"inv-c{k}")] == ["gpu0", "gpu1"]
    # Another DCGM field of the same GPUs (a new label set): known here, so no store call.
    assert inventory.write(noted("inv-c3", "DCGM_FI_DEV_POWER_USAGE")) == {}
    assert len(reads) == 4


def test_remembered_answers_follow_every_label_the_inventory_reads():
    """from_labels remembers its answer per GPU (25 DCGM fields carry the same labels): a label it
    reads that changes (a driver upgrade, another board in the slot) gives the new answer."""
    before = dcgm_labels("inv-m1", 0, "00000000:18:00.0")
    first = inventory.from_labels("DCGM_FI_DEV_GPU_TEMP", before, "c1", "inv-m1", "gpu0")
    assert inventory.from_labels("DCGM_FI_DEV_POWER_USAGE", before, "c1", "inv-m1", "gpu0") == first
    upgraded = {**before, "DCGM_FI_DRIVER_VERSION": "560.28.03"}
    hosts = [e for e in inventory.from_labels("DCGM_FI_DEV_GPU_TEMP", upgraded, "c1", "inv-m1", "gpu0")
             if e.table == "hosts"]
    assert dict(hosts[0].fields)["driver_version"] == "560.28.03"
    swapped = {**before, "DCGM_FI_DEV_SERIAL": "1659999999", "UUID": "GPU-new"}
    gpu = [e for e in inventory.from_labels("DCGM_FI_DEV_GPU_TEMP", swapped, "c1", "inv-m1", "gpu0")
           if e.table == "components"]
    assert dict(gpu[0].fields)["serial"] == "1659999999" and dict(gpu[0].fields)["uuid"] == "GPU-new"
