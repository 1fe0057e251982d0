"""Retention is what the tables say: read from them, changed by migrate_telemetry (or refused
naming the command), and enforced at ingest (old rows refused, never "ingested" then gone)."""
from __future__ import annotations

import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from telemetry import migrate, retention, store
from telemetry.ingestion import service
from telemetry.ingestion.errors import IngestError

FOREVER = migrate.Target(cluster="", ttl_days=0)
TTL_TABLES = {"samples", "samples_1m", "events", "band_1m"}


@pytest.fixture
def ttl_store(clean_store):
    """The session store; every table back to no TTL afterwards (the other tests rely on it)."""
    yield clean_store
    retention.apply(store.get_client(), FOREVER, log=lambda m: None)
    assert set(retention.table_days(fresh=True).values()) == {0}


def create_query(table: str) -> str:
    return store.query_rows("SELECT create_table_query FROM system.tables WHERE database = currentDatabase() "
                            "AND name = {t:String}", {"t": table}, tag="test")[0][0]


def test_the_ttl_expressions_come_from_the_migrations():
    assert retention.ttl_expressions() == {"samples": "toDateTime(ts)", "samples_1m": "ts",
                                           "events": "toDateTime(ts)", "band_1m": "ts"}


def test_table_days_reads_the_tables_not_the_setting(ttl_store):
    assert store.config().ttl_days == 400  # the setting says 400 ...
    assert retention.table_days(fresh=True) == {t: 0 for t in TTL_TABLES}  # ... the tables keep everything


def test_a_shorter_retention_is_refused_naming_the_command_and_changes_nothing(ttl_store):
    with pytest.raises(retention.RetentionRefused, match="migrate_telemetry --shorten-retention") as err:
        retention.apply(store.get_client(), migrate.Target(ttl_days=30), log=lambda m: None)
    assert "forever (no TTL) -> 30 days" in str(err.value)
    assert "TTL" not in create_query("samples").split("ORDER BY")[1]
    assert set(retention.table_days(fresh=True).values()) == {0}


def test_a_retention_change_is_applied_with_alter_and_removed_with_zero(ttl_store):
    logged = []
    changes = retention.apply(store.get_client(), migrate.Target(ttl_days=30), allow_shorter=True, log=logged.append)
    assert {c.table for c in changes} == TTL_TABLES
    assert "TTL toDateTime(ts) + toIntervalDay(30)" in create_query("samples")
    assert "TTL ts + toIntervalDay(30)" in create_query("samples_1m")
    assert retention.table_days(fresh=True) == {t: 30 for t in TTL_TABLES}
    assert "applied retention of samples: forever (no TTL) -> 30 days" in logged
    # longer is applied without asking; 0 removes the TTL
    assert retention.apply(store.get_client(), migrate.Target(ttl_days=90), log=lambda m: None)
    assert retention.table_days(fresh=True)["events"] == 90
    retention.apply(store.get_client(), FOREVER, log=lambda m: None)
    assert "TTL" not in create_query("events").split("ORDER BY")[1]
    assert retention.apply(store.get_client(), FOREVER, log=lambda m: None) == []


def test_migrate_telemetry_applies_a_changed_setting_or_refuses_it(ttl_store, settings, capsys):
    settings.TELEMETRY_TTL_DAYS = 400
    with pytest.raises(CommandError, match=r"would delete stored rows older than 400 days.*--shorten-retention"):
        call_command("migrate_telemetry")
    assert retention.table_days(fresh=True)["samples"] == 0
    call_command("migrate_telemetry", "--shorten-retention")
    assert "applied retention of samples: forever (no TTL) -> 400 days" in capsys.readouterr().out
    assert retention.table_days(fresh=True)["samples"] == 400
    settings.TELEMETRY_TTL_DAYS = 0
    call_command("migrate_telemetry")
    assert "applied retention of samples: 400 days -> forever (no TTL)" in capsys.readouterr().out
    assert retention.table_days(fresh=True)["samples"] == 0
    call_command("migrate_telemetry")
    assert "telemetry store is up to date (retention: forever)" in capsys.readouterr().out


def _csv(days_ago: list[int]) -> bytes:
    now = int(time.time())
    rows = [f"{(now - d * 86400) * 1000},n1,gpu0,gpu.temp,{40 + i}" for i, d in enumerate(days_ago)]
    return ("ts,host,component,metric,value\n" + "\n".join(rows) + "\n").encode()


def test_rows_older_than_the_tables_retention_are_refused_with_how_to_keep_them(ttl_store):
    retention.apply(store.get_client(), migrate.Target(ttl_days=400), allow_shorter=True, log=lambda m: None)
    data = _csv([3000, 2000, 1, 2])
    with pytest.raises(IngestError) as err:
        service.ingest_bulk(data, "csv", cluster="ret")
    message = str(err.value)
    assert "2 of 4 rows are older than the retention of samples (400 days" in message
    assert "TELEMETRY_TTL_DAYS=0" in message and "at least 3001" in message
    assert "python manage.py migrate_telemetry" in message and "nothing of this batch was stored" in message
    assert store.query_rows("SELECT count() FROM samples", tag="test")[0][0] == 0
    report = service.ingest_bulk(data, "csv", cluster="ret", skip_expired=True)
    assert report.rows == {"samples": 2} and report.expired == 2
    assert store.query_rows("SELECT count() FROM samples", tag="test")[0][0] == 2


def test_after_removing_the_ttl_the_same_old_rows_are_kept(ttl_store):
    retention.apply(store.get_client(), migrate.Target(ttl_days=400), allow_shorter=True, log=lambda m: None)
    retention.apply(store.get_client(), FOREVER, log=lambda m: None)
    report = service.ingest_bulk(_csv([3000, 2000]), "csv", cluster="ret")
    assert report.rows == {"samples": 2} and report.expired == 0
    assert store.query_rows("SELECT count() FROM samples", tag="test")[0][0] == 2


@pytest.mark.django_db
def test_healthz_reports_the_tables_retention_and_a_mismatch(client, ttl_store, settings):
    settings.TELEMETRY_TTL_DAYS = 400
    telemetry = client.get("/healthz").json()["checks"]["telemetry"]
    assert telemetry["retention_days"] == {t: 0 for t in TTL_TABLES}
    assert "Run `python manage.py migrate_telemetry --shorten-retention`" in telemetry["retention_note"]
    settings.TELEMETRY_TTL_DAYS = 0
    telemetry = client.get("/healthz").json()["checks"]["telemetry"]
    assert "retention_note" not in telemetry
