"""Labels the catalog does not map are kept (series_labels), never dropped: on the text, remote-write
and CSV paths, one row per distinct label set per series, written once (a warm repeat writes none)."""
from __future__ import annotations

import time

from telemetry import store
from telemetry.ingestion import service
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.remote_write import RWSeries, encode_write_request

NOW = (int(time.time()) // 60 - 30) * 60_000

# No component label; slot tells the two series of gpu0 apart, rack_unit is on one GPU only.
SCRAPE = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sl1",slot="3"} 40\n'
          'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sl1",slot="4"} 41\n'
          'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="sl1",slot="5",rack_unit="u7"} 42\n'
          'DCGM_FI_DEV_GPU_TEMP{gpu="2",Hostname="sl1"} 43\n')
KEPT = [("gpu0", "gpu.temp", {"slot": "3"}), ("gpu0", "gpu.temp", {"slot": "4"}),
        ("gpu1", "gpu.temp", {"rack_unit": "u7", "slot": "5"})]


def kept(cluster: str) -> list[tuple]:
    return [(c, m, dict(labels)) for c, m, labels in store.query_rows(
        "SELECT component, metric, labels FROM series_labels FINAL WHERE cluster = {c:String} "
        "ORDER BY component, metric, toString(labels)", {"c": cluster}, tag="test")]


def count(cluster: str) -> int:
    return store.query_rows("SELECT count() FROM series_labels WHERE cluster = {c:String}", {"c": cluster},
                            tag="test")[0][0]


def test_text_scrape_keeps_each_label_set_and_a_warm_repeat_writes_nothing(clean_store):
    report = service.ingest_prometheus_text(SCRAPE, "sl-text", default_ts_ms=NOW)
    assert report.rows["series_labels"] == 3
    assert kept("sl-text") == KEPT
    assert report.merged_series == 1 and report.merged_by == {"slot": 2}
    lines = report.summary_lines()
    assert "labels kept in series_labels, not part of the series key: rack_unit (1 series), slot (3 series)" in lines
    assert any("they differ only in slot; each label set is kept in series_labels" in line for line in lines)
    again = service.ingest_prometheus_text(SCRAPE, "sl-text", default_ts_ms=NOW + 60_000)
    assert "series_labels" not in again.rows and count("sl-text") == 3
    assert again.labels_not_stored == {"rack_unit": 1, "slot": 3}  # still reported


def test_relayed_scrape_keeps_labels_under_each_default_host(clean_store):
    body = 'node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp1",slot="3"} 50\n'
    for host in ("relay-a", "relay-b"):
        service.ingest_prometheus_text(body, "sl-relay", default_host=host, default_ts_ms=NOW)
    got = store.query_rows("SELECT host, component, labels FROM series_labels FINAL WHERE cluster = 'sl-relay' "
                           "ORDER BY host", tag="test")
    assert [(h, c, dict(lab)) for h, c, lab in got] == [
        ("relay-a", "platform_coretemp_0/temp1", {"slot": "3"}), ("relay-b", "platform_coretemp_0/temp1", {"slot": "3"})]
    service.ingest_prometheus_text(body, "sl-relay", default_host="relay-a", default_ts_ms=NOW + 60_000)
    assert count("sl-relay") == 2


def test_remote_write_keeps_the_same_label_sets_once(clean_store):
    series = [RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": g, "Hostname": "sl1", **extra}, [NOW], [v])
              for g, extra, v in (("0", {"slot": "3"}, 40.0), ("0", {"slot": "4"}, 41.0),
                                  ("1", {"slot": "5", "rack_unit": "u7"}, 42.0), ("2", {}, 43.0))]
    report = service.ingest_remote_write(encode_write_request(series), "sl-rw")
    assert report.rows["series_labels"] == 3 and kept("sl-rw") == KEPT
    again = service.ingest_remote_write(encode_write_request(series), "sl-rw")
    assert "series_labels" not in again.rows and count("sl-rw") == 3


def test_a_new_process_finds_the_sets_stored_and_writes_none(clean_store):
    from telemetry.ingestion import normalize

    service.ingest_prometheus_text(SCRAPE, "sl-cold", default_ts_ms=NOW)
    normalize.forget_label_sets()  # as after a restart: every set resolved again
    report = service.ingest_prometheus_text(SCRAPE, "sl-cold", default_ts_ms=NOW + 60_000)
    assert "series_labels" not in report.rows and count("sl-cold") == 3


CSV = ("ts,hostname,gpu,metric,value,labels\n"
       '2025-03-01T00:00:00Z,sl1,0,DCGM_FI_DEV_GPU_TEMP,40,"{""slot"": ""3""}"\n'
       '2025-03-01T00:00:00Z,sl1,0,DCGM_FI_DEV_GPU_TEMP,41,"{""slot"": ""4""}"\n'
       '2025-03-01T00:01:00Z,sl1,0,DCGM_FI_DEV_GPU_TEMP,40,"{""slot"": ""3""}"\n'
       '2025-03-01T00:00:00Z,sl1,1,gpu.temp,42,"{""slot"": ""5"", ""rack_unit"": ""u7""}"\n'
       "2025-03-01T00:00:00Z,sl1,2,gpu.temp,43,\n").encode()


def test_csv_backfill_keeps_a_labels_column(clean_store):
    report = service.ingest_bulk(CSV, "csv", cluster="sl-csv")
    assert report.rows == {"samples": 5, "series_labels": 3}
    assert kept("sl-csv") == KEPT
    assert report.labels_not_stored == {"rack_unit": 1, "slot": 3}
    assert service.ingest_bulk(CSV, "csv", cluster="sl-csv").rows == {"samples": 5}
    assert count("sl-csv") == 3


def test_csv_labels_that_are_not_kept_labels_are_refused_by_name(clean_store):
    for bad, field, words in ((CSV.replace(b'""slot""', b'""gpu""', 1), "labels", "gpu"),
                              (CSV.replace(b'""slot"": ""3""}', b'oops', 1), "labels", "JSON"),
                              (CSV.replace(b"labels\n", b"lables\n"), "lables", "not in table samples")):
        try:
            service.ingest_bulk(bad, "csv", cluster="sl-bad")
        except IngestError as exc:
            assert exc.field == field and words in str(exc), str(exc)
        else:
            raise AssertionError(f"accepted: {bad[:80]!r}")
    assert count("sl-bad") == 0


def test_jsonl_backfill_reads_labels_as_an_object(clean_store):
    jsonl = (b'{"ts": "2025-03-01T00:00:00Z", "hostname": "sl1", "gpu": 0, "metric": "gpu.temp", "value": 40,'
             b' "labels": {"slot": 3}}\n'
             b'{"ts": "2025-03-01T00:00:00Z", "hostname": "sl1", "gpu": 0, "metric": "gpu.temp", "value": 41,'
             b' "labels": {"slot": "4"}}\n')
    report = service.ingest_bulk(jsonl, "jsonl", cluster="sl-jsonl")
    assert report.rows == {"samples": 2, "series_labels": 2}
    assert kept("sl-jsonl") == KEPT[:2]


def test_the_host_page_lists_each_series_kept_labels_and_says_when_sets_merged(alice_client, clean_store):
    service.ingest_prometheus_text(SCRAPE, "sl-text", default_ts_ms=NOW)
    service.ingest_bulk(CSV, "csv", cluster="sl-csv")
    series = [RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "4", "Hostname": "sl1", "slot": "9"}, [NOW], [1.0])]
    service.ingest_remote_write(encode_write_request(series), "sl-text")
    for cluster in ("sl-text", "sl-csv"):
        body = alice_client.get("/hosts/sl1/", {"cluster": cluster}).content.decode()
        table = body[body.index("signal-facts"):body.index("</table>", body.index("signal-facts"))]
        rows = {r.split("</td>")[1].rsplit(">", 1)[-1]: r for r in table.split("<tr>")[2:]}  # part -> row
        assert "2 sets merged:</span> slot=3 · slot=4" in rows["gpu0"], rows["gpu0"]
        assert "rack_unit=u7 slot=5" in rows["gpu1"] and "merged" not in rows["gpu1"]
        assert "—</td></tr>" in rows["gpu2"]  # nothing kept
        if cluster == "sl-text":  # pushed by remote-write
            assert "slot=9" in rows["gpu4"]


def test_parquet_backfill_reads_labels_as_a_map_or_json_text(clean_store):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    for cluster, labels in (("sl-pq-map", pa.array([[("slot", "3")], [("slot", "4")]],
                                                    pa.map_(pa.string(), pa.string()))),
                            ("sl-pq-text", pa.array(['{"slot": "3"}', '{"slot": "4"}']))):
        buf = io.BytesIO()
        pq.write_table(pa.table({"ts": ["2025-03-01T00:00:00Z"] * 2, "hostname": ["sl1"] * 2, "gpu": ["0", "0"],
                                 "metric": ["gpu.temp"] * 2, "value": [40.0, 41.0], "labels": labels}), buf)
        assert service.ingest_bulk(buf.getvalue(), "parquet", cluster=cluster).rows == {
            "samples": 2, "series_labels": 2}
        assert kept(cluster) == KEPT[:2]
