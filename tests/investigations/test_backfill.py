"""Bringing your own history: years-long backfills, local time zones, component labels and
catalog aliases through both the CLI (`manage.py ingest`) and the HTTP endpoint, each row found
where it belongs; rows older than the retention refused, never "ingested" then gone."""
from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command

from investigations.tokens import create_token
from telemetry import migrate, retention, store

DAY = timedelta(days=1)


def rows(sql: str, **params) -> list[tuple]:
    return store.query_rows(sql, params, tag="test")


def run(*args) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest", *args, "--no-progress", stdout=out, stderr=err)
    return out.getvalue()


@pytest.fixture
def post(client, token):
    def send(path: str, body: bytes, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return client.post(f"/api/ingest/{path}?{query}", data=body, content_type="text/plain",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    return send


def daily_csv(start: datetime, days: int, metric: str = "gpu.temp", step: int = 1) -> bytes:
    """One row every ``step`` days: ``days`` rows."""
    lines = ["ts,host,component,metric,value"]
    for i in range(days):
        t = start + i * step * DAY
        lines.append(f"{t:%Y-%m-%dT%H:%M:%SZ},n1,gpu0,{metric},{i}")
    return ("\n".join(lines) + "\n").encode()


def check_daily(cluster: str, start: datetime, days: int, metric: str = "gpu.temp", step: int = 1) -> None:
    (n, first, last, total), = rows(
        "SELECT count(), toUnixTimestamp(min(ts)), toUnixTimestamp(max(ts)), sum(value) FROM samples "
        "WHERE cluster = {c:String} AND metric = {m:String}", c=cluster, m=metric)
    assert n == days
    assert first == int(start.timestamp()) and last == int((start + (days - 1) * step * DAY).timestamp())
    assert total == days * (days - 1) / 2  # every value once, none doubled
    # one row per day: nothing landed on another day
    per_day = rows("SELECT count() FROM samples WHERE cluster = {c:String} GROUP BY toDate(ts) HAVING count() != 1",
                   c=cluster)
    assert per_day == []


# Samples are partitioned by day and ClickHouse refuses an insert touching > 100 partitions:
# a 5-year file (weekly rows: 261 days with data, every insert costs a part per day, so the
# test stays affordable) and a 348-day daily file.
def SPANS(fn):  # slow: a part per day of data (see ./precursor test --fast)
    return pytest.mark.slow(pytest.mark.parametrize("days,step", [(261, 7), (348, 1)], ids=["5-years", "348-days"])(fn))


@SPANS
def test_backfills_of_any_span_land_whole_through_the_cli(clean_store, tmp_path, days, step):
    start = datetime(2017, 1, 3, 6, 0, tzinfo=timezone.utc)
    path = tmp_path / "history.csv"
    path.write_bytes(daily_csv(start, days, step=step))
    out = run(str(path), "--format", "csv", "--cluster", "cli")
    assert f"ingested {days} samples" in out
    check_daily("cli", start, days, step=step)
    if step == 1:
        run(str(path), "--format", "csv", "--cluster", "cli")  # a re-run adds nothing
        check_daily("cli", start, days)


@SPANS
def test_backfills_of_any_span_land_whole_through_http(clean_store, post, days, step):
    start = datetime(2018, 2, 1, tzinfo=timezone.utc)
    body = daily_csv(start, days, step=step)
    response = post("bulk", body, format="csv", cluster="http")
    assert response.status_code == 200, response.content
    assert response.json()["rows"] == {"samples": days}
    assert response.json()["summary"][0] == f"stored {days} samples (csv, cluster http)"
    check_daily("http", start, days, step=step)
    if step == 1:
        assert post("bulk", body, format="csv", cluster="http").status_code == 200  # a retry stores nothing twice
        check_daily("http", start, days)


PACIFIC_CSV = (
    "ts,host,component,metric,value\n"
    "2017-06-01 16:14:00,n1,gpu0,gpu.temp,1\n"      # PDT, UTC-7 -> 23:14Z
    "2017-12-01 16:14:00,n1,gpu0,gpu.temp,2\n"      # PST, UTC-8 -> 2017-12-02 00:14Z
    "2017-11-05 01:30:00,n1,gpu0,gpu.temp,3\n"      # happens twice: first (PDT) -> 08:30Z
    "2017-03-12 02:30:00,n1,gpu0,gpu.temp,4\n"      # never happens: offset before the gap -> 10:30Z
    "2017-06-01T12:00:00Z,n1,gpu0,gpu.temp,5\n"     # has its own zone: never shifted
).encode()
PACIFIC_UTC = {1: "2017-06-01 23:14:00", 2: "2017-12-02 00:14:00", 3: "2017-11-05 08:30:00",
               4: "2017-03-12 10:30:00", 5: "2017-06-01 12:00:00"}


def check_pacific(cluster: str) -> None:
    got = {int(v): t for v, t in rows(
        "SELECT value, formatDateTime(ts, '%Y-%m-%d %H:%i:%S') FROM samples WHERE cluster = {c:String}", c=cluster)}
    assert got == PACIFIC_UTC


def test_local_times_are_read_in_the_named_zone_and_dst_oddities_are_named_cli(clean_store, tmp_path):
    path = tmp_path / "pacific.csv"
    path.write_bytes(PACIFIC_CSV)
    out = run(str(path), "--format", "csv", "--cluster", "tz-cli", "--tz", "America/Los_Angeles")
    check_pacific("tz-cli")
    assert "4 times without a zone read as America/Los_Angeles" in out
    assert "1 ambiguous local times, taken as the first occurrence (daylight time): line 4: 2017-11-05 01:30:00" in out
    assert "1 local times that do not exist" in out and "line 5: 2017-03-12 02:30:00" in out


def test_local_times_are_read_in_the_named_zone_and_dst_oddities_are_named_http(clean_store, post):
    response = post("bulk", PACIFIC_CSV, format="csv", cluster="tz-http", tz="America/Los_Angeles")
    assert response.status_code == 200, response.content
    tz = response.json()["time_zone"]
    assert tz["tz"] == "America/Los_Angeles" and tz["localised"] == 4
    assert tz["ambiguous"]["examples"] == ["line 4: 2017-11-05 01:30:00"]
    assert tz["missing"]["examples"] == ["line 5: 2017-03-12 02:30:00"]
    check_pacific("tz-http")
    bad = post("bulk", PACIFIC_CSV, format="csv", cluster="tz-http", tz="US-Pacific")
    assert bad.status_code == 400 and "unknown time zone 'US-Pacific'" in bad.json()["error"]


def test_without_tz_naive_times_stay_utc(clean_store, post):
    assert post("bulk", PACIFIC_CSV, format="csv", cluster="utc").status_code == 200
    got = dict(rows("SELECT value, formatDateTime(ts, '%H:%i') FROM samples WHERE cluster = 'utc'"))
    assert got[1.0] == "16:14"


SACCT = ("JobID|JobName|State|Start|End|NodeList\n"
         "41|train|FAILED|2017-06-01T09:00:00|2017-06-01T16:14:00|n1\n")


def test_sacct_times_are_localised_cli_and_http(clean_store, tmp_path, post):
    path = tmp_path / "sacct.txt"
    path.write_text(SACCT)
    run(str(path), "--format", "sacct", "--cluster", "s-cli", "--tz", "America/Los_Angeles")
    assert post("sacct", SACCT.encode(), cluster="s-http", tz="America/Los_Angeles").status_code == 200
    got = rows("SELECT cluster, formatDateTime(end_ts, '%Y-%m-%d %H:%i') FROM jobs FINAL ORDER BY cluster")
    assert got == [("s-cli", "2017-06-01 23:14"), ("s-http", "2017-06-01 23:14")]


def kernel_lines() -> str:
    return ("[Thu Jun  1 16:14:00 2017] NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=python3, fallen off the bus\n"
            "[ 1432.1] NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE\n"
            "[Thu Jun  1 16:15:00 2017] igb 0000:03:00.0 eno1: igb: eno1 NIC Link is Down\n"
            "[Thu Jun  1 16:15:01 2017] igb 0000:03:00.0 eno1: igb: eno1 NIC Link is Up 1000 Mbps\n"
            "[Thu Jun  1 16:15:02 2017] usb 1-1: new device\n")


SKIPPED = {"link up/down lines not understood (NVRM Xid and mlx5_core link lines are read)": 2,
           "other lines (not NVRM Xid)": 1}


def test_kernel_log_summary_names_skipped_lines_receive_time_and_tz_cli_and_http(clean_store, tmp_path, post):
    path = tmp_path / "dmesg.txt"
    path.write_text(kernel_lines())
    out = run(str(path), "--format", "kernel-log", "--cluster", "k-cli", "--host", "n1", "--tz", "America/Los_Angeles")
    assert "2 lines skipped: link up/down lines not understood (NVRM Xid and mlx5_core link lines are read)" in out
    assert "1 lines skipped: other lines (not NVRM Xid)" in out
    assert "1 lines had no date and got the receive time (attributes time_source=received): lines 2" in out
    response = post("kernel-log", kernel_lines().encode(), cluster="k-http", host="n1", tz="America/Los_Angeles")
    body = response.json()
    assert body["skipped"] == SKIPPED and body["skipped_lines"] == 3
    assert body["receive_time"] == {"count": 1, "lines": [2]}
    got = rows("SELECT cluster, formatDateTime(ts, '%Y-%m-%d %H:%i') FROM events WHERE code = 79 ORDER BY cluster")
    assert got == [("k-cli", "2017-06-01 23:14"), ("k-http", "2017-06-01 23:14")]


COMPONENT_SCRAPE = "".join(
    f'mem_free_pct{{component="gpu{i}",hostname="n7"}} {50 + i}\n' for i in range(4)
) + "".join(f'node_cpu_seconds_total{{cpu="0",mode="{m}",instance="n7:9100"}} {v}\n'
            for m, v in (("idle", 10), ("user", 20)))


def check_components(cluster: str) -> None:
    got = rows("SELECT component, value FROM samples WHERE cluster = {c:String} AND metric = 'mem_free_pct' "
               "ORDER BY component", c=cluster)
    assert got == [("gpu0", 50.0), ("gpu1", 51.0), ("gpu2", 52.0), ("gpu3", 53.0)]


def test_component_labels_keep_gpus_apart_and_merged_series_are_named_cli(clean_store, tmp_path):
    path = tmp_path / "scrape.prom"
    path.write_text(COMPONENT_SCRAPE)
    ts = int(datetime.now(timezone.utc).timestamp()) * 1000
    out = run(str(path), "--format", "prometheus", "--cluster", "c-cli", "--ts", str(ts))
    check_components("c-cli")
    assert "names not in the catalog, stored under their own name" in out and "mem_free_pct" in out
    assert "labels kept in series_labels, not part of the series key: mode (2 series)" in out
    assert "1 series merged into another's row key (they differ only in mode; each label set is kept in series_labels)" in out


def test_component_labels_keep_gpus_apart_and_merged_series_are_named_http(clean_store, post):
    response = post("prometheus", COMPONENT_SCRAPE.encode(), cluster="c-http")
    body = response.json()
    assert response.status_code == 200, body
    check_components("c-http")
    assert body["labels_not_stored"] == {"mode": 2} and body["merged_series"] == 1
    assert body["merged_by"] == {"mode": 2}
    assert body["unknown_metrics"] == ["mem_free_pct"]


# Labels no column keeps are reported on every path, whether or not they merge series; a `host`
# label names the host; CSV backfills may give host and component as the same labels.
LABELLED_SCRAPE = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",host="n8",pod="train-7",container=""} 40\n'
                   'DCGM_FI_DEV_GPU_TEMP{gpu="1",host="n8",pod="train-7"} 41\n')


def test_labels_not_stored_are_reported_even_when_nothing_merges_text_cli_and_http(clean_store, tmp_path, post):
    path = tmp_path / "scrape.prom"
    path.write_text(LABELLED_SCRAPE)
    out = run(str(path), "--format", "prometheus", "--cluster", "l-cli")
    assert "labels kept in series_labels, not part of the series key: pod (2 series)" in out
    assert "merged" not in out
    body = post("prometheus", LABELLED_SCRAPE.encode(), cluster="l-http").json()
    assert body["labels_not_stored"] == {"pod": 2} and body["merged_series"] == 0
    got = rows("SELECT cluster, host, component, value FROM samples ORDER BY cluster, component")
    assert got == [("l-cli", "n8", "gpu0", 40.0), ("l-cli", "n8", "gpu1", 41.0),
                   ("l-http", "n8", "gpu0", 40.0), ("l-http", "n8", "gpu1", 41.0)]


def test_remote_write_reports_labels_not_stored_in_headers_and_on_request_in_the_body(clean_store, client, db,
                                                                                     investigator):
    from telemetry.ingestion.remote_write import RWSeries, encode_write_request

    token = create_token("rw-labels", investigator)[1]
    now = (int(datetime.now(timezone.utc).timestamp()) // 60) * 60_000
    body = encode_write_request([
        RWSeries({"__name__": "node_cpu_seconds_total", "cpu": "0", "mode": m, "host": "n5", "job": "node"},
                 [now], [v]) for m, v in (("idle", 1.0), ("user", 2.0))])

    def send(**params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return client.post(f"/api/ingest/remote-write?{query}", data=body, content_type="application/x-protobuf",
                           HTTP_CONTENT_ENCODING="snappy", HTTP_AUTHORIZATION=f"Bearer {token}")

    quiet = send(cluster="rw")
    assert quiet.status_code == 200 and quiet.content == b"" and quiet["X-Precursor-Labels-Not-Stored"] == "job=2,mode=2"
    loud = send(cluster="rw2", report="1")
    assert loud.status_code == 200
    assert loud.json()["labels_not_stored"] == {"job": 2, "mode": 2}
    assert "labels kept in series_labels, not part of the series key: job (2 series), mode (2 series)" \
        in loud.json()["summary"]
    assert rows("SELECT DISTINCT host, component FROM samples") == [("n5", "cpu0")]


LABEL_CSV = (
    "ts,hostname,gpu,device,port,metric,value\n"
    "2019-03-01T00:00:00Z,n1,0,,,gpu.temp,40\n"
    "2019-03-01T00:00:00Z,n1,1,,,gpu.temp,41\n"
    "2019-03-01T00:00:00Z,n1,,mlx5_0,1,net.ib_rx_bytes,7\n"
    "2019-03-01T00:00:00Z,n2,,,,host.load1,3\n"
).encode()
LABEL_ROWS = [("n1", "gpu0", 40.0), ("n1", "gpu1", 41.0), ("n1", "mlx5_0/1", 7.0), ("n2", "", 3.0)]


def test_csv_understands_the_host_and_device_labels_cli_and_http(clean_store, tmp_path, post):
    path = tmp_path / "labels.csv"
    path.write_bytes(LABEL_CSV)
    run(str(path), "--format", "csv", "--cluster", "lc-cli")
    assert post("bulk", LABEL_CSV, format="csv", cluster="lc-http").status_code == 200
    for cluster in ("lc-cli", "lc-http"):
        got = rows("SELECT host, component, value FROM samples WHERE cluster = {c:String} ORDER BY value",
                   c=cluster)
        assert sorted(got, key=lambda r: r[2]) == sorted(LABEL_ROWS, key=lambda r: r[2])
    jsonl = (b'{"ts": "2019-03-01T00:00:00Z", "instance": "n3:9400", "gpu": 2, "metric": "gpu.temp", "value": 5}\n'
             b'{"ts": "2019-03-01T00:00:00Z", "host": "n3", "interface": "eth0", "metric": "net.rx_bytes", "value": 6}\n')
    assert post("bulk", jsonl, format="jsonl", cluster="lc-jsonl").status_code == 200
    assert rows("SELECT host, component, value FROM samples WHERE cluster = 'lc-jsonl' ORDER BY value") == [
        ("n3", "gpu2", 5.0), ("n3", "eth0", 6.0)]
    other = LABEL_CSV.replace(b"port,metric", b"pod,metric")
    response = post("bulk", other, format="csv", cluster="lc-http")
    assert response.status_code == 400 and response.json()["field"] == "pod"  # refused by name, never dropped
    assert "host and component may also come as labels" in response.json()["error"]


def test_csv_labels_column_is_kept_over_http_and_the_cli_says_so(clean_store, tmp_path, post):
    csv = (b'ts,hostname,gpu,metric,value,labels\n'
           b'2019-03-01T00:00:00Z,n1,0,gpu.temp,40,"{""slot"": ""3""}"\n'
           b'2019-03-01T00:00:00Z,n1,0,gpu.temp,41,"{""slot"": ""4""}"\n')
    body = post("bulk", csv, format="csv", cluster="kl-http").json()
    assert body["rows"] == {"samples": 2, "series_labels": 2} and body["labels_not_stored"] == {"slot": 2}
    assert "labels kept in series_labels, not part of the series key: slot (2 series)" in body["summary"]
    path = tmp_path / "kept.csv"
    path.write_bytes(csv)
    assert "stored 2 samples, 2 series_labels (csv, cluster kl-cli)" in run(str(path), "--format", "csv",
                                                                          "--cluster", "kl-cli")
    got = rows("SELECT cluster, labels['slot'] FROM series_labels FINAL ORDER BY cluster, labels['slot']")
    assert got == [("kl-cli", "3"), ("kl-cli", "4"), ("kl-http", "3"), ("kl-http", "4")]


def test_csv_ingest_maps_catalog_aliases_like_the_prometheus_path(clean_store, post):
    start = datetime(2019, 1, 1, tzinfo=timezone.utc)
    response = post("bulk", daily_csv(start, 3, metric="DCGM_FI_DEV_GPU_UTIL"), format="csv", cluster="alias")
    assert response.json()["aliases"] == {"DCGM_FI_DEV_GPU_UTIL": "gpu.util"}
    assert rows("SELECT DISTINCT metric FROM samples WHERE cluster = 'alias'") == [("gpu.util",)]


@pytest.fixture
def kept_400_days(clean_store):
    retention.apply(store.get_client(), migrate.Target(ttl_days=400), allow_shorter=True, log=lambda m: None)
    yield
    retention.apply(store.get_client(), migrate.Target(ttl_days=0), log=lambda m: None)


def test_http_refuses_rows_older_than_the_retention_and_says_how_to_keep_them(kept_400_days, post):
    response = post("bulk", daily_csv(datetime(2017, 1, 1, tzinfo=timezone.utc), 10), format="csv", cluster="old")
    assert response.status_code == 400
    assert "TELEMETRY_TTL_DAYS=0" in response.json()["error"] and "migrate_telemetry" in response.json()["error"]
    assert rows("SELECT count() FROM samples") == [(0,)]
    recent = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0) - 5 * DAY
    mixed = daily_csv(datetime(2017, 1, 1, tzinfo=timezone.utc), 2) + daily_csv(recent, 3).split(b"\n", 1)[1]
    response = post("bulk", mixed, format="csv", cluster="old", skip_expired="1")
    assert response.status_code == 200 and response.json()["expired"] == 2
    assert response.json()["rows"] == {"samples": 3}
