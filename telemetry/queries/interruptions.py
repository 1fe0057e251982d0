"""Interruptions: jobs that ended abnormally, for the inbox, its bar chart and the case header.

What counts as an interruption (Slurm base states)
--------------------------------------------------
``FAILED`` (non-zero exit), ``NODE_FAIL``, ``TIMEOUT`` (a hung training job
runs into its time limit; a job that merely ran out of budget looks the same,
which the reviewer settles in the case), ``REQUEUED`` (the scheduler restarted
it after a failure), ``BOOT_FAIL``, ``OUT_OF_MEMORY`` and ``DEADLINE``.
Not interruptions: ``COMPLETED``, ``CANCELLED`` (a person or a workflow ended
it), ``PREEMPTED`` (scheduler policy, not a fault), and everything still
pending or running. ``t0`` is the job's ``end_ts``.

Queries
-------
``list_interruptions`` issues two queries whatever the page size: the page of
jobs (with their hosts and the total count), then the events within ±10 min of
each job's t0 on that job's hosts, aggregated in the engine per job and
(kind, code). ``jobs`` and ``job_hosts`` are ReplacingMergeTree tables: read
with FINAL so a re-reported job counts once, in its newest state.

A requeued job is one record per run under the same JobID (migration 0007):
each run that ended abnormally is an interruption of its own, with the hosts of
that run. ``get_interruption`` (the case of a JobID) gives the latest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pandas as pd

from telemetry import store, xid

INTERRUPTION_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "REQUEUED", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE")
EVENT_WINDOW_S = 600
MAX_LIMIT = 500
MAX_HOSTS_LISTED = 4096  # hosts carried per row; n_hosts is always the true count
TOP_EVENTS = 5
QUERY_TIMEOUT_S = 15


@dataclass(frozen=True)
class InterruptionQuery:
    start: datetime | None = None  # t0 >= start
    end: datetime | None = None  # t0 < end
    cluster: str | None = None
    states: tuple[str, ...] = ()  # subset of INTERRUPTION_STATES; empty = all of them
    search: str = ""  # case-insensitive substring of the job name, or an exact job id
    # Filters on facts the store does not know (cases, verdicts live in Django), exact over all
    # matches: only these (cluster, job_id) (None = no such filter), and never these.
    only_jobs: tuple[tuple[str, str], ...] | None = None
    except_jobs: tuple[tuple[str, str], ...] = ()
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class EventSummary:
    kind: str  # xid, sxid, link_down, link_up, ...
    code: int
    count: int
    hosts: int  # distinct hosts it was seen on
    first_host: str
    first_component: str
    first_offset_s: float  # first occurrence relative to t0
    meaning: str  # XID meaning for xid rows, '' otherwise

    @property
    def label(self) -> str:
        if self.kind == "xid":
            where = f" {self.first_component}@{self.first_host}" if self.first_component else f" @{self.first_host}"
            return f"XID {self.code}{where}" + (f" ×{self.count}" if self.count > 1 else "")
        name = {"link_down": "link↓", "link_up": "link↑"}.get(self.kind, self.kind + (f" {self.code}" if self.code else ""))
        return f"{name} {self.first_host}" + (f" ×{self.count}" if self.count > 1 else "")


@dataclass
class Interruption:
    cluster: str
    job_id: str
    name: str
    user: str
    partition: str
    state: str
    exit_code: str
    reason: str
    start_ts: datetime | None
    t0: datetime
    n_hosts: int
    n_gpus: int
    hosts: list[str]
    events: list[EventSummary] = field(default_factory=list)  # top few, most relevant first
    event_total: int = 0  # all events in ±10 min on the job's hosts
    xid_codes: list[int] = field(default_factory=list)
    link_flaps: int = 0  # link_down events


@dataclass
class InterruptionPage:
    rows: list[Interruption]
    total: int
    limit: int
    offset: int


def _utc(ts):
    if ts is None:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _check(q: InterruptionQuery) -> tuple[list[str], dict]:
    states = list(q.states) or list(INTERRUPTION_STATES)
    bad = [s for s in states if s not in INTERRUPTION_STATES]
    if bad:
        raise ValueError(f"states: {', '.join(map(repr, bad))} not interruption states; expected some of {INTERRUPTION_STATES}")
    if not (1 <= q.limit <= MAX_LIMIT):
        raise ValueError(f"limit {q.limit}: must be between 1 and {MAX_LIMIT}")
    if q.offset < 0:
        raise ValueError(f"offset {q.offset}: must not be negative")
    if len(q.search) > 200:
        raise ValueError("search: at most 200 characters")
    params = {
        "states": states,
        "cluster": q.cluster or "",
        "start": _utc(q.start) or datetime(1970, 1, 1, tzinfo=timezone.utc),
        "end": _utc(q.end) or datetime(2200, 1, 1, tzinfo=timezone.utc),
        "search": q.search.strip(),
        "only": q.only_jobs is not None,
        "only_jobs": [tuple(map(str, k)) for k in (q.only_jobs or ())],
        "except_jobs": [tuple(map(str, k)) for k in q.except_jobs],
        "limit": q.limit,
        "offset": q.offset,
    }
    return states, params


_JOBS_WHERE = (
    "state IN {states:Array(String)} AND end_ts IS NOT NULL "
    "AND ({cluster:String} = '' OR cluster = {cluster:String}) "
    "AND end_ts >= {start:DateTime64(3, 'UTC')} AND end_ts < {end:DateTime64(3, 'UTC')} "
    "AND ({search:String} = '' OR positionCaseInsensitiveUTF8(name, {search:String}) > 0 OR job_id = {search:String}) "
    "AND (NOT {only:Bool} OR (cluster, job_id) IN {only_jobs:Array(Tuple(String, String))}) "
    "AND (cluster, job_id) NOT IN {except_jobs:Array(Tuple(String, String))}"
)

# The hosts of each run of a job: a requeued job has one allocation per run (run_ts = the run's
# start, migration 0007). An interruption takes the run that started last before its t0 (ASOF):
# its own run for sacct data, the only one for allocations loaded whole.
_RUN_HOSTS = ("SELECT cluster, job_id, run_ts, arraySort(groupArray(host)) AS hosts, count() AS n "
              "FROM job_hosts FINAL WHERE (cluster, job_id) IN ({keys}) GROUP BY cluster, job_id, run_ts")

_PAGE_SQL = (
    "SELECT j.cluster, j.job_id, j.name, j.user, j.partition, j.state, j.exit_code, j.reason, j.start_ts, j.end_ts, "
    "j.n_hosts, j.n_gpus, j.total, h.hosts, h.n "
    "FROM (SELECT cluster, job_id, name, user, partition, state, exit_code, reason, start_ts, "
    "      assumeNotNull(end_ts) AS end_ts, n_hosts, n_gpus, count() OVER () AS total "
    f"     FROM jobs FINAL WHERE {_JOBS_WHERE} "
    "      ORDER BY end_ts DESC, cluster, job_id LIMIT {limit:UInt32} OFFSET {offset:UInt32}) AS j "
    "ASOF LEFT JOIN ("
    + _RUN_HOSTS.format(keys=f"SELECT cluster, job_id FROM jobs FINAL WHERE {_JOBS_WHERE}")
    + ") AS h ON h.cluster = j.cluster AND h.job_id = j.job_id AND h.run_ts <= j.end_ts "
    "ORDER BY j.end_ts DESC, j.cluster, j.job_id"
)

_EVENTS_SQL = (
    "SELECT jh.cluster, jh.job_id, jh.t0_ms, e.kind, e.code, count() AS n, uniqExact(e.host) AS hosts, "
    "argMin(e.host, e.ts) AS first_host, argMin(e.component, e.ts) AS first_component, "
    "min(dateDiff('millisecond', jh.t0, e.ts)) / 1000.0 AS first_offset "
    "FROM (SELECT p.cluster AS cluster, p.job_id AS job_id, p.t0 AS t0, p.t0_ms AS t0_ms, arrayJoin(r.hosts) AS host "
    "      FROM (SELECT t.1 AS cluster, t.2 AS job_id, t.3 AS t0_ms, fromUnixTimestamp64Milli(t.3, 'UTC') AS t0 "
    "            FROM (SELECT arrayJoin({page:Array(Tuple(String, String, Int64))}) AS t)) AS p "
    "      ASOF INNER JOIN ("
    + _RUN_HOSTS.format(keys="{keys:Array(Tuple(String, String))}")
    + ") AS r ON r.cluster = p.cluster AND r.job_id = p.job_id AND r.run_ts <= p.t0) AS jh "
    "INNER JOIN (SELECT ev.cluster AS cluster, ev.host AS host, ts, kind, code, "
    "      if(ev.component != '', ev.component, inv.component) AS component "
    "      FROM (SELECT cluster, host, component, ts, kind, code, attributes['pci_bus_id'] AS pci FROM events "
    "      WHERE cluster IN {clusters:Array(String)} "
    "      AND host IN (SELECT host FROM job_hosts FINAL WHERE (cluster, job_id) IN {keys:Array(Tuple(String, String))}) "
    "      AND ts >= {lo:DateTime64(3, 'UTC')} AND ts <= {hi:DateTime64(3, 'UTC')} "
    "      AND kind != 'job_state') AS ev "
    # an XID logged before the inventory knew its PCI id maps to the GPU now
    "      LEFT JOIN (SELECT cluster, host, pci_bus_id, component FROM components FINAL "
    "                 WHERE cluster IN {clusters:Array(String)} AND pci_bus_id != '') AS inv "
    "      ON inv.cluster = ev.cluster AND inv.host = ev.host AND inv.pci_bus_id = ev.pci) AS e "
    "ON e.cluster = jh.cluster AND e.host = jh.host "
    "WHERE e.ts >= jh.t0 - toIntervalSecond({w:UInt32}) AND e.ts <= jh.t0 + toIntervalSecond({w:UInt32}) "
    "GROUP BY jh.cluster, jh.job_id, jh.t0_ms, e.kind, e.code"
)

# Most telling first: hardware errors, then link trouble, then the rest.
_KIND_RANK = {"xid": 0, "sxid": 1, "link_down": 2, "link_up": 4}


def _to_interruption(row) -> Interruption:
    (cluster, job_id, name, user, partition, state, exit_code, reason, start_ts, end_ts,
     n_hosts, n_gpus, _total, hosts, n) = row
    hosts = list(hosts or [])
    return Interruption(
        cluster=cluster, job_id=job_id, name=name, user=user, partition=partition, state=state,
        exit_code=exit_code, reason=reason, start_ts=_utc(start_ts), t0=_utc(end_ts),
        n_hosts=int(n_hosts) or int(n or 0), n_gpus=int(n_gpus), hosts=hosts[:MAX_HOSTS_LISTED],
    )


def _attach_events(rows: list[Interruption], timeout_s: int) -> None:
    if not rows:
        return
    lo = min(r.t0 for r in rows)
    hi = max(r.t0 for r in rows)
    params = {
        "page": [(r.cluster, r.job_id, round(r.t0.timestamp() * 1000)) for r in rows],
        "clusters": sorted({r.cluster for r in rows}),
        "keys": [(r.cluster, r.job_id) for r in rows],
        "lo": lo - timedelta(seconds=EVENT_WINDOW_S),
        "hi": hi + timedelta(seconds=EVENT_WINDOW_S),
        "w": EVENT_WINDOW_S,
    }
    found = store.query_rows(_EVENTS_SQL, params, tag="interruptions.nearest_events", timeout_s=timeout_s)
    by_job: dict[tuple[str, str, int], list[EventSummary]] = {}
    for cluster, job_id, t0_ms, kind, code, n, hosts, first_host, first_comp, first_off in found:
        meaning = xid.describe(int(code)).meaning if kind == "xid" else ""
        by_job.setdefault((cluster, job_id, int(t0_ms)), []).append(
            EventSummary(kind, int(code), int(n), int(hosts), first_host, first_comp, float(first_off), meaning)
        )
    for r in rows:
        summaries = by_job.get((r.cluster, r.job_id, round(r.t0.timestamp() * 1000)), [])
        summaries.sort(key=lambda e: (_KIND_RANK.get(e.kind, 3), -e.count, e.first_offset_s))
        r.events = summaries[:TOP_EVENTS]
        r.event_total = sum(e.count for e in summaries)
        r.xid_codes = sorted({e.code for e in summaries if e.kind == "xid"})
        r.link_flaps = sum(e.count for e in summaries if e.kind == "link_down")


def list_interruptions(q: InterruptionQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> InterruptionPage:
    """Newest first; each row with its hosts and a summary of the events nearest t0."""
    _, params = _check(q)
    raw = store.query_rows(_PAGE_SQL, params, tag="interruptions.page", timeout_s=timeout_s)
    rows = [_to_interruption(r) for r in raw]
    total = int(raw[0][12]) if raw else 0
    if not raw and q.offset:
        total = count_interruptions(q, timeout_s=timeout_s)
    _attach_events(rows, timeout_s)
    return InterruptionPage(rows=rows, total=total, limit=q.limit, offset=q.offset)


def count_interruptions(q: InterruptionQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> int:
    _, params = _check(q)
    rows = store.query_rows(f"SELECT count() FROM jobs FINAL WHERE {_JOBS_WHERE}", params,
                            tag="interruptions.count", timeout_s=timeout_s)
    return int(rows[0][0])


def get_interruption(cluster: str, job_id: str, *, timeout_s: int = QUERY_TIMEOUT_S) -> Interruption | None:
    """The job as an interruption (None when unknown or it did not end abnormally)."""
    if not cluster or not job_id:
        raise ValueError("cluster and job_id are required")
    sql = _PAGE_SQL.replace(
        "({search:String} = '' OR positionCaseInsensitiveUTF8(name, {search:String}) > 0 OR job_id = {search:String})",
        "job_id = {job_id:String}",
    )
    params = {**_check(InterruptionQuery(cluster=cluster, limit=1))[1], "job_id": job_id}
    raw = store.query_rows(sql, params, tag="interruptions.get", timeout_s=timeout_s)
    if not raw:
        return None
    row = _to_interruption(raw[0])
    _attach_events([row], timeout_s)
    return row


def counts_by_week_and_state(
    start: datetime | None = None,
    end: datetime | None = None,
    cluster: str | None = None,
    *,
    timeout_s: int = QUERY_TIMEOUT_S,
) -> pd.DataFrame:
    """Columns week (Monday, UTC date), state, n — for the inbox bar chart."""
    _, params = _check(InterruptionQuery(start=start, end=end, cluster=cluster))
    df = store.query_df(
        "SELECT toMonday(end_ts) AS week, state, count() AS n "
        f"FROM jobs FINAL WHERE {_JOBS_WHERE} GROUP BY week, state ORDER BY week, state",
        params,
        tag="interruptions.counts_by_week",
        timeout_s=timeout_s,
    )
    if df.empty:
        return pd.DataFrame({"week": pd.Series(dtype="datetime64[ns]"), "state": pd.Series(dtype=str),
                             "n": pd.Series(dtype="int64")})
    df["n"] = df["n"].astype("int64")
    return df
