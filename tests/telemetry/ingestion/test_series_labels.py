"""Labels the catalog does not map are kept (series_labels), never dropped: on the text, remote-write
paths, one row per distinct label set per series, written once (a warm repeat writes none)."""
from __future__ import annotations

import time

from telemetry import store
from telemetry.ingestion import service
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
