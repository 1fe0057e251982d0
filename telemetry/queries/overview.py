"""What is in the store: row counts and time spans, for the home page, /healthz and jobs."""
from __future__ import annotations

from telemetry import store


def store_totals() -> dict:
    rows = store.query_rows(
        "SELECT (SELECT count() FROM samples), (SELECT count() FROM events), "
        "(SELECT count() FROM jobs FINAL), (SELECT count() FROM hosts FINAL), "
        "(SELECT min(ts) FROM samples), (SELECT max(ts) FROM samples)",
        tag="overview.store_totals",
        timeout_s=10,
    )
    samples, events, jobs, hosts, first, last = rows[0]
    return {
        "samples": int(samples),
        "events": int(events),
        "jobs": int(jobs),
        "hosts": int(hosts),
        "first_ts": first.isoformat() if samples else None,
        "last_ts": last.isoformat() if samples else None,
    }


def samples_per_metric(timeout_s: int | None = None) -> list[dict]:
    rows = store.query_rows(
        "SELECT metric, count() AS n, uniqExact(host) AS hosts, min(ts), max(ts) "
        "FROM samples GROUP BY metric ORDER BY metric",
        tag="overview.samples_per_metric",
        timeout_s=timeout_s,
    )
    return [
        {"metric": m, "samples": int(n), "hosts": int(h), "first": a.isoformat(), "last": b.isoformat()}
        for m, n, h, a, b in rows
    ]


def events_per_kind(timeout_s: int | None = None) -> list[dict]:
    rows = store.query_rows(
        "SELECT kind, count() FROM events GROUP BY kind ORDER BY kind",
        tag="overview.events_per_kind",
        timeout_s=timeout_s,
    )
    return [{"kind": k, "events": int(n)} for k, n in rows]


def ingest_stats(cluster: str) -> dict:
    """What has landed for one cluster: rows and last timestamp per metric, rows per other table
    (GET /api/ingest/stats lets a sender check its data arrived)."""
    metrics = store.query_rows(
        "SELECT metric, count(), toUnixTimestamp64Milli(max(ts)) FROM samples "
        "WHERE cluster = {cluster:String} GROUP BY metric ORDER BY metric",
        {"cluster": cluster}, tag="ingest:stats", timeout_s=20)
    tables = {}
    for table in ("events", "jobs", "job_hosts"):
        tables[table] = store.query_rows(
            f"SELECT count() FROM {table} WHERE cluster = {{cluster:String}}",
            {"cluster": cluster}, tag="ingest:stats", timeout_s=20)[0][0]
    return {
        "cluster": cluster,
        "samples": {m: {"rows": n, "last_ts_ms": last} for m, n, last in metrics},
        "tables": tables,
    }


def sample_count() -> int:
    """Rows in ``samples`` (``manage.py has_telemetry``: is there anything to show yet?)."""
    return int(store.query_rows("SELECT count() FROM samples", tag="has_telemetry")[0][0])
