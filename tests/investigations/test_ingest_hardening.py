"""Hostile and clumsy bodies at /api/ingest/* (issue 12): node-list bombs, truncated
gzip, non-finite readings, times outside the window, names outside the grammar.
Each case was first seen accepted (200, rows stored) and is now refused or
handled by the one rule in ``telemetry.ingestion.limits``."""
from __future__ import annotations

import gzip
import json
import struct
import time
import tracemalloc
import zlib
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from investigations.ingest_limits import rate_limiter
from telemetry import store
from telemetry.ingestion import limits
from telemetry.ingestion.remote_write import RWSeries, encode_write_request

NOW = (int(time.time()) // 3600 - 24) * 3_600_000


def rows(table: str = "samples", where: str = "1") -> int:
    return store.query_rows(f"SELECT count() FROM {table} WHERE {where}", tag="test")[0][0]


def all_rows() -> int:
    return sum(rows(t) for t in ("samples", "events", "jobs", "job_hosts"))


def post(client, path, body, token, content_type="text/plain", query="", **meta):
    rate_limiter.reset()
    meta.setdefault("HTTP_AUTHORIZATION", f"Bearer {token}")
    return client.post(f"/api/ingest/{path}{query}", data=body, content_type=content_type, **meta)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


# --- 1. the sacct NodeList bomb ---------------------------------------------------------------


@pytest.mark.parametrize("nodelist, hosts", [
    ("hb[0-999][0-999]", 1_000_000),
    ("hc[0-999][0-2999]", 3_000_000),
    ("x[0-999][0-999][0-999]", 1_000_000_000),
    ("a[0-99999],b[0-99999]", 200_000),
])
def test_a_node_list_that_expands_past_the_job_limit_is_refused_without_expanding_it(
        client, clean_store, token, nodelist, hosts):
    body = f"JobID|State|NodeList\n7|FAILED|{nodelist}\n"
    post(client, "sacct", body, token)  # the first request warms imports and caches up: measure the second
    tracemalloc.start()
    try:
        response = post(client, "sacct", body, token)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 413, response.content
    answer = response.json()
    assert answer["field"] == "NodeList" and answer["line"] == 2
    assert f"{hosts} hosts" in answer["reason"] and f"limit of {limits.MAX_HOSTS_PER_JOB} hosts per job" in answer["reason"]
    assert peak < 2_000_000, f"refusing the bomb allocated {peak} bytes"  # a million host names is ~60 MB
    assert all_rows() == 0


def test_many_jobs_within_the_job_limit_are_refused_past_the_batch_limit(client, clean_store, token):
    per_job = 60_000
    lines = [f"{j}|FAILED|n{j}x[0-{per_job - 1}]" for j in range(1, 6)]  # 300,000 > 250,000 rows
    response = post(client, "sacct", "JobID|State|NodeList\n" + "\n".join(lines) + "\n", token)
    assert response.status_code == 413, response.content
    answer = response.json()
    assert answer["field"] == "NodeList" and answer["line"] == 6
    assert f"over {limits.MAX_HOSTS_PER_BATCH} job -> host rows" in answer["reason"]
    assert all_rows() == 0


def test_an_overflowing_node_count_names_the_field(client, clean_store, token):
    response = post(client, "sacct", "JobID|State|NNodes\n7|FAILED|99999999999999999999\n", token)
    assert response.status_code == 413, response.content
    assert response.json()["field"] == "NNodes" and "OverflowError" not in response.content.decode()
    response = post(client, "sacct", "JobID|State|AllocTRES\n7|FAILED|gres/gpu=99999999999\n", token)
    assert response.status_code == 400 and response.json()["field"] == "AllocTRES"
    assert all_rows() == 0


def test_a_real_sized_allocation_is_still_stored(client, clean_store, token):
    response = post(client, "sacct", "JobID|State|NodeList\n7|FAILED|gpu[0001-2048]\n", token)
    assert response.status_code == 200, response.content
    assert rows("job_hosts") == 2048


# --- 2. truncated gzip bodies -------------------------------------------------------------------


def _flushed_gzip(first: bytes, second: bytes) -> tuple[bytes, int]:
    """A gzip body and the length of its prefix that ends on a full flush after ``first``:
    the prefix inflates cleanly to ``first`` but lacks the stream's end."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = comp.compress(first) + comp.flush(zlib.Z_FULL_FLUSH)
    return head + comp.compress(second) + comp.flush(), len(head)


TEXT_BODIES = {
    "prometheus": (
        f"# TYPE node_load1 gauge\nnode_load1{{instance=\"gpu-a001:9100\"}} 12.0\n",
        f"node_load15{{instance=\"gpu-a001:9100\"}} 123.5 {NOW}\n",
    ),
    "kernel-log": (
        f"{iso(NOW)}+00:00 gpu-a001 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n",
        f"{iso(NOW + 1000)}+00:00 gpu-a001 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE.\n",
    ),
    "sacct": (
        f"JobID|State|Start|End|NodeList\n",
        f"7|FAILED|{iso(NOW - 3_600_000)}|{iso(NOW)}|gpu-a[001-004]\n",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(TEXT_BODIES))
def test_a_gzip_body_cut_after_a_full_flush_is_refused_and_nothing_is_stored(client, clean_store, token, path):
    first, second = TEXT_BODIES[path]
    whole, flushed = _flushed_gzip(first.encode(), second.encode())
    response = post(client, path, whole[:flushed], token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400, (path, response.content)
    assert response.json()["field"] == "body" and "truncated" in response.json()["reason"]
    assert all_rows() == 0
    # Every other cut is refused too: none is stored as far as it went.
    for cut in range(1, len(whole)):
        response = post(client, path, whole[:cut], token, HTTP_CONTENT_ENCODING="gzip")
        assert response.status_code == 400, (path, cut, response.content)
    assert all_rows() == 0
    response = post(client, path, whole, token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert all_rows() > 0


def test_a_gzip_body_of_several_members_is_read_whole(client, clean_store, token):
    first, second = TEXT_BODIES["prometheus"]
    body = gzip.compress(first.encode()) + gzip.compress(second.encode())
    response = post(client, "prometheus", body, token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert rows() == 2 and rows(where=f"value = 123.5 AND ts = fromUnixTimestamp64Milli({NOW})") == 1


def test_a_gzip_bomb_is_refused_at_the_body_limit(client, clean_store, token, settings):
    settings.INGEST_MAX_BODY_BYTES = 1 << 20
    body = gzip.compress(b"node_load1{instance=\"h:1\"} 1\n" + b"#" * (8 << 20))
    response = post(client, "prometheus", body, token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and response.json()["field"] == "body"
    assert rows() == 0


def test_a_snappy_body_declaring_a_huge_size_is_refused_before_inflating():
    declared = limits.MAX_HOSTS_PER_BATCH  # any number: the header is read, nothing inflated
    header = bytearray()
    n = 1 << 31
    while n >= 0x80:
        header.append(n & 0x7F | 0x80)
        n >>= 7
    header.append(n)
    with pytest.raises(limits.TooLarge, match="declares 2147483648 bytes"):
        limits.check_snappy_size(bytes(header) + b"\x00" * 10, 256 << 20)
    limits.check_snappy_size(bytes([declared & 0x7F]), 256 << 20)  # small: fine


# --- 8. one rule for readings ---------------------------------------------------------------------


def test_non_finite_readings_are_no_data_on_every_samples_path(client, clean_store, token):
    text = "".join(f'node_load1{{instance="gpu-a00{i}:9100"}} {v} {NOW}\n'
                   for i, v in enumerate(["NaN", "+Inf", "-Inf", "1e400", "-1e400", "7.5"]))
    response = post(client, "prometheus", text, token)
    assert response.status_code == 200, response.content
    assert response.json()["dropped_blank"] == 5 and response.json()["rows"] == {"samples": 1}
    body = encode_write_request([RWSeries({"__name__": "node_load5", "instance": "gpu-b001:9100"},
                                          [NOW, NOW + 1, NOW + 2, NOW + 3],
                                          [float("inf"), float("-inf"), float("nan"), 2.5])])
    response = post(client, "remote-write", body, token, "application/x-protobuf", HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 200 and response.content == b"", response.content
    assert response["X-Precursor-Rows-Written"] == "1"
    stored = store.query_rows("SELECT value FROM samples ORDER BY value", tag="test")
    assert stored == [(2.5,), (7.5,)]


def test_non_finite_readings_are_no_data_in_bulk_files(clean_store):
    from telemetry.ingestion import service

    csv = (f"ts,host,component,metric,value\n{NOW},n1,gpu0,gpu.temp,inf\n{NOW},n1,gpu0,gpu.power,-inf\n"
           f"{NOW},n1,gpu0,gpu.util,1e400\n{NOW},n1,gpu1,gpu.temp,50\n")
    report = service.ingest_bulk(csv.encode(), "csv", cluster="c")
    assert report.rows == {"samples": 1} and report.dropped_blank == 3


@pytest.mark.parametrize("ts", [
    int(datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp() * 1000),
    int(datetime(2299, 6, 1, tzinfo=timezone.utc).timestamp() * 1000),
    2**63 - 1,
    int(datetime(1999, 12, 31, tzinfo=timezone.utc).timestamp() * 1000),
    int(time.time() * 1000) + 2 * 86_400_000,
])
def test_a_reading_outside_the_time_window_refuses_the_batch(client, clean_store, token, ts):
    text = f'node_load1{{instance="gpu-a001:9100"}} 1 {NOW}\nnode_load1{{instance="gpu-a002:9100"}} 2 {ts}\n'
    response = post(client, "prometheus", text, token)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "ts" and "[2000-01-01, now + 1 day]" in response.json()["reason"]
    body = encode_write_request([RWSeries({"__name__": "node_load1", "instance": "gpu-a001:9100"}, [NOW, ts], [1.0, 2.0])])
    response = post(client, "remote-write", body, token, "application/x-protobuf", HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 400 and response.json()["field"] == "ts"
    assert all_rows() == 0


def test_a_reading_just_inside_the_window_is_stored(client, clean_store, token):
    soon = int(time.time() * 1000) + 3_600_000  # an hour ahead: a drifting clock, still kept
    text = f'node_load1{{instance="gpu-a001:9100"}} 1 {soon}\n'
    assert post(client, "prometheus", text, token).status_code == 200
    assert rows() == 1


@pytest.mark.parametrize("ts", ["99999999999999999999999", "4102444800000", "2300-01-01T00:00:00Z", "-5"])
def test_an_out_of_window_or_overflowing_ts_parameter_names_the_field(client, clean_store, token, ts):
    response = post(client, "prometheus", 'node_load1{instance="gpu-a001:9100"} 1\n', token, query=f"?ts={ts}")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "ts" and "OverflowError" not in response.content.decode()
    assert rows() == 0


def test_kernel_log_and_sacct_times_follow_the_same_window(client, clean_store, token):
    line = "2300-01-01T00:00:00+00:00 gpu-a001 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=x, off the bus.\n"
    response = post(client, "kernel-log", line, token)
    assert response.status_code == 400 and response.json()["field"] == "ts" and response.json()["line"] == 1
    response = post(client, "sacct", "JobID|State|Start|End\n1|FAILED|2020-01-01T00:00:00|2100-01-01T00:00:00\n", token)
    assert response.status_code == 400 and response.json()["field"] == "end_ts" and response.json()["line"] == 2
    assert all_rows() == 0


BAD_HOSTS = ["gpu\x00a001", "gpu a001", "<script>alert(1)</script>", "gpu-a001\n", "h" * 254]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_a_host_name_outside_the_grammar_is_refused_on_every_path(client, clean_store, token, host):
    label = host.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    response = post(client, "prometheus", f'node_load1{{hostname="{label}"}} 1 {NOW}\n', token)
    assert response.status_code == 400, (host, response.content)
    assert response.json()["field"] == "host"
    body = encode_write_request([RWSeries({"__name__": "node_load1", "hostname": host}, [NOW], [1.0])])
    response = post(client, "remote-write", body, token, "application/x-protobuf", HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 400 and response.json()["field"] == "host"
    xid = "[ 1234.567] NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=x, off the bus.\n"
    from urllib.parse import quote

    response = post(client, "kernel-log", xid, token, query=f"?host={quote(host)}")
    assert response.status_code == 400 and response.json()["field"] == "host"
    if "\n" not in host:
        response = post(client, "sacct", f"JobID|State|NodeList\n1|FAILED|{host}\n", token)
        assert response.status_code == 400 and response.json()["field"] == "host", response.content
    assert all_rows() == 0


def test_a_ten_megabyte_host_name_is_refused_and_not_echoed(client, clean_store, token):
    host = "h" * (10 << 20)
    response = post(client, "prometheus", f'node_load1{{hostname="{host}"}} 1 {NOW}\n', token)
    assert response.status_code == 400 and response.json()["field"] == "host"
    assert len(response.content) < 2_000
    assert rows() == 0


def _ingest_accepts(host: str, component: str) -> bool:
    import pyarrow as pa

    from telemetry import schema
    from telemetry.ingestion.errors import IngestError

    table = pa.Table.from_pydict({"ts": [NOW], "cluster": ["c"], "host": [host], "component": [component],
                                  "metric": ["gpu.temp"], "value": [1.0]}, schema=schema.SAMPLES)
    try:
        limits.check_table("samples", table)
        return True
    except IngestError:
        return False


def _page_accepts(host: str, component: str) -> bool:
    from telemetry.queries import overlay

    query = overlay.OverlayQuery(cluster="c", t0=datetime.now(timezone.utc), start_offset_s=-3600, end_offset_s=600,
                                 signals=[overlay.SignalSpec("gpu.temp", host, component)])
    try:
        overlay.validate(query, allowed_hosts=None)
        return True
    except overlay.InvalidSignal:
        return False


NAME_CHARS = "aZ09_.:-/ <>\x00\n'\"é"


@pytest.mark.slow
@given(host=st.text(alphabet=NAME_CHARS, max_size=12) | st.sampled_from(BAD_HOSTS + ["gpu-a001", "10.0.0.7", "fe80::1"]),
       component=st.text(alphabet=NAME_CHARS, max_size=12) | st.sampled_from(["", "gpu3", "mlx5_0/1", "x" * 129]))
@hsettings(max_examples=300, deadline=None)
def test_ingest_and_the_case_page_accept_the_same_host_and_component_names(host, component):
    """One grammar: what ingest stores, the case page charts, and the other way round."""
    assert _ingest_accepts(host, component) == _page_accepts(host, component), (host, component)
