"""Fleet test of a signal hypothesis: does the signal fire before the outcome more often than
it fires at other times?

The question a hypothesis asks ("PCIe replays climb for hours before XID 79") is answered with
matched windows over the fleet's history, and with the alarms a deployed rule would raise.

Outcome
-------
``parse_outcome`` reads the hypothesis's outcome text: a Slurm interruption state
(``NODE_FAIL``, ``FAILED``, ...), one or more XID codes (``XID 79``, ``xid 48/94``: the
interruptions with such an XID on one of the job's hosts within ±10 min of t0), ``link down``
(a link-down event — an mlx5 ``Link down`` or pulled cable — on one of the job's hosts within
±10 min of t0), or ``any interruption``. Anything else is refused with the accepted forms.

Windows (W = the lead window)
-----------------------------
- **before the outcome**: for each interruption of the outcome, [t0 − W, t0) on the job's hosts;
- **same hosts at healthy times**: the same hosts over the same time of day 1, 2 and 3 days
  before and after, kept when no interruption of any kind touched those hosts from the window's
  start to W after its end, and the window lies in the tested range (later days count too: a
  short history still has controls, and a host that was down after its failure has no data);
- **healthy peers at the same time**: as many hosts as the job had (at most what there is), of
  the same cluster, reporting the metric, outside the job, without an interruption from t0 − W
  to t0 + W; picked by a hash of (job, host), so a re-run picks the same ones.
Controls are matched on activity: a control window counts only when its hosts were running a
job at its end (at least half of them, for the same-host controls; each peer, for the peers),
as the hosts before an interruption were. An idle host runs cooler, quieter and slower, and
workload-driven metrics would otherwise look like precursors. A cluster without any job
allocations on record is not matched.
A window whose hosts reported nothing of the metric in it (hourly coverage) is left out and
counted as ``no data``.

When does the signal fire
-------------------------
On the one-minute rollup (``samples_1m``), per series (host, component), a minute fires when:
- ``threshold``: the minute's max (operator ``>``) or min (``<``) passes the threshold;
- ``rate``: the per-second change since the series' previous minute passes it — counters from
  minute max to minute max (a drop is a reset: no rate), gauges from average to average;
- ``trend``: the change of the hourly average since the previous hour, per hour, passes it (a
  slow drift that a rate per second would not show).
A window fires when any minute of any component of any of its hosts fires in it. The engine
returns only the firing (host, minute) pairs and the hourly coverage; the rest is arithmetic on
those.

Statistics
----------
The 2×2 table: a = windows before the outcome that fired, b = control windows that fired,
c and d the quiet ones. recall = a/(a+c); control firing rate = b/(b+d); lift = their ratio
(relative risk, with the Katz log interval; ½ added to every cell when one is zero);
p = Fisher's exact test, one-sided (more firing before the outcome than in controls).
Intervals on proportions are Jeffreys 95 %.

Alarms: each host's firing minutes, de-duplicated to one alarm per W (the first minute opens
an alarm, minutes within W of it belong to it). An alarm is true when an interruption of the
outcome involving that host has t0 within (first minute, first minute + W]. precision =
true / alarms; false alarms per 1,000 node-days observed (node-days from the hourly coverage).
Lead time: t0 − the first firing minute of each fired window before the outcome.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np
import pandas as pd
from scipy.stats import fisher_exact

from telemetry import catalog, store
from telemetry.stats import jeffreys_interval
from telemetry.queries.interruptions import EVENT_WINDOW_S, INTERRUPTION_STATES

CONDITIONS = ("threshold", "rate", "trend")
OPERATORS = (">", "<")
CONTROL_DAYS = (-3, -2, -1, 1, 2, 3)  # days from t0; the windows keep the time of day
COVERAGE_S = 3600
MAX_EXAMPLES = 60
QUERY_TIMEOUT_S = 600

_XID_RE = re.compile(r"^xids?\s*[:#]?\s*(\d{1,3}(?:\s*[/,+ ]\s*(?:xid\s*)?\d{1,3})*)$", re.I)


class NotTestable(ValueError):
    """The hypothesis cannot be tested as stated; the message says why and what would do."""


@dataclass(frozen=True)
class Outcome:
    label: str
    states: tuple[str, ...] = ()  # empty: any interruption state
    xids: tuple[int, ...] = ()  # non-empty: only interruptions with one of these XIDs near t0
    events: tuple[str, ...] = ()  # non-empty: only interruptions with an event of these kinds near t0


def parse_outcome(text: str) -> Outcome:
    raw = " ".join((text or "").split())
    upper = raw.upper().replace(" ", "_")
    if upper in INTERRUPTION_STATES:
        return Outcome(label=upper, states=(upper,))
    if raw.lower() in ("any", "any interruption", "interruption", "interruptions", "any_interruption"):
        return Outcome(label="any interruption")
    if raw.lower().replace("_", " ").replace("-", " ") in ("link down", "linkdown"):
        return Outcome(label="link down", events=("link_down",))
    m = _XID_RE.match(raw)
    if m:
        codes = tuple(sorted({int(c) for c in re.findall(r"\d+", m.group(1))}))
        return Outcome(label="XID " + "/".join(map(str, codes)), xids=codes)
    raise NotTestable(
        f"outcome {raw!r} is not a class the fleet test can find: use an interruption state "
        f"({', '.join(INTERRUPTION_STATES)}), XID codes ('XID 79', 'XID 48/94'), 'link down' or 'any interruption'")


@dataclass(frozen=True)
class Signal:
    metric: str
    condition: str
    operator: str
    threshold: float
    lead_s: int

    def __post_init__(self):
        if not catalog.is_known(self.metric):
            raise NotTestable(f"metric {self.metric!r} is not in the catalog")
        if self.condition not in CONDITIONS:
            raise NotTestable(f"condition {self.condition!r} is not one of {', '.join(CONDITIONS)}")
        if self.operator not in OPERATORS:
            raise NotTestable(f"operator {self.operator!r} is not one of {' '.join(OPERATORS)}")
        if not math.isfinite(self.threshold):
            raise NotTestable("threshold must be a finite number")
        if not 60 <= self.lead_s <= 30 * 86400:
            raise NotTestable(f"lead window {self.lead_s} s: the fleet test needs 1 min to 30 days")

    @property
    def text(self) -> str:
        what = {"threshold": "value", "rate": "rate /s", "trend": "trend /h"}[self.condition]
        return f"{self.metric} {what} {self.operator} {self.threshold:g} within {self.lead_s / 3600:g} h before"


@dataclass
class Interruption:
    cluster: str
    job_id: str
    name: str
    state: str
    t0: int  # epoch seconds
    hosts: tuple[str, ...]


@dataclass
class Window:
    kind: str  # before | same_hosts | peers
    index: int  # the interruption it belongs to
    hosts: tuple[str, ...]
    start: int
    end: int
    fired_at: int | None = None
    has_data: bool = True


@dataclass
class TestResult:
    signal: str
    outcome: str
    clusters: list[str]
    range: tuple[str, str] | None
    n_outcome: int
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    no_data_before: int = 0
    no_data_controls: int = 0
    controls: dict = field(default_factory=dict)
    lead_times_s: list[int] = field(default_factory=list)
    alarms: int = 0
    true_alarms: int = 0
    node_days: float = 0.0
    examples: list[dict] = field(default_factory=list)
    matched_on_activity: bool = False

    def as_dict(self) -> dict:
        recall, rlo, rhi = jeffreys_interval(self.a, self.c)
        control_rate, clo, chi = jeffreys_interval(self.b, self.d)
        lift, llo, lhi = _relative_risk(self.a, self.b, self.c, self.d)
        p = None
        if (self.a + self.c) and (self.b + self.d):
            p = float(fisher_exact([[self.a, self.b], [self.c, self.d]], alternative="greater").pvalue)
        precision, plo, phi = jeffreys_interval(self.true_alarms, self.alarms - self.true_alarms)
        false_alarms = self.alarms - self.true_alarms
        leads = sorted(self.lead_times_s)
        return {
            "signal": self.signal, "outcome": self.outcome, "clusters": self.clusters,
            "range": list(self.range) if self.range else None, "outcome_interruptions": self.n_outcome,
            "table": {"a": self.a, "b": self.b, "c": self.c, "d": self.d},
            "no_data": {"before": self.no_data_before, "controls": self.no_data_controls},
            "controls": self.controls, "matched_on_activity": self.matched_on_activity,
            "recall": recall, "recall_ci": [rlo, rhi],
            "control_rate": control_rate, "control_rate_ci": [clo, chi],
            "lift": lift, "lift_ci": [llo, lhi], "p": p,
            "alarms": self.alarms, "true_alarms": self.true_alarms,
            "precision": precision, "precision_ci": [plo, phi],
            "node_days": round(self.node_days, 2),
            "false_alarms_per_1000_node_days": (round(false_alarms / self.node_days * 1000, 3)
                                                if self.node_days else None),
            "lead_times_s": leads, "lead_median_s": float(np.median(leads)) if leads else None,
            "examples": self.examples,
        }


def _relative_risk(a: int, b: int, c: int, d: int):
    if not (a + c) or not (b + d):
        return None, None, None
    if 0 in (a, b, c, d):
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    rr = (a / (a + c)) / (b / (b + d))
    se = math.sqrt(1 / a - 1 / (a + c) + 1 / b - 1 / (b + d))
    z = 1.959963984540054
    return rr, rr * math.exp(-z * se), rr * math.exp(z * se)


# --- the engine's part ---------------------------------------------------------------------------

# The one-minute rollup of one metric in one cluster, merged per (host, component, minute): the
# AggregatingMergeTree may hold a minute in several unmerged parts.
ROLLUP_SQL = ("SELECT host, component, ts, min(min) AS lo, max(max) AS hi, sum(sum) AS s, sum(count) AS n, "
           "max(max_ts) AS last_ts FROM samples_1m "
           "WHERE cluster = {cluster:String} AND metric = {metric:String} "
           "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) "
           "GROUP BY host, component, ts")


def _firing_sql(signal: Signal, counter: bool) -> str:
    op = signal.operator
    if signal.condition == "threshold":
        value = "hi" if op == ">" else "lo"
        return (f"SELECT host, toUnixTimestamp(ts) AS t FROM ({ROLLUP_SQL}) "
                f"WHERE {value} {op} {{thr:Float64}} GROUP BY host, t ORDER BY host, t")
    if signal.condition == "rate":
        value = "hi" if counter else "s / n"
        clock = "toUnixTimestamp64Milli(last_ts) / 1000.0" if counter else "toFloat64(toUnixTimestamp(ts))"
        reset = "AND v >= pv" if counter else ""
        return (
            "SELECT host, t FROM ("
            f"  SELECT host, toUnixTimestamp(ts) AS t, {value} AS v, {clock} AS c, "
            "   lagInFrame(v) OVER w AS pv, lagInFrame(c) OVER w AS pc, row_number() OVER w AS rn "
            f"  FROM ({ROLLUP_SQL}) WINDOW w AS (PARTITION BY host, component ORDER BY ts "
            "   ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
            f"WHERE rn > 1 AND c > pc {reset} AND (v - pv) / (c - pc) {op} {{thr:Float64}} "
            "GROUP BY host, t ORDER BY host, t")
    # trend: hourly averages, the change from one hour to the next, per hour
    return (
        "SELECT host, t FROM ("
        "  SELECT host, h AS t, v, lagInFrame(v) OVER w AS pv, lagInFrame(h) OVER w AS ph, row_number() OVER w AS rn "
        "  FROM (SELECT host, component, intDiv(toUnixTimestamp(ts), 3600) * 3600 AS h, sum(s) / sum(n) AS v "
        f"        FROM ({ROLLUP_SQL}) GROUP BY host, component, h) "
        "  WINDOW w AS (PARTITION BY host, component ORDER BY h ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
        f"WHERE rn > 1 AND t > ph AND (v - pv) / ((t - ph) / 3600.0) {op} {{thr:Float64}} "
        "GROUP BY host, t ORDER BY host, t")


_COVERAGE_SQL = ("SELECT host, intDiv(toUnixTimestamp(ts), {cov:UInt32}) AS hour FROM samples_1m "
                 "WHERE cluster = {cluster:String} AND metric = {metric:String} "
                 "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) "
                 "GROUP BY host, hour ORDER BY host, hour")

_SPAN_SQL = ("SELECT toUnixTimestamp(min(ts)), toUnixTimestamp(max(ts)), count() FROM samples_1m "
             "WHERE cluster = {cluster:String} AND metric = {metric:String}")

_INTERRUPTED = (
    "SELECT job_id, name, state, assumeNotNull(end_ts) AS end_ts FROM jobs FINAL "
    "WHERE cluster = {cluster:String} AND state IN {states:Array(String)} AND end_ts IS NOT NULL "
    "AND end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND end_ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")
_INTERRUPTIONS_SQL = (
    f"SELECT j.job_id, j.name, j.state, toUnixTimestamp(j.end_ts) AS t0, h.hosts FROM ({_INTERRUPTED}) AS j "
    # each run of a requeued job has its own hosts: the run that started last before t0
    "ASOF INNER JOIN (SELECT job_id, run_ts, groupArray(host) AS hosts FROM job_hosts FINAL "
    "WHERE cluster = {cluster:String} "
    f" AND job_id IN (SELECT job_id FROM ({_INTERRUPTED})) GROUP BY job_id, run_ts) AS h "
    "ON h.job_id = j.job_id AND h.run_ts <= j.end_ts "
    "ORDER BY t0, j.job_id")

_XIDS_SQL = ("SELECT host, toUnixTimestamp(ts) FROM events WHERE cluster = {cluster:String} AND kind = 'xid' "
             "AND code IN {codes:Array(Int64)} AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') "
             "AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")


_EVENT_KINDS_SQL = ("SELECT host, toUnixTimestamp(ts) FROM events WHERE cluster = {cluster:String} "
                    "AND kind IN {kinds:Array(String)} AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') "
                    "AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")

_ALLOCATIONS_SQL = (
    "SELECT host, toUnixTimestamp(start_ts) AS s, toUnixTimestamp(ifNull(end_ts, now64(3))) AS e "
    "FROM job_hosts FINAL WHERE cluster = {cluster:String} "
    "AND (end_ts IS NULL OR end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC')) "
    "AND start_ts < toDateTime64({hi_s:Int64}, 3, 'UTC') ORDER BY host, s")


@dataclass
class Allocations:
    """Per host, the sorted start times of its job allocations and the running maximum of their
    ends: a host is busy at t when the latest allocation starting at or before t ends after t."""
    by_host: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def load(cls, cluster: str, lo_s: int, hi_s: int, *, timeout_s: int) -> "Allocations":
        table = store.query_arrow(_ALLOCATIONS_SQL, {"cluster": cluster, "lo_s": lo_s, "hi_s": hi_s},
                                  tag="signal_test:allocations", timeout_s=timeout_s)
        by_host = {}
        if table.num_rows:
            starts = table.column(1).to_numpy().astype(np.int64)
            ends = table.column(2).to_numpy().astype(np.int64)
            for host, a, b in host_runs(table):
                by_host[host] = (starts[a:b], np.maximum.accumulate(ends[a:b]))
        return cls(by_host)

    def __bool__(self) -> bool:
        return bool(self.by_host)

    def busy(self, host: str, t: int) -> bool:
        found = self.by_host.get(host)
        if found is None:
            return False
        starts, ends = found
        i = int(np.searchsorted(starts, t, side="right")) - 1
        return i >= 0 and ends[i] > t


def clusters_with_jobs(*, timeout_s: int = 60) -> list[str]:
    """Every cluster the scheduler reported jobs for (where interruptions can be found)."""
    rows = store.query_rows("SELECT DISTINCT cluster FROM jobs ORDER BY cluster", tag="signal_test:clusters",
                            timeout_s=timeout_s)
    return [r[0] for r in rows]


def host_runs(table) -> list[tuple[str, int, int]]:
    """(host, first row, end row) of each host's run in an Arrow result ordered by host first."""
    if table.num_rows == 0:
        return []
    hosts = table.column(0).to_pandas().astype(str).to_numpy()
    cuts = np.flatnonzero(hosts[1:] != hosts[:-1]) + 1
    starts, ends = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(hosts)]))
    return [(str(hosts[a]), int(a), int(b)) for a, b in zip(starts, ends)]


def _by_host(rows) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for host, t in rows:
        out.setdefault(host, []).append(int(t))
    return {h: np.asarray(v, dtype=np.int64) for h, v in out.items()}


def _columns_by_host(sql: str, params: dict, *, tag: str, timeout_s: int) -> dict[str, np.ndarray]:
    """(host, t) rows ordered by host, t — read as Arrow columns, not Python tuples: a noisy
    signal on a big fleet returns millions of firing minutes."""
    table = store.query_arrow(sql, params, tag=tag, timeout_s=timeout_s)
    times = table.column(1).to_numpy().astype(np.int64) if table.num_rows else None
    return {host: times[a:b] for host, a, b in host_runs(table)}


def _pick_peers(job_key: str, candidates: list[str], k: int) -> tuple[str, ...]:
    ranked = sorted(candidates, key=lambda h: hashlib.blake2b(f"{job_key}|{h}".encode(), digest_size=8).digest())
    return tuple(sorted(ranked[:k]))


def _alarm_starts(times: np.ndarray, lead_s: int) -> np.ndarray:
    """One alarm per lead window: the first firing minute opens one, minutes within lead_s of
    it belong to it, the next minute after that opens the next."""
    starts = []
    i, n = 0, len(times)
    while i < n:
        t = int(times[i])
        starts.append(t)
        i = int(np.searchsorted(times, t + lead_s, side="left"))
    return np.asarray(starts, dtype=np.int64)


def _first_fire(fires: dict[str, np.ndarray], hosts, start: int, end: int) -> int | None:
    best = None
    for h in hosts:
        arr = fires.get(h)
        if arr is None or not len(arr):
            continue
        i = int(np.searchsorted(arr, start, side="left"))
        if i < len(arr) and arr[i] < end and (best is None or arr[i] < best):
            best = int(arr[i])
    return best


def _covered(coverage: dict[str, np.ndarray], hosts, start: int, end: int) -> bool:
    lo, hi = start // COVERAGE_S, (end - 1) // COVERAGE_S
    for h in hosts:
        arr = coverage.get(h)
        if arr is None:
            continue
        i = int(np.searchsorted(arr, lo, side="left"))
        if i < len(arr) and arr[i] <= hi:
            return True
    return False


def _touched(host_t0s: dict[str, np.ndarray], hosts, lo: int, hi: int) -> bool:
    """Did an interruption (any kind) on one of ``hosts`` end in [lo, hi)?"""
    for h in hosts:
        arr = host_t0s.get(h)
        if arr is None:
            continue
        i = int(np.searchsorted(arr, lo, side="left"))
        if i < len(arr) and arr[i] < hi:
            return True
    return False


def outcome_interruptions(cluster: str, outcome: Outcome, W: int, lo_s: int, hi_s: int, *,
                          timeout_s: int) -> tuple[list[Interruption], dict[str, np.ndarray]]:
    """The interruptions of ``outcome`` whose whole lead window lies in [lo_s, hi_s), and the
    sorted t0s of every interruption per host (they decide which controls are healthy)."""
    # Interruptions a little past the range too: controls reach 3 days and a lead window out.
    rows = store.query_rows(_INTERRUPTIONS_SQL, {"cluster": cluster, "states": list(INTERRUPTION_STATES),
                                                 "lo_s": lo_s - 4 * 86400 - W, "hi_s": hi_s + W},
                            tag="signal_test:interruptions", timeout_s=timeout_s)
    every = [Interruption(cluster, r[0], r[1], r[2], int(r[3]), tuple(sorted(r[4]))) for r in rows]
    host_t0s: dict[str, list[int]] = {}
    for it in every:
        for h in it.hosts:
            host_t0s.setdefault(h, []).append(it.t0)
    host_t0s_arr = {h: np.asarray(sorted(v), dtype=np.int64) for h, v in host_t0s.items()}
    chosen = [it for it in every if lo_s + W <= it.t0 < hi_s and (not outcome.states or it.state in outcome.states)]
    if outcome.xids and chosen:
        xid_rows = store.query_rows(_XIDS_SQL, {"cluster": cluster, "codes": list(outcome.xids),
                                                "lo_s": lo_s - EVENT_WINDOW_S, "hi_s": hi_s + EVENT_WINDOW_S},
                                    tag="signal_test:xids", timeout_s=timeout_s)
        xids = {h: np.sort(v) for h, v in _by_host(xid_rows).items()}
        chosen = [it for it in chosen if _touched(xids, it.hosts, it.t0 - EVENT_WINDOW_S, it.t0 + EVENT_WINDOW_S + 1)]
    if outcome.events and chosen:
        rows = store.query_rows(_EVENT_KINDS_SQL, {"cluster": cluster, "kinds": list(outcome.events),
                                                   "lo_s": lo_s - EVENT_WINDOW_S, "hi_s": hi_s + EVENT_WINDOW_S},
                                tag="signal_test:outcome_events", timeout_s=timeout_s)
        seen = {h: np.sort(v) for h, v in _by_host(rows).items()}
        chosen = [it for it in chosen if _touched(seen, it.hosts, it.t0 - EVENT_WINDOW_S, it.t0 + EVENT_WINDOW_S + 1)]
    return chosen, host_t0s_arr


def matched_windows(cluster: str, chosen: list[Interruption], host_t0s: dict[str, np.ndarray], W: int,
                    lo_s: int, hi_s: int, reporting: list[str],
                    allocations: Allocations | None = None) -> list[Window]:
    """The window before each chosen interruption and its controls (see the module docstring);
    with ``allocations``, controls only where the hosts were running a job at the window's end."""
    matched = bool(allocations)
    windows: list[Window] = []
    for idx, it in enumerate(chosen):
        windows.append(Window("before", idx, it.hosts, it.t0 - W, it.t0))
        for k in CONTROL_DAYS:
            s, e = it.t0 - W + k * 86400, it.t0 + k * 86400
            if s < lo_s or e > hi_s or _touched(host_t0s, it.hosts, s, e + W):
                continue
            if matched and 2 * sum(allocations.busy(h, e - 1) for h in it.hosts) < len(it.hosts):
                continue
            windows.append(Window("same_hosts", idx, it.hosts, s, e))
        job_hosts = set(it.hosts)
        candidates = [h for h in reporting if h not in job_hosts and not _touched(host_t0s, (h,), it.t0 - W, it.t0 + W)
                      and (not matched or allocations.busy(h, it.t0 - 1))]
        if candidates:
            windows.append(Window("peers", idx, _pick_peers(f"{cluster}|{it.job_id}", candidates, len(it.hosts)),
                                  it.t0 - W, it.t0))
    return windows


def run(signal: Signal, outcome: Outcome, *, clusters: list[str] | None = None,
        start: datetime | None = None, end: datetime | None = None,
        progress: Callable[[int, int, str], None] | None = None, timeout_s: int = QUERY_TIMEOUT_S) -> TestResult:
    """Test ``signal`` against ``outcome`` on the given clusters (default: every cluster with jobs)
    over [start, end) (default: all the metric's history in the store)."""
    say = progress or (lambda done, total, stage: None)
    metric = catalog.get(signal.metric)
    counter = metric.is_counter
    W = int(signal.lead_s)
    clusters = clusters or clusters_with_jobs(timeout_s=timeout_s)
    result = TestResult(signal=signal.text, outcome=outcome.label, clusters=list(clusters), range=None, n_outcome=0,
                        controls={"same_hosts": 0, "peers": 0})
    steps = 4 * max(1, len(clusters))
    step = 0
    lo_all, hi_all = None, None
    for ci, cluster in enumerate(clusters):
        prefix = f"cluster {cluster} ({ci + 1}/{len(clusters)})"
        say(step, steps, f"{prefix}: finding the metric's history")
        (first, last, n), = store.query_rows(_SPAN_SQL, {"cluster": cluster, "metric": signal.metric},
                                              tag="signal_test:span", timeout_s=timeout_s)
        if not n:
            step += 4
            continue
        lo_s = int(start.timestamp()) if start else int(first)
        hi_s = int(end.timestamp()) if end else int(last) + 60
        if hi_s <= lo_s:
            step += 4
            continue
        lo_all = lo_s if lo_all is None else min(lo_all, lo_s)
        hi_all = hi_s if hi_all is None else max(hi_all, hi_s)
        base = {"cluster": cluster, "metric": signal.metric, "lo_s": lo_s, "hi_s": hi_s}

        step += 1
        say(step, steps, f"{prefix}: interruptions and their hosts")
        chosen, host_t0s_arr = outcome_interruptions(cluster, outcome, W, lo_s, hi_s, timeout_s=timeout_s)

        step += 1
        say(step, steps, f"{prefix}: minutes where the signal fires")
        fires = _columns_by_host(_firing_sql(signal, counter), {**base, "thr": float(signal.threshold)},
                                 tag="signal_test:fires", timeout_s=timeout_s)
        coverage = _columns_by_host(_COVERAGE_SQL, {**base, "cov": COVERAGE_S},
                                    tag="signal_test:coverage", timeout_s=timeout_s)
        reporting = sorted(coverage)

        step += 1
        say(step, steps, f"{prefix}: {len(chosen)} interruptions of {outcome.label} against their controls")
        allocations = Allocations.load(cluster, lo_s - 4 * 86400 - W, hi_s + W, timeout_s=timeout_s)
        windows = matched_windows(cluster, chosen, host_t0s_arr, W, lo_s, hi_s, reporting, allocations)
        result.matched_on_activity = result.matched_on_activity or bool(allocations)
        for w in windows:
            w.has_data = _covered(coverage, w.hosts, w.start, w.end)
            if w.has_data:
                w.fired_at = _first_fire(fires, w.hosts, w.start, w.end)
        result.n_outcome += len(chosen)
        for w in windows:
            if w.kind == "before":
                if not w.has_data:
                    result.no_data_before += 1
                elif w.fired_at is not None:
                    result.a += 1
                    result.lead_times_s.append(int(chosen[w.index].t0 - w.fired_at))
                else:
                    result.c += 1
            else:
                if not w.has_data:
                    result.no_data_controls += 1
                    continue
                result.controls[w.kind] += 1
                if w.fired_at is not None:
                    result.b += 1
                else:
                    result.d += 1
        for w in windows:
            if w.kind == "before":
                it = chosen[w.index]
                result.examples.append({
                    "cluster": cluster, "job_id": it.job_id, "name": it.name, "state": it.state,
                    "t0": datetime.fromtimestamp(it.t0, timezone.utc).isoformat(), "hosts": len(it.hosts),
                    "fired": w.fired_at is not None, "has_data": w.has_data,
                    "lead_s": int(it.t0 - w.fired_at) if w.fired_at is not None else None,
                })

        step += 1
        say(step, steps, f"{prefix}: alarms a deployed rule would have raised")
        outcome_t0s: dict[str, list[int]] = {}
        for it in chosen:
            for h in it.hosts:
                outcome_t0s.setdefault(h, []).append(it.t0)
        outcome_arr = {h: np.asarray(sorted(v), dtype=np.int64) for h, v in outcome_t0s.items()}
        for host, times in fires.items():
            opened = _alarm_starts(times, W)
            result.alarms += len(opened)
            after = outcome_arr.get(host)
            if after is not None and len(opened):
                # the first outcome t0 after each alarm's first minute: within W makes it true
                i = np.searchsorted(after, opened + 1, side="left")
                ok = i < len(after)
                result.true_alarms += int(np.count_nonzero(after[i[ok]] <= opened[ok] + W))
        result.node_days += sum(len(v) for v in coverage.values()) * COVERAGE_S / 86400
    if lo_all is not None:
        iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat()  # noqa: E731
        result.range = (iso(lo_all), iso(hi_all))
    # Fired first (longest lead first), then the quiet ones, then those without data.
    result.examples.sort(key=lambda e: (not e["fired"], not e["has_data"], -(e["lead_s"] or 0), e["t0"]))
    del result.examples[MAX_EXAMPLES:]
    say(steps, steps, "done")
    return result
