"""Ingestion service: every format parses the whole batch before writing, stores
what it should, rejects bad batches whole, and a retried batch adds no rows."""
from __future__ import annotations

import io
import itertools
import json
import struct
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from telemetry import catalog, store, writer, xid
from telemetry.ingestion import service
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.remote_write import RWSeries, encode_write_request
from tests.conftest import shared_file

FIXTURES = Path(__file__).parent / "fixtures"
# Recent enough that the store's retention (TTL) keeps every row, fixed within the run.
TS = (int(time.time()) // 3600 - 24) * 3_600_000
YEAR = datetime.now(timezone.utc).year
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def count(table: str, where: str = "1", params: dict | None = None) -> int:
    return store.query_rows(f"SELECT count() FROM {table} WHERE {where}", params or {}, tag="test")[0][0]


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def this_year(text: str) -> str:
    """The fixture's 2024 lines moved to this year (Mar 14), so the store's TTL keeps them."""
    return text.replace("2024", str(YEAR))


def canonical(name: str) -> str:
    return catalog.resolve(name).name


# --- prometheus text ---------------------------------------------------------------------


def test_a_dcgm_scrape_lands_with_canonical_names_and_no_blank_sentinels(clean_store):
    report = service.ingest_prometheus_text((FIXTURES / "dcgm_h100_scrape.txt").read_text(), "c1", default_ts_ms=TS)
    assert report.rows["samples"] == count("samples") > 0
    assert report.dropped_blank == 3
    temp = store.query_rows(
        "SELECT host, component, value FROM samples WHERE metric = {m:String} ORDER BY component",
        {"m": canonical("DCGM_FI_DEV_GPU_TEMP")}, tag="test")
    assert temp == [("gpu-a017", "gpu0", 41.0), ("gpu-a017", "gpu1", 43.0)]
    # A DCGM blank value is "no data": never stored as a reading.
    assert count("samples", "value >= 2147483632") == 0


def test_metrics_outside_the_catalog_are_kept_under_their_own_name(clean_store):
    text = 'my_site_fan_rpm{instance="gpu-a001:9100",fan="3"} 8100\nnode_load1{instance="gpu-a001:9100"} 2.5\n'
    report = service.ingest_prometheus_text(text, "c1", default_ts_ms=TS)
    assert report.unknown_metrics == ["my_site_fan_rpm"]
    assert store.query_rows("SELECT host, value FROM samples WHERE metric = 'my_site_fan_rpm'", tag="test") == [
        ("gpu-a001", 8100.0)]


def test_a_bad_line_rejects_the_whole_scrape_and_names_the_line(clean_store):
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h1"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="h1"} forty\n'
    with pytest.raises(IngestError) as err:
        service.ingest_prometheus_text(text, "c1", default_ts_ms=TS)
    assert err.value.line == 2
    assert count("samples") == 0


def test_a_series_without_a_host_is_rejected_unless_a_default_host_is_given(clean_store):
    text = "node_load1 2.5\n"
    with pytest.raises(IngestError) as err:
        service.ingest_prometheus_text(text, "c1", default_ts_ms=TS)
    assert err.value.field == "host"
    assert count("samples") == 0
    service.ingest_prometheus_text(text, "c1", default_host="gpu-z9", default_ts_ms=TS)
    assert store.query_rows("SELECT host FROM samples", tag="test") == [("gpu-z9",)]


def test_a_retried_scrape_with_the_same_time_adds_no_rows(clean_store):
    text = (FIXTURES / "dcgm_h100_scrape.txt").read_text()
    first = service.ingest_prometheus_text(text, "c1", default_ts_ms=TS)
    service.ingest_prometheus_text(text, "c1", default_ts_ms=TS)
    assert count("samples") == first.rows["samples"]
    # The same bytes scraped a second later are new readings (an idle GPU repeats itself).
    service.ingest_prometheus_text(text, "c1", default_ts_ms=TS + 1000)
    assert count("samples") == 2 * first.rows["samples"]


def test_a_fleet_body_lands_whole_with_its_own_timestamps_and_a_bad_line_still_names_itself(clean_store):
    # A /federate-like body: many hosts back to back, every sample with its timestamp.
    lines = []
    for h in range(20):
        lines.append("# TYPE DCGM_FI_DEV_GPU_TEMP gauge")
        lines += [f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="gpu-{h:03d}"}} {40 + g} {TS + h}' for g in range(8)]
    text = "\n".join(lines) + "\n"
    for _ in range(2):  # second time through warm caches: same rows, de-duplicated
        report = service.ingest_prometheus_text(text, "c1", default_ts_ms=TS - 5000)
        assert report.rows["samples"] == 160
    assert count("samples") == 160
    assert count("samples", "ts = fromUnixTimestamp64Milli({t:Int64})", {"t": TS + 7}) == 8
    bad = text + 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-000"} 4O\n'
    with pytest.raises(IngestError) as exc:
        service.ingest_prometheus_text(bad, "c1", default_ts_ms=TS)
    assert (exc.value.line, exc.value.field) == (len(lines) + 1, "value")
    assert count("samples") == 160


@pytest.mark.parametrize("name", ["dcgm-exporter-metrics-sample.txt", "dcgm-exporter-metrics-sample-t4.txt",
                                  "node-exporter-sample.txt"])
def test_every_real_scrape_sample_is_stored(clean_store, name):
    text = shared_file(name).read_text()
    report = service.ingest_prometheus_text(text, "real", default_host="sample-host", default_ts_ms=TS)
    assert report.rows["samples"] > 10
    assert count("samples", "cluster = 'real'") == report.rows["samples"]


def test_the_real_dcgm_snippets_are_stored(clean_store):
    text = shared_file("dcgm-exporter-metrics-snippets.txt").read_text()
    scrape = "\n".join(l for l in text.splitlines() if l.startswith(("#", "DCGM_")) or not l.strip()) + "\n"
    report = service.ingest_prometheus_text(scrape, "real", default_host="sample-host", default_ts_ms=TS)
    assert report.rows["samples"] == count("samples") > 0


# --- remote write ------------------------------------------------------------------------


def rw_body(values=(1.0, 2.0), name="node_load1", instance="gpu-a001:9100", ts0=TS):
    labels = {"__name__": name, "instance": instance, "job": "node"}
    return encode_write_request([RWSeries(labels, [ts0 + i * 1000 for i in range(len(values))], list(values))])


def test_remote_write_samples_land_and_stale_markers_are_not_stored(clean_store):
    report = service.ingest_remote_write(rw_body((1.5, STALE, 2.5)), "c1")
    assert report.rows["samples"] == 2 and report.dropped_blank == 1
    assert store.query_rows("SELECT host, metric, value FROM samples ORDER BY ts", tag="test") == [
        ("gpu-a001", canonical("node_load1"), 1.5), ("gpu-a001", canonical("node_load1"), 2.5)]


def test_a_retried_remote_write_adds_no_rows(clean_store):
    body = rw_body((1.0, 2.0, 3.0))
    service.ingest_remote_write(body, "c1")
    service.ingest_remote_write(body, "c1")
    assert count("samples") == 3


def test_a_corrupt_remote_write_body_is_rejected_and_nothing_stored(clean_store):
    with pytest.raises(IngestError) as err:
        service.ingest_remote_write(b"not snappy at all" * 3, "c1")
    assert err.value.field == "body"
    assert count("samples") == 0


# --- kernel log --------------------------------------------------------------------------


def put_gpu(cluster: str, host: str, component: str, pci: str) -> None:
    table = pa.table({
        "cluster": [cluster], "host": [host], "component": [component], "kind": ["gpu"], "model": ["H100"],
        "serial": ["1"], "uuid": ["GPU-x"], "pci_bus_id": [pci], "firmware": [""], "peer": [""],
        "updated": pa.array([TS], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
    })
    writer.write("components", table)


def test_xid_lines_become_events_mapped_to_gpus_through_the_inventory(clean_store):
    put_gpu("c1", "gpu-b203", "gpu6", "00000000:9A:00.0")
    report = service.ingest_kernel_log(this_year((FIXTURES / "kernel_mixed.log").read_text()), "c1",
                                       host="gpu-b203", now_ts_ms=ms(YEAR, 6, 1))
    assert report.rows["events"] == count("events") >= 4
    assert report.skipped_lines >= 1
    rows = store.query_rows(
        "SELECT host, component, code, severity, attributes['pci_bus_id'], attributes['xid_meaning'], "
        "attributes['pid'], attributes['process'] FROM events WHERE code = 94", tag="test")
    info = xid.describe(94)
    assert rows == [("gpu-b203", "gpu6", 94, info.severity, "0000:9a:00.0", info.meaning, "51100", "python3")]


def test_an_xid_on_an_unknown_pci_id_keeps_the_id_and_an_empty_component(clean_store):
    line = f"{YEAR}-03-14T02:11:10.250000+00:00 gpu-q1 kernel: NVRM: Xid (PCI:0000:c1:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    report = service.ingest_kernel_log(line, "c1")
    assert report.unmapped_pci == ["gpu-q1 0000:c1:00.0"]
    assert store.query_rows("SELECT host, component, attributes['pci_bus_id'], toUnixTimestamp64Milli(ts) FROM events", tag="test") == [
        ("gpu-q1", "", "0000:c1:00.0", ms(YEAR, 3, 14, 2, 11, 10) + 250)]


def test_a_kernel_log_without_any_host_is_rejected_naming_the_line(clean_store):
    text = "hello\n[Thu Mar 14 02:11:11 2024] NVRM: Xid (PCI:0000:9a:00): 95, pid=1, name=p, Uncontained ECC error.\n"
    with pytest.raises(IngestError) as err:
        service.ingest_kernel_log(text, "c1")
    assert (err.value.line, err.value.field) == (2, "host")
    assert count("events") == 0


def test_a_retried_kernel_log_adds_no_rows(clean_store):
    text = this_year((FIXTURES / "kernel_mixed.log").read_text())
    first = service.ingest_kernel_log(text, "c1", host="gpu-b203", now_ts_ms=ms(YEAR, 6, 1))
    service.ingest_kernel_log(text, "c1", host="gpu-b203", now_ts_ms=ms(YEAR, 6, 1))
    assert count("events") == first.rows["events"]


def test_every_real_xid_line_becomes_an_event(clean_store):
    text = shared_file("kernel-xid-lines.txt").read_text()
    expected = sum(1 for line in text.splitlines() if "NVRM: Xid" in line and not line.startswith("#"))
    report = service.ingest_kernel_log(text, "real", host="sample-host", now_ts_ms=ms(2025, 6, 1))
    assert report.rows["events"] == expected
    # The samples date from 2024-25: rows past the store's retention are reported as expired (the
    # store drops them on arrival or at its next merge); every other one is stored.
    assert expected - report.expired <= count("events", "kind = 'xid'") <= expected
    assert count("events", "code = 0") == 0


# --- sacct -------------------------------------------------------------------------------


def test_sacct_gives_jobs_and_host_allocations(clean_store):
    report = service.ingest_sacct((FIXTURES / "sacct_gpu_jobs.txt").read_text(), "c1", observed_ts_ms=TS)
    assert report.rows["jobs"] == count("jobs") >= 2
    assert store.query_rows("SELECT state, n_gpus FROM jobs FINAL WHERE job_id = '88001'", tag="test") == [
        ("NODE_FAIL", 16)]
    assert store.query_rows("SELECT host FROM job_hosts FINAL WHERE job_id = '88001' ORDER BY host", tag="test") == [
        ("gpu-b203",), ("gpu-b204",)]


def test_a_retried_sacct_batch_adds_no_rows_even_observed_later(clean_store):
    text = (FIXTURES / "sacct_gpu_jobs.txt").read_text()
    first = service.ingest_sacct(text, "c1", observed_ts_ms=TS)
    service.ingest_sacct(text, "c1", observed_ts_ms=TS + 60_000)
    assert count("jobs") == first.rows["jobs"] and count("job_hosts") == first.rows["job_hosts"]


def test_a_bad_sacct_row_rejects_the_batch(clean_store):
    text = "JobID|State|NodeList\n1|COMPLETED|n1\n2|EXPLODED|n2\n"
    with pytest.raises(IngestError) as err:
        service.ingest_sacct(text, "c1")
    assert (err.value.line, err.value.field) == (3, "State")
    assert count("jobs") == count("job_hosts") == 0


def test_every_real_sacct_capture_is_stored(clean_store):
    blocks, cur = [], []
    for line in shared_file("sacct-sample.txt").read_text().splitlines() + [""]:
        if line.startswith("#") or not line.strip():
            if cur:
                blocks.append("\n".join(cur) + "\n")
                cur = []
        else:
            cur.append(line)
    total = 0
    for block in blocks:
        total += service.ingest_sacct(block, "real", observed_ts_ms=TS).rows["jobs"]
    assert total > 0 and count("jobs", "cluster = 'real'") == total


# --- bulk --------------------------------------------------------------------------------


def test_bulk_csv_with_iso_and_epoch_times(clean_store):
    iso = datetime.fromtimestamp(TS / 1000, timezone.utc)
    data = (b"ts,host,component,metric,value\n"
            + f"{iso:%Y-%m-%dT%H:%M:%S}Z,h1,gpu0,gpu.temperature,40\n".encode()
            + f"{TS // 1000},h1,gpu0,gpu.temperature,41\n".encode()
            + f"{TS + 1000},h1,gpu0,gpu.temperature,\n".encode()
            + f"{iso:%Y-%m-%d %H:%M}:02.5,h1,,node_load1,2.5\n".encode())
    report = service.ingest_bulk(data, "csv", cluster="c1")
    assert report.rows["samples"] == 3 and report.dropped_blank == 1
    rows = store.query_rows("SELECT toUnixTimestamp64Milli(ts), cluster, component, value FROM samples ORDER BY ts",
                            tag="test")
    assert rows == [(TS, "c1", "gpu0", 40.0), (TS, "c1", "gpu0", 41.0), (TS + 2500, "c1", "", 2.5)]


@pytest.mark.parametrize("data, line, field", [
    (b"ts,host,metric,value\n2024-03-14T02:11:10Z,h1,m,1\n2024-03-14T02:11:10Z,h1,m,x\n", 3, "value"),
    (b"ts,host,metric,value\nyesterday,h1,m,1\n", 2, "ts"),
    (b"ts,host,metric,value\n2024-03-14T02:11:10Z,,m,1\n", 2, "host"),
    (b"ts,host,metric,value,colour\n2024-03-14T02:11:10Z,h,m,1,red\n", 1, "colour"),
    (b"ts,host,value\n2024-03-14T02:11:10Z,h,1\n", 1, "metric"),
    (b"ts,host,metric,value\n2024-03-14T02:11:10Z,h,m,1\n2024-03-14T02:11:10Z,h,m\n", 3, None),
])
def test_bad_bulk_csv_names_line_and_field_and_stores_nothing(clean_store, data, line, field):
    with pytest.raises(IngestError) as err:
        service.ingest_bulk(data, "csv", cluster="c1")
    assert (err.value.line, err.value.field) == (line, field)
    assert count("samples") == 0


def test_bulk_jsonl_events_with_attributes(clean_store):
    lines = [
        {"ts": f"{datetime.fromtimestamp(TS / 1000, timezone.utc):%Y-%m-%dT%H:%M:%S}Z", "host": "h1",
         "component": "gpu2", "source": "dcgm", "kind": "xid",
         "code": 79, "severity": "critical", "message": "fallen off the bus", "attributes": {"pci_bus_id": "0000:9a:00.0"}},
        {"ts": TS + 1000, "host": "h1", "source": "network", "kind": "link_down", "message": "mlx5_0 down"},
    ]
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    report = service.ingest_bulk(data, "jsonl", "events", cluster="c1")
    assert report.rows["events"] == 2
    assert store.query_rows("SELECT kind, code, component, attributes['pci_bus_id'] FROM events ORDER BY ts",
                            tag="test") == [("xid", 79, "gpu2", "0000:9a:00.0"), ("link_down", 0, "", "")]


def test_bad_bulk_jsonl_names_the_line(clean_store):
    data = b'{"ts": "2024-03-14T02:11:10Z", "host": "h", "metric": "m", "value": 1}\n\n{"ts": "2024-03-14T02:11:10Z", "host": "h", "metric": "m", "value": "hot"}\n'
    with pytest.raises(IngestError) as err:
        service.ingest_bulk(data, "jsonl", cluster="c1")
    assert (err.value.line, err.value.field) == (3, "value")
    assert count("samples") == 0


def test_bulk_parquet_round_trip_and_retry(clean_store):
    table = pa.table({
        "ts": pa.array([TS, TS + 1000], pa.timestamp("ms")),
        "host": ["h1", "h2"], "metric": ["gpu.temperature", "gpu.temperature"], "value": [40.0, 41.0],
    })
    buf = io.BytesIO()
    pq.write_table(table, buf)
    service.ingest_bulk(buf.getvalue(), "parquet", cluster="c1")
    service.ingest_bulk(buf.getvalue(), "parquet", cluster="c1")
    assert store.query_rows("SELECT host, value FROM samples ORDER BY host", tag="test") == [("h1", 40.0), ("h2", 41.0)]


def test_a_file_that_is_not_parquet_is_rejected(clean_store):
    with pytest.raises(IngestError):
        service.ingest_bulk(b"PAR1 nope", "parquet", cluster="c1")
    assert count("samples") == 0


# --- property tests: the bulk readers ----------------------------------------------------

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

_PROP_RUN = itertools.count()
_CSV_PIECES = st.sampled_from([
    "ts,host,metric,value\n", "ts,host,component,metric,value,cluster\n", "2024-03-14T02:11:10Z,h1,m,1\n",
    "1710382270,h,gpu0,m,2.5,\n", ",,,\n", "x,y\n", '"a,b",c\n', "NaN,h,m,1\n", "\r\n", "1e400,h,m,1\n",
    "-5,h,m,1\n", "2024-13-40T99:00:00Z,h,m,1\n",
])
_JSONL_PIECES = st.sampled_from([
    '{"ts": "2024-03-14T02:11:10Z", "host": "h", "metric": "m", "value": 1}\n', '{"ts": 1e30}\n', "[]\n",
    '{"host": null, "metric": "m", "value": "x", "ts": 5}\n', "{\n", '{"value": true}\n', '{"nope": 1}\n', "\n",
    '{"ts": -1, "host": "h", "metric": "m", "value": 1}\n',
])


@pytest.mark.slow
@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), st.lists(_CSV_PIECES, max_size=6).map(lambda p: "".join(p).encode()),
                      st.lists(_JSONL_PIECES, max_size=6).map(lambda p: "".join(p).encode())),
       fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_arbitrary_bulk_input_is_stored_whole_or_rejected_with_ingest_error(clean_store, data, fmt):
    before = count("samples")
    cluster = f"prop-{next(_PROP_RUN)}"  # a batch of its own: the writer's de-duplication never hides rows
    try:
        report = service.ingest_bulk(data, fmt, cluster=cluster)
    except IngestError as exc:
        assert exc.reason
        assert count("samples") == before
    else:
        # Accepted: exactly the rows it reports are in the store, all in this batch's cluster.
        assert count("samples") - before == report.rows["samples"]
        assert count("samples", "cluster = {c:String}", {"c": cluster}) == report.rows["samples"]


# sacct -D: a job requeued after a node failure is listed once per run under the same JobID (each
# run with its own Submit time: Slurm resets it on requeue), steps after their run's row.
REQUEUED_SACCT = (
    "JobID|JobName|State|ExitCode|Submit|Start|End|NodeList|NNodes\n"
    "7001|llm|NODE_FAIL|0:0|2026-03-01T00:00:00|2026-03-01T00:00:10|2026-03-01T04:00:00|n[1-2]|2\n"
    "7001.batch|batch|CANCELLED|0:15|2026-03-01T00:00:10|2026-03-01T00:00:10|2026-03-01T04:00:00|n1|1\n"
    "7001|llm|FAILED|1:0|2026-03-01T04:00:01|2026-03-01T04:05:00|2026-03-01T09:00:00|n[2-3]|2\n"
    "7001.batch|batch|FAILED|1:0|2026-03-01T04:05:00|2026-03-01T04:05:00|2026-03-01T09:00:00|n2|1\n"
    "7002|eval|COMPLETED|0:0|2026-03-01T00:00:00|2026-03-01T00:00:10|2026-03-01T01:00:00|n4|1\n"
)


def test_every_run_of_a_requeued_job_is_its_own_record_and_its_first_node_fail_an_interruption(clean_store):
    from telemetry.queries import interruptions

    service.ingest_sacct(REQUEUED_SACCT, "c1", observed_ts_ms=TS)
    # A later poll re-reports the second run only (no -D): it replaces that run, not the first.
    service.ingest_sacct(REQUEUED_SACCT.split("\n")[0] + "\n" + REQUEUED_SACCT.split("\n")[3] + "\n", "c1",
                         observed_ts_ms=TS + 60_000)
    rows = store.query_rows("SELECT state, toString(start_ts) FROM jobs FINAL WHERE job_id = '7001' "
                            "ORDER BY start_ts", tag="test")
    assert rows == [("NODE_FAIL", "2026-03-01 00:00:10.000"), ("FAILED", "2026-03-01 04:05:00.000")]
    page = interruptions.list_interruptions(interruptions.InterruptionQuery(cluster="c1"))
    got = sorted((r.job_id, r.state, r.t0.isoformat(), tuple(r.hosts)) for r in page.rows)
    assert got == [("7001", "FAILED", "2026-03-01T09:00:00+00:00", ("n2", "n3")),
                   ("7001", "NODE_FAIL", "2026-03-01T04:00:00+00:00", ("n1", "n2"))]
    assert page.total == 2
    # ... and the analysis windows see it too, with the hosts of its own run.
    from telemetry.queries import windows
    lo, hi = ms(2026, 2, 28), ms(2026, 3, 2)
    chosen, _ = windows.outcome_interruptions("c1", windows.parse_outcome("NODE_FAIL"), 3600,
                                              lo // 1000, hi // 1000, timeout_s=60)
    assert [(i.job_id, i.state, i.hosts) for i in chosen] == [("7001", "NODE_FAIL", ("n1", "n2"))]


def test_mlx5_link_lines_are_stored_as_link_events_on_the_nic_the_inventory_names(clean_store):
    table = pa.table({
        "cluster": ["c1"], "host": ["gpu-n1"], "component": ["mlx5_3"], "kind": ["nic"], "model": ["MT4129"],
        "serial": [""], "uuid": [""], "pci_bus_id": ["0000:1a:00.0"], "firmware": [""], "peer": [""],
        "updated": pa.array([TS], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))})
    writer.write("components", table)
    text = (f"{YEAR}-03-14T02:10:00+00:00 gpu-n1 kernel: mlx5_core 0000:1a:00.0 ibp26s0: Link down\n"
            f"{YEAR}-03-14T02:11:00+00:00 gpu-n1 kernel: mlx5_core 0000:c1:00.0 enp193s0: Link down\n")
    report = service.ingest_kernel_log(text, "c1")
    assert report.rows["events"] == 2 and report.skipped_lines == 0
    assert store.query_rows("SELECT component, kind, severity, attributes['netdev'] FROM events ORDER BY ts",
                            tag="test") == [("mlx5_3", "link_down", "error", "ibp26s0"),
                                            ("enp193s0", "link_down", "error", "enp193s0")]


def test_a_steady_scrape_read_through_its_template_is_checked_as_a_full_parse_is(clean_store):
    """The template path tells the checks what it knows (its one timestamp, every value finite)
    so they need not read the rows again; where it cannot vouch (a NaN among the values) the rows
    are read as in a full parse and the blank value dropped and counted."""
    import datetime as dt

    from telemetry.ingestion import normalize, service

    def body(nan_at=None):
        return "".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="tpl-1"}} {"NaN" if g == nan_at else 40 + g}\n'
                       for g in range(8))

    now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    for k in range(3):  # the first scans make the template, the later ones read through it
        parsed = service.parse_prometheus_text(body(), "tpl", None, now + 1000 * k)
    hits = normalize._text_contexts["tpl"].template_hits
    assert hits >= 1 and parsed.ts_span == (now + 2000, now + 2000)
    assert service.write_samples(parsed, "prometheus", "tpl", "test").rows["samples"] == 8
    blank = service.parse_prometheus_text(body(nan_at=3), "tpl", None, now + 3000)
    assert normalize._text_contexts["tpl"].template_hits == hits + 1  # still the template path
    assert blank.table.num_rows == 7 and blank.dropped_blank == 1
