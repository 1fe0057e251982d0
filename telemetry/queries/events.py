"""Events by host, component, code and time: the runner behind the events view, the host
page and the inbox's "events without a job" lane.

Histories without a scheduler (XID dumps of a fleet, link-flap logs) have no jobs, so the
interruptions inbox never shows them; these queries list every event with filters, count
them by week and kind for the chart, and tell events that happened while a job held the
host from those that did not (``without_job``: no allocation of the host covers the event).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from telemetry import store, xid

MAX_LIMIT = 1000
QUERY_TIMEOUT_S = 20
KINDS_OF_INTEREST = ("xid", "sxid", "link_down", "link_up", "port_module")


@dataclass(frozen=True)
class EventQuery:
    cluster: str | None = None
    host: str = ""  # exact host
    component: str = ""  # exact component
    kinds: tuple[str, ...] = ()  # empty = every kind
    codes: tuple[int, ...] = ()  # empty = every code
    start: datetime | None = None
    end: datetime | None = None
    without_job: bool = False  # only events no job allocation of the host covers
    limit: int = 100
    offset: int = 0


@dataclass
class EventRow:
    ts: datetime
    cluster: str
    host: str
    component: str
    source: str
    kind: str
    code: int
    severity: str
    message: str
    in_job: bool

    @property
    def label(self) -> str:
        if self.kind == "xid":
            return f"XID {self.code} — {xid.describe(self.code).meaning}"
        return self.kind + (f" {self.code}" if self.code else "")


@dataclass
class EventPage:
    rows: list[EventRow]
    total: int
    limit: int
    offset: int


def _utc(ts: datetime | None, default: datetime) -> datetime:
    if ts is None:
        return default
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _params(q: EventQuery) -> dict:
    if not 1 <= q.limit <= MAX_LIMIT:
        raise ValueError(f"limit {q.limit}: must be between 1 and {MAX_LIMIT}")
    if q.offset < 0:
        raise ValueError(f"offset {q.offset}: must not be negative")
    return {
        "cluster": q.cluster or "", "host": q.host.strip(), "component": q.component.strip(),
        "kinds": list(q.kinds), "codes": [int(c) for c in q.codes],
        "start": _utc(q.start, datetime(1900, 1, 1, tzinfo=timezone.utc)),
        "end": _utc(q.end, datetime(2299, 1, 1, tzinfo=timezone.utc)),
        "without_job": bool(q.without_job), "limit": q.limit, "offset": q.offset,
    }


_WHERE = (
    "({cluster:String} = '' OR e.cluster = {cluster:String}) "
    "AND ({host:String} = '' OR e.host = {host:String}) "
    "AND ({component:String} = '' OR e.component = {component:String}) "
    "AND (empty({kinds:Array(String)}) OR e.kind IN {kinds:Array(String)}) "
    "AND (empty({codes:Array(Int32)}) OR e.code IN {codes:Array(Int32)}) "
    "AND e.ts >= {start:DateTime64(3, 'UTC')} AND e.ts < {end:DateTime64(3, 'UTC')} "
    "AND e.kind != 'job_state'"
)

# Per host, the spans its jobs held it; an event is "in a job" when one of them covers it.
_MARKED = (
    "SELECT e.ts AS ts, e.cluster AS cluster, e.host AS host, e.component AS component, e.source AS source, "
    "e.kind AS kind, e.code AS code, e.severity AS severity, e.message AS message, "
    "arrayExists(s -> e.ts >= s.1 AND e.ts <= s.2, a.spans) AS in_job "
    "FROM events AS e LEFT JOIN ("
    "  SELECT cluster, host, groupArray((ifNull(start_ts, toDateTime64(0, 3, 'UTC')), "
    "         ifNull(end_ts, toDateTime64('2299-01-01 00:00:00', 3, 'UTC')))) AS spans "
    "  FROM job_hosts FINAL GROUP BY cluster, host"
    ") AS a ON a.cluster = e.cluster AND a.host = e.host "
    f"WHERE {_WHERE}"
)

_PAGE_SQL = (
    "SELECT ts, cluster, host, component, source, kind, code, severity, message, in_job, count() OVER () AS total "
    f"FROM ({_MARKED}) WHERE NOT ({{without_job:Bool}} AND in_job) "
    "ORDER BY ts DESC, host, component LIMIT {limit:UInt32} OFFSET {offset:UInt32}"
)

_WEEKLY_SQL = (
    "SELECT toMonday(ts) AS week, kind, count() AS n "
    f"FROM ({_MARKED}) WHERE NOT ({{without_job:Bool}} AND in_job) "
    "GROUP BY week, kind ORDER BY week, kind"
)


def list_events(q: EventQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> EventPage:
    """Newest first, with ``total`` counted over every match."""
    raw = store.query_rows(_PAGE_SQL, _params(q), tag="events.page", timeout_s=timeout_s)
    rows = [EventRow(ts=_utc(r[0], r[0]), cluster=r[1], host=r[2], component=r[3], source=r[4], kind=r[5],
                     code=int(r[6]), severity=r[7], message=r[8], in_job=bool(r[9])) for r in raw]
    return EventPage(rows=rows, total=int(raw[0][10]) if raw else 0, limit=q.limit, offset=q.offset)


def weekly_counts(q: EventQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> list[tuple[str, str, int]]:
    """(Monday of the week as YYYY-MM-DD, kind, events) for the chart above the list."""
    rows = store.query_rows(_WEEKLY_SQL, _params(q), tag="events.weekly", timeout_s=timeout_s)
    return [(str(week), kind, int(n)) for week, kind, n in rows]


def hosts_matching(text: str, *, limit: int = 20, timeout_s: int = QUERY_TIMEOUT_S) -> list[tuple[str, str]]:
    """(cluster, host) whose name contains ``text`` (case-insensitive), from the inventory,
    the events, the allocations and the minute rollup of the samples (a host known only from a
    backfill of its telemetry): what search offers as host pages. The name test runs on each
    column's dictionary of distinct hosts (LowCardinality), not per row."""
    text = text.strip()
    if not text or len(text) > 200:
        return []
    sql = ("SELECT cluster, host FROM ("
           "  SELECT cluster, host FROM hosts FINAL WHERE positionCaseInsensitiveUTF8(host, {q:String}) > 0"
           "  UNION DISTINCT SELECT DISTINCT cluster, host FROM events WHERE positionCaseInsensitiveUTF8(host, {q:String}) > 0"
           "  UNION DISTINCT SELECT DISTINCT cluster, host FROM job_hosts WHERE positionCaseInsensitiveUTF8(host, {q:String}) > 0"
           "  UNION DISTINCT SELECT DISTINCT cluster, host FROM samples_1m WHERE positionCaseInsensitiveUTF8(host, {q:String}) > 0"
           ") ORDER BY host = {q:String} DESC, length(host), host, cluster LIMIT {limit:UInt32}")
    return [(c, h) for c, h in store.query_rows(sql, {"q": text, "limit": int(limit)}, tag="events.hosts",
                                                 timeout_s=timeout_s)]


@dataclass
class HostSummary:
    cluster: str
    host: str
    inventory: dict  # rack, leaf, spine, gpu_model, driver_version, firmware_version ('' unknown)
    components: list[dict]  # component, kind, model, serial, firmware
    jobs: list[dict]  # job_id, name, state, start_ts, end_ts (newest first)
    event_counts: list[tuple[str, int, int]]  # (kind, code, events)


def host_summary(cluster: str, host: str, *, jobs_limit: int = 50, timeout_s: int = QUERY_TIMEOUT_S) -> HostSummary:
    """What the host page shows above its events: inventory, parts, the jobs it ran, event counts."""
    p = {"cluster": cluster, "host": host, "limit": int(jobs_limit)}
    inv = store.query_rows("SELECT rack, leaf, spine, gpu_model, driver_version, firmware_version FROM hosts FINAL "
                           "WHERE cluster = {cluster:String} AND host = {host:String}", p, tag="events.host.inventory",
                           timeout_s=timeout_s)
    keys = ("rack", "leaf", "spine", "gpu_model", "driver_version", "firmware_version")
    comps = store.query_rows("SELECT component, kind, model, serial, firmware FROM components FINAL "
                             "WHERE cluster = {cluster:String} AND host = {host:String} ORDER BY kind, component",
                             p, tag="events.host.components", timeout_s=timeout_s)
    jobs = store.query_rows(
        "SELECT j.job_id, j.name, j.state, j.start_ts, j.end_ts FROM jobs AS j FINAL "
        "WHERE j.cluster = {cluster:String} AND (j.cluster, j.job_id) IN "
        "(SELECT cluster, job_id FROM job_hosts WHERE cluster = {cluster:String} AND host = {host:String}) "
        "ORDER BY j.end_ts IS NULL DESC, j.end_ts DESC LIMIT {limit:UInt32}", p, tag="events.host.jobs",
        timeout_s=timeout_s)
    counts = store.query_rows("SELECT kind, code, count() FROM events WHERE cluster = {cluster:String} "
                              "AND host = {host:String} AND kind != 'job_state' GROUP BY kind, code "
                              "ORDER BY count() DESC, kind, code", p, tag="events.host.counts", timeout_s=timeout_s)
    return HostSummary(
        cluster=cluster, host=host,
        inventory=dict(zip(keys, inv[0])) if inv else {k: "" for k in keys},
        components=[dict(zip(("component", "kind", "model", "serial", "firmware"), r)) for r in comps],
        jobs=[{"job_id": r[0], "name": r[1], "state": r[2], "start_ts": r[3], "end_ts": r[4]} for r in jobs],
        event_counts=[(k, int(c), int(n)) for k, c, n in counts],
    )
