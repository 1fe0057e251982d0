"""Fleet test of a signal hypothesis: does the signal fire before the outcome more often than
it fires at other times?

The question a hypothesis asks ("PCIe replays climb for hours before XID 79") is answered with
matched windows over the fleet's history, and with the alarms a deployed rule would raise.

Outcomes and windows
--------------------
The outcome (``parse_outcome``: a Slurm state, XID codes, ``link down`` or ``any interruption``) and the matched
windows — the lead window W before each interruption of the outcome, the same hosts at healthy
times, healthy peers at the same time, matched on activity — are the window engine's
(telemetry/queries/windows.py), shared with the signal scan and the dataset export. A window
whose hosts reported nothing of the metric in it is left out and counted as ``no data``.

When does the signal fire
-------------------------
On the one-minute rollup (``samples_1m``), per series (host, component), a minute fires when:
- ``threshold``: the minute's max (operator ``>``) or min (``<``) passes the threshold;
- ``rate``: the per-second change since the series' previous minute passes it — counters from
  minute max to minute max (a drop is a reset: no rate), gauges from average to average;
- ``trend``: the change of the hourly average since the previous hour, per hour, passes it (a
  slow drift that a rate per second would not show).
- ``rise``: the part's score against its OWN past — the signal scan's statistic
  (telemetry/queries/scores.py: ln((k + 1)/(λ + 1)) for counters, the window mean in baseline
  standard deviations for gauges, against the recent or the earlier past, whichever the window
  departs from most; oriented so higher is worse) — of the lead window ending with
  the minute passes it. A part that was always noisy scores ~0, so the 1-3 % of chronically noisy
  healthy parts, on which a ``rate`` rule fires all the time, do not fire; firings are per part
  (``rise`` is never read per host). Nor does it score a host that ran no job for half or more of
  that past (``phase.idle_past_hosts``, the signal scan's rule: it would score high on every
  load-driven metric the moment a job starts): such a host is left out of a window, a window left
  with none has no data (both counted in ``controls_excluded``), and its minutes raise no alarm.
A window fires when any minute of any component of any of its hosts fires in it — except where
the outcome names the failing part (the GPU of an XID, the NIC of a link-down): then the window is
that part's, as in the signal scan. The window before the outcome fires only when the failing part
fires; its controls are the same part at the same hosts' other times and its namesake on the
healthy peer that takes the failing host's place (``contrasts.window_reads``; every part of that
one host where the metric has no series of the part's family: a fan before an XID). A noisy GPU
elsewhere in a 16-host job then fires neither the window before the failure nor a control
(``component_windows`` counts the windows before the outcome judged this way). A pinned rule's
threshold is still set on what every part of the window's hosts reads at healthy times
(rules.pin_basis): a deployed rule watches every part. There a control is one host
(windows.matched_windows), so the threshold stays rare per host, not per job: about 5 % of a
host's healthy windows pass it. For ``rise``, a window fires when a part's score of the window's own data (at its end: the signal scan's reading, the same
``scores.window_scores`` call) passes, so a threshold pinned from a scan's control windows
(rules.pin_rule) fires here in the share of healthy windows it was set on; the rolling score times
the firing and counts the alarms. ``power`` says what the table could show at best. The engine
returns only the firing (host, minute) pairs and the hourly coverage; the rest is arithmetic on
those.

Statistics
----------
The 2×2 table: a = windows before the outcome that fired, b = control windows that fired,
c and d the quiet ones. recall = a/(a+c); control firing rate = b/(b+d); lift = their ratio
(relative risk, with the Katz log interval; ½ added to every cell when one is zero);
p = Fisher's exact test, one-sided (more firing before the outcome than in controls).
Intervals on proportions are Jeffreys 95 %.

Alarms: each part's firings (a part: the component up to its first ``/``, gpu3 for
gpu3/nvlink2; '' for host-level series), de-duplicated to one alarm per W (the first firing opens
an alarm, firings within W of it belong to it). Counting per part, not per host, keeps a rise on
every GPU of a job from counting as one true alarm per host. A firing while the host runs no job
raises no alarm (nothing to interrupt; a load-following gauge reads low on every idle host): such
alarms are counted apart (``idle_alarms``), where the cluster has job allocations on record. An
alarm is true when an interruption of the outcome has t0 within (first firing, first firing + W]
and names that part (the GPU of its XID, the NIC of its link-down), or names no part and involves
that host.
precision = true / alarms; false alarms per 1,000 node-days observed (node-days from the hourly
coverage). Firings are timed at the sample that shows them (below), so lead times are exact.
Lead time: t0 − the first firing of each fired window before the outcome.

Where the outcome names the failing part, ``component_contrasts`` says whether the rule fired on
that part and not on its siblings in the same job, nor in the part's own earlier windows
(telemetry/queries/fleet_contrasts.py). ``phase_contrasts`` splits the table by what the job was
doing in each window — a checkpoint write under way, a heavy phase (telemetry/queries/phase.py) —
and flags a rule that marks a phase over-represented before the outcome and does not hold within
the strata (Cochran–Mantel–Haenszel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np
from scipy.stats import fisher_exact

from telemetry import catalog, rules, store
from telemetry.queries import contrasts, fleet_contrasts, phase, scores, windows
from telemetry.queries.windows import (COVERAGE_S, QUERY_TIMEOUT_S, ROLLUP_SQL, Interruption, NotTestable,  # noqa: F401
                                       Outcome, Window, parse_outcome)
from telemetry.stats import jeffreys_interval

MAX_EXAMPLES = 60


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
        if self.condition not in rules.CONDITIONS:
            raise NotTestable(f"condition {self.condition!r} is not one of {', '.join(rules.CONDITIONS)}")
        if self.operator not in rules.OPERATORS:
            raise NotTestable(f"operator {self.operator!r} is not one of {' '.join(rules.OPERATORS)}")
        if not math.isfinite(self.threshold):
            raise NotTestable("threshold must be a finite number")
        windows.check_lead(self.lead_s, "the fleet test")

    @property
    def text(self) -> str:
        what = {"threshold": "value", "rate": "rate /s", "trend": "trend /h",
                "rise": "score vs own baseline"}[self.condition]
        return f"{self.metric} {what} {self.operator} {self.threshold:g} within {self.lead_s / 3600:g} h before"


@dataclass
class FleetTestResult:
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
    idle_alarms: int = 0  # alarms that would have opened on a host running no job: not counted
    node_days: float = 0.0
    examples: list[dict] = field(default_factory=list)
    matched_on_activity: bool = False
    excluded: windows.Exclusions = field(default_factory=windows.Exclusions)  # candidate controls left out
    parts: fleet_contrasts.PartCounts = field(default_factory=fleet_contrasts.PartCounts)  # component contrasts
    groups: dict = field(default_factory=dict)  # strata by the racks/drivers/firmware failures concentrate on
    phases: dict = field(default_factory=dict)  # strata by checkpoint write / heavy phase (phase.py)
    component_windows: int = 0  # windows before the outcome judged on the failing part (not job-wide)

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
            "controls": self.controls, "controls_excluded": self.excluded.as_dict(),
            "component_contrasts": self.parts.as_dict(),
            "group_contrasts": fleet_contrasts.summarize_groups(self.groups),
            "phase_contrasts": phase.summarize_fleet(self.phases),
            "matched_on_activity": self.matched_on_activity, "component_windows": self.component_windows,
            "recall": recall, "recall_ci": [rlo, rhi],
            "control_rate": control_rate, "control_rate_ci": [clo, chi],
            "lift": lift, "lift_ci": [llo, lhi], "p": p,
            "alarms": self.alarms, "true_alarms": self.true_alarms, "idle_alarms": self.idle_alarms,
            "precision": precision, "precision_ci": [plo, phi],
            "node_days": round(self.node_days, 2),
            "false_alarms_per_1000_node_days": (round(false_alarms / self.node_days * 1000, 3)
                                                if self.node_days else None),
            "lead_times_s": leads, "lead_median_s": float(np.median(leads)) if leads else None,
            "examples": self.examples,
            "power": _power(self.a, self.b, self.c, self.d),
        }


POWER_P = 0.01


def _power(a: int, b: int, c: int, d: int) -> dict | None:
    """What this table could show at best: the p and lift if every window before the outcome had
    fired, the controls as they are (``best_p``, ``best_lift``), and the p if no control had fired
    either (``floor_p``: no rule can do better on these windows). ``underpowered`` where even
    ``best_p`` is not below POWER_P: too few windows before the outcome for this rule to prove
    anything, however real the signal — a result to read as "not shown", not as "no"."""
    n, m = a + c, b + d
    if not n or not m:
        return None
    best_p = float(fisher_exact([[n, b], [0, d]], alternative="greater").pvalue)
    floor_p = float(fisher_exact([[n, 0], [0, m]], alternative="greater").pvalue)
    best_lift = _relative_risk(n, b, 0, d)[0]
    note = ""
    if best_p >= POWER_P:
        note = (f"underpowered: with {n} window{'s' if n != 1 else ''} before the outcome and {b} of {m} controls "
                f"firing, even a rule that fired before every failure would show p {best_p:.2g} at best "
                f"(lift {best_lift:.3g}); more failures, or a rule quieter in the controls, are needed for p < {POWER_P}")
    return {"windows_before": n, "windows_control": m, "best_p": best_p, "best_lift": best_lift,
            "floor_p": floor_p, "underpowered": best_p >= POWER_P, "note": note}


def _relative_risk(a: int, b: int, c: int, d: int):
    if not (a + c) or not (b + d):
        return None, None, None
    if 0 in (a, b, c, d):
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    rr = (a / (a + c)) / (b / (b + d))
    se = math.sqrt(1 / a - 1 / (a + c) + 1 / b - 1 / (b + d))
    z = 1.959963984540054
    return rr, rr * math.exp(-z * se), rr * math.exp(z * se)


_UNIT = "splitByChar('/', component)[1]"  # gpu3/nvlink2 -> gpu3: the part an alarm is raised on

# The raw samples of one metric in one cluster (a threshold fires at the sample that crosses it).
_RAW_SQL = ("SELECT host, component, ts, value FROM samples WHERE cluster = {cluster:String} "
            "AND metric = {metric:String} AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') "
            "AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")


# rows a firing query orders at most, about (bounds its memory). At 1,000,000 a rate rule's fleet
# test on the 256-host bench fleet (2,048 GPUs x 40 days), after a scan in the same process, peaked
# 280-400 MB above the process before it (1,180-1,334 MB: the whole bench's peak), ~120 MB on the
# 48-host fleet, whose metric has about that many rows in all; at 250,000, 1,026-1,046 MB, ~10 s either way
FIRES_ROWS_PER_QUERY = 250_000
_ROWS_SQL = ("SELECT count() FROM {table} WHERE cluster = {{cluster:String}} AND metric = {{metric:String}} "
             "AND ts >= toDateTime({{lo_s:Int64}}) AND ts < toDateTime({{hi_s:Int64}})")
_HOSTS = " AND host IN {hosts:Array(String)}"


def _firing_sql(signal: Signal, counter: bool, sliced: bool = False) -> str:
    """(host, ms) of each firing, at the time of the sample that shows it: the first sample past a
    threshold in each minute (raw samples, not the minute's start), the sample that closes a
    minute whose rate passes (the minute's last sample), the last sample of an hour whose trend
    passes. An alarm therefore never starts before the data that raised it. ``sliced``: only the
    hosts of the ``hosts`` parameter."""
    rollup = ROLLUP_SQL.replace(" GROUP BY", _HOSTS + " GROUP BY") if sliced else ROLLUP_SQL
    raw = _RAW_SQL + (_HOSTS if sliced else "")
    op = signal.operator
    if signal.condition == "threshold":
        return (f"SELECT host, {_UNIT} AS unit, toUnixTimestamp64Milli(min(ts)) AS t FROM ({raw}) "
                f"WHERE value {op} {{thr:Float64}} GROUP BY host, unit, toStartOfMinute(ts) "
                "ORDER BY host, unit, t")
    if signal.condition == "rate":
        value = "hi" if counter else "s / n"
        clock = "toUnixTimestamp64Milli(last_ts) / 1000.0" if counter else "toFloat64(toUnixTimestamp(ts))"
        reset = "AND v >= pv" if counter else ""
        return (
            f"SELECT host, {_UNIT} AS unit, toUnixTimestamp64Milli(min(last)) AS t FROM ("
            f"  SELECT host, component, toUnixTimestamp(ts) AS m, last_ts AS last, {value} AS v, {clock} AS c, "
            "   lagInFrame(v) OVER w AS pv, lagInFrame(c) OVER w AS pc, row_number() OVER w AS rn "
            f"  FROM ({rollup}) WINDOW w AS (PARTITION BY host, component ORDER BY ts "
            "   ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
            f"WHERE rn > 1 AND c > pc {reset} AND (v - pv) / (c - pc) {op} {{thr:Float64}} "
            "GROUP BY host, unit, m ORDER BY host, unit, t")
    # trend: hourly averages, the change from one hour to the next, per hour
    return (
        f"SELECT host, {_UNIT} AS unit, toUnixTimestamp64Milli(min(last)) AS t FROM ("
        "  SELECT host, component, h, last, v, lagInFrame(v) OVER w AS pv, lagInFrame(h) OVER w AS ph, row_number() OVER w AS rn "
        "  FROM (SELECT host, component, intDiv(toUnixTimestamp(ts), 3600) * 3600 AS h, sum(s) / sum(n) AS v, "
        f"        max(last_ts) AS last FROM ({rollup}) GROUP BY host, component, h) "
        "  WINDOW w AS (PARTITION BY host, component ORDER BY h ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
        f"WHERE rn > 1 AND h > ph AND (v - pv) / ((h - ph) / 3600.0) {op} {{thr:Float64}} "
        "GROUP BY host, unit, h ORDER BY host, unit, t")


def _alarm_starts(times: np.ndarray, lead_s: int) -> np.ndarray:
    """One alarm per lead window: the first firing minute opens one, minutes within lead_s of
    it belong to it, the next minute after that opens the next."""
    starts = []
    i, n = 0, len(times)
    while i < n:
        t = float(times[i])
        starts.append(t)
        i = int(np.searchsorted(times, t + lead_s, side="left"))
    return np.asarray(starts, dtype=np.float64)


def _first_fire(fires: dict[str, np.ndarray], hosts, start: int, end: int) -> int | None:
    best = None
    for h in hosts:
        arr = fires.get(h)
        if arr is None or not len(arr):
            continue
        i = int(np.searchsorted(arr, start, side="left"))
        if i < len(arr) and arr[i] < end and (best is None or arr[i] < best):
            best = float(arr[i])
    return best


# --- the steps of a run, per cluster ----------------------------------------------------------

def _tested_range(cluster: str, metric: str, start: datetime | None, end: datetime | None,
                  timeout_s: int) -> tuple[int, int] | None:
    """[lo_s, hi_s): the requested range, or the metric's whole history; None when empty."""
    first, last, n = windows.metric_span(cluster, metric, timeout_s=timeout_s)
    if not n:
        return None
    lo_s = int(start.timestamp()) if start else int(first)
    hi_s = int(end.timestamp()) if end else int(last) + 60
    return (lo_s, hi_s) if hi_s > lo_s else None


def _firing_minutes(cluster: str, signal: Signal, lo_s: int, hi_s: int, timeout_s: int,
                    host_t0s: dict[str, np.ndarray] | None = None):
    """Per host and per (host, unit), the sorted times where the signal fires, and the hours the
    metric has data. ``host_t0s``: every interruption per host (a ``rise`` baseline starts no
    earlier than one window after the last)."""
    coverage = windows.coverage(cluster, signal.metric, lo_s, hi_s, timeout_s=timeout_s)
    by_unit: dict[tuple[str, str], np.ndarray] = {}
    if signal.condition == "rise":
        by_unit = scores.rolling_fires(cluster, signal.metric, int(signal.lead_s), signal.operator,
                                       float(signal.threshold), lo_s, hi_s, sorted(coverage), host_t0s=host_t0s,
                                       timeout_s=timeout_s)
        by_unit = _busy_past_only(cluster, by_unit, int(signal.lead_s), lo_s, hi_s, timeout_s)
        table = None
    else:
        counter = catalog.get(signal.metric).is_counter
        params = {"cluster": cluster, "metric": signal.metric, "lo_s": lo_s, "hi_s": hi_s,
                  "thr": float(signal.threshold)}
        # in host slices of at most about FIRES_ROWS_PER_QUERY rows: the engine orders a whole
        # slice's rows for the rate's window function, and one query over a big fleet's metric
        # (gpu.pcie.replay, 2,048 GPUs x 40 days) peaked at 2.3 GB where the scan stays near 1.2 GB
        raw = signal.condition == "threshold"
        total = store.query_rows(_ROWS_SQL.format(table="samples" if raw else "samples_1m"), params,
                                 tag="fleet_test:fires_rows", timeout_s=timeout_s)[0][0]
        hosts_all = sorted(coverage)
        n = max(1, min(len(hosts_all), -(-int(total) // FIRES_ROWS_PER_QUERY)))
        for k in range(n):
            part = hosts_all[k::n]
            if not part:
                continue
            table = store.query_arrow(_firing_sql(signal, counter, sliced=True), {**params, "hosts": part},
                                      tag="fleet_test:fires", timeout_s=timeout_s)
            _add_fires(by_unit, table)
        table = None
    _add_fires(by_unit, table)
    fires: dict[str, np.ndarray] = {}
    for (h, _), t in by_unit.items():
        fires[h] = np.sort(np.concatenate((fires[h], t))) if h in fires else t
    return fires, by_unit, coverage


def _add_fires(by_unit: dict, table) -> None:
    """The (host, unit, ms) rows of a firing query, sorted by host and unit, into ``by_unit``."""
    if table is None or not table.num_rows:
        return
    (hosts, host_names), (units, unit_names) = windows.codes(table.column(0)), windows.codes(table.column(1))
    times = table.column(2).to_numpy().astype(np.float64) / 1000.0  # seconds, to the millisecond
    starts = np.concatenate(([0], np.flatnonzero((hosts[1:] != hosts[:-1]) | (units[1:] != units[:-1])) + 1))
    for a, b in zip(starts.tolist(), np.append(starts[1:], table.num_rows).tolist()):
        by_unit[(host_names[hosts[a]], unit_names[units[a]])] = times[a:b]


def _busy_past_only(cluster: str, by_unit: dict, W: int, lo_s: int, hi_s: int, timeout_s: int) -> dict:
    """A ``rise`` rule's firings without those of a host idle for ``phase.IDLE_PAST_SHARE`` or
    more of the past its score was measured against (the signal scan's rule, ``phase.idle_past_hosts``,
    minute by minute): a host back from a drain or a repair scores high on every load-driven
    metric the moment a job starts, and would raise an alarm on each of its parts."""
    if not by_unit:
        return by_unit
    # the past starts no earlier than the data tested (the scan's rule)
    minutes = phase.host_runs(cluster, {h for h, _ in by_unit}, lo_s, hi_s, timeout_s=timeout_s)
    out = {}
    for (h, u), t in by_unit.items():
        ends = (np.floor(t / 60.0).astype(np.int64) * 60) + 60  # the window ends with the firing minute
        keep = t[phase.busy_past(minutes, h, ends, W)]
        if len(keep):
            out[(h, u)] = keep
    return out


def rise_left_out(cluster: str, found: list[Window], reads: list | None, lo_s: int, hi_s: int, *,
                  excluded: windows.Exclusions | None = None, timeout_s: int) -> dict[int, frozenset]:
    """Per window index, the hosts a ``rise`` rule does not score there: idle for half or more of
    the past their score is measured against (``phase.idle_past_hosts``, as the signal scan leaves
    them out), among the hosts the window reads (``reads``, as ``_judge``). Counted in ``excluded``."""
    if not found:
        return {}
    minutes = phase.host_runs(cluster, {h for w in found for h in w.hosts}, lo_s, hi_s, timeout_s=timeout_s)
    out = {}
    for wi, w in enumerate(found):
        read = reads[wi] if reads is not None else None
        hs = phase.idle_past_hosts(minutes, w.hosts if read is None else (read[0],), int(w.start), int(w.end))
        if not hs:
            continue
        out[wi] = frozenset(hs)
        if excluded is not None:
            if w.kind == "before":
                excluded.before_hosts_idle_past += len(hs)
            else:
                excluded.control_hosts_idle_past += len(hs)
    return out


def _judge(found: list[Window], fires, coverage, at_end: dict[int, bool] | None = None,
           reads: list | None = None, by_unit: dict | None = None,
           left_out: dict[int, frozenset] | None = None) -> None:
    """Mark each window: had data at all, and its first firing minute. ``reads`` (per window,
    ``contrasts.window_reads``; None: every window job-level): where the outcome names the failing
    part, the window has data and fires on that part alone — the failing unit, or its namesake on
    the peer standing in for the failing host (``by_unit``: its firings) — or on any part of that
    one host where the metric has no series of the unit's family. ``at_end`` (``rise``): per
    window index, whether the rule passes on the window's own score (``_rise_at_end``); a window
    fires only then, timed at its first firing minute (the window's last minute where the rolling
    score passed only at its very end). ``left_out`` (``rise``, ``rise_left_out``): per window
    index, hosts the rule does not score there; a window left with none has no data, as in the
    signal scan."""
    for wi, w in enumerate(found):
        read = reads[wi] if reads is not None else None
        hosts = w.hosts if read is None else (read[0],)
        if left_out and wi in left_out:
            hosts = tuple(h for h in hosts if h not in left_out[wi])
        w.has_data = bool(hosts) and windows.covered(coverage, hosts, w.start, w.end)
        if not w.has_data:
            continue
        if read is not None and read[1] is not None:
            w.fired_at = _first_fire({read[0]: (by_unit or {}).get(read, _NONE)}, hosts, w.start, w.end)
        else:
            w.fired_at = _first_fire(fires, hosts, w.start, w.end)
        if at_end is not None:
            w.fired_at = (w.fired_at if w.fired_at is not None else float(w.end - 60)) if at_end.get(wi) else None


_NONE = np.empty(0)

_UNITS_SQL = ("SELECT DISTINCT splitByChar('/', component)[1] FROM samples_1m WHERE cluster = {cluster:String} "
              "AND metric = {metric:String} AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64})")


def unit_families(cluster: str, metric: str, lo_s: int, hi_s: int, *, timeout_s: int) -> set[str]:
    """The unit families (``contrasts.family``: gpu, mlx_, ...) the metric has series of."""
    rows = store.query_rows(_UNITS_SQL, {"cluster": cluster, "metric": metric, "lo_s": lo_s, "hi_s": hi_s},
                            tag="fleet_test:units", timeout_s=timeout_s)
    return {contrasts.family(str(r[0])) for r in rows}


def _rise_at_end(cluster: str, signal: Signal, found: list[Window], host_t0s, timeout_s: int,
                 reads: list | None = None, left_out: dict[int, frozenset] | None = None) -> dict[int, bool]:
    """Per window index: does the ``rise`` rule pass on the window's own score — the highest part
    score of the data inside the window against the baseline before it, over the parts the window
    reads (``reads``, as ``_judge``; default every part of its hosts), the signal scan's reading
    (scores.window_scores, the same call) — so a threshold pinned from the scan's control windows
    (rules.pin_rule) means the same thing here. The rolling score at a minute inside a window also
    reads up to one window of data before it, and would let a rise that ended before the window
    fire it: it times the firing and counts the alarms, it does not judge the window. Hosts in
    ``left_out`` (per window index, ``rise_left_out``) are not read."""
    got = scores.window_scores(cluster, found, [signal.metric], host_t0s=host_t0s, timeout_s=timeout_s).score
    out = {}
    for wi, parts in got[signal.metric].items():
        skip = (left_out or {}).get(wi, ())
        vals = [v for k, v in contrasts.read_parts(parts, reads[wi] if reads is not None else None).items()
                if k[0] not in skip]
        out[wi] = bool(vals) and (max(vals) > signal.threshold if signal.operator == ">"
                                  else min(vals) < signal.threshold)
    return out


def _tally(result: FleetTestResult, found: list[Window], chosen: list[Interruption]) -> None:
    """The 2×2 table, the windows without data, and the lead times of fired windows."""
    for w in found:
        if w.kind == "before":
            if not w.has_data:
                result.no_data_before += 1
            elif w.fired_at is not None:
                result.a += 1
                result.lead_times_s.append(round(chosen[w.index].t0 - w.fired_at, 3))
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


def _add_examples(result: FleetTestResult, cluster: str, found: list[Window], chosen: list[Interruption]) -> None:
    for w in found:
        if w.kind == "before":
            it = chosen[w.index]
            result.examples.append({
                "cluster": cluster, "job_id": it.job_id, "name": it.name, "state": it.state,
                "t0": datetime.fromtimestamp(it.t0, timezone.utc).isoformat(), "hosts": len(it.hosts),
                "fired": w.fired_at is not None, "has_data": w.has_data,
                "lead_s": round(it.t0 - w.fired_at) if w.fired_at is not None else None,
            })


def _count_alarms(result: FleetTestResult, by_unit, chosen: list[Interruption], failing, W: int,
                  runs: dict | None = None) -> None:
    """The alarms a deployed rule would have raised, one series of alarms per part (not per host:
    a job-wide rise would otherwise count one true alarm per host of the failing job), and how
    many the outcome followed: on that part where the outcome names it (the XID's GPU), else on
    that host. ``runs`` (``phase.host_runs``'s, per host): firings while the host ran no job raise
    no alarm — there is no job to interrupt, and a gauge that follows load reads low on every idle
    host (on the 48-host bench fleet, 64 of the 67 alarms of a pinned ``cooling.fan_rpm < 4120``
    opened on idle hosts); they are counted apart (``idle_alarms``, de-duplicated the same way).
    None where the cluster has no job allocations on record: every firing counts."""
    outcome_t0s: dict[tuple[str, str | None], list[int]] = {}
    for it, unit in zip(chosen, failing):
        if unit is not None:
            outcome_t0s.setdefault(unit, []).append(it.t0)
        else:
            for h in it.hosts:
                outcome_t0s.setdefault((h, None), []).append(it.t0)
    outcome_arr = {k: np.asarray(sorted(v), dtype=np.int64) for k, v in outcome_t0s.items()}
    for (host, unit), times in by_unit.items():
        if runs is not None:
            busy = phase.running(runs.get(host), np.floor(times).astype(np.int64))
            result.idle_alarms += len(_alarm_starts(times[~busy], W))
            times = times[busy]
        opened = _alarm_starts(times, W)
        result.alarms += len(opened)
        named = outcome_arr.get((host, unit))
        anywhere = outcome_arr.get((host, None))
        after = (np.sort(np.concatenate([x for x in (named, anywhere) if x is not None]))
                 if named is not None or anywhere is not None else None)
        if after is not None and len(opened):
            # the first outcome t0 after each alarm's first firing sample: within W makes it true
            i = np.searchsorted(after, opened, side="right")
            ok = i < len(after)
            result.true_alarms += int(np.count_nonzero(after[i[ok]] <= opened[ok] + W))


def _test_cluster(result: FleetTestResult, signal: Signal, outcome: Outcome, cluster: str, lo_s: int, hi_s: int,
                  say: Callable[[int, str], None], timeout_s: int) -> None:
    """One cluster's part of the test, added to ``result``; ``say(step 1..4, stage)``."""
    W = int(signal.lead_s)
    say(1, "interruptions and their hosts")
    chosen, host_t0s = windows.outcome_interruptions(cluster, outcome, W, lo_s, hi_s, timeout_s=timeout_s)
    say(2, "minutes where the signal fires")
    fires, by_unit, coverage = _firing_minutes(cluster, signal, lo_s, hi_s, timeout_s, host_t0s)
    say(3, f"{len(chosen)} interruptions of {outcome.label} against their controls")
    allocations = windows.Allocations.load(cluster, *windows.allocation_range(lo_s, hi_s, W), timeout_s=timeout_s)
    # where the outcome names the failing part, each window is that part's (the scan's reading)
    failing = contrasts.failing_units(cluster, chosen, outcome, timeout_s=timeout_s)
    found = windows.matched_windows(cluster, chosen, host_t0s, W, lo_s, hi_s, sorted(coverage), allocations,
                                    excluded=result.excluded, failing=failing,
                                    failed=windows.failed_t0s(cluster, host_t0s, timeout_s=timeout_s))
    result.matched_on_activity = result.matched_on_activity or bool(allocations)
    reads = None
    if any(u is not None for u in failing):
        reads = contrasts.window_reads(found, chosen, failing,
                                       unit_families(cluster, signal.metric, lo_s, hi_s, timeout_s=timeout_s))
        result.component_windows += sum(r is not None for r, w in zip(reads, found) if w.kind == "before")
    at_end = left_out = None
    if signal.condition == "rise" and found:
        left_out = rise_left_out(cluster, found, reads, lo_s, hi_s, excluded=result.excluded, timeout_s=timeout_s)
        at_end = _rise_at_end(cluster, signal, found, host_t0s, timeout_s, reads, left_out)
    _judge(found, fires, coverage, at_end, reads, by_unit, left_out)
    result.n_outcome += len(chosen)
    _tally(result, found, chosen)
    _add_examples(result, cluster, found, chosen)
    say(4, "alarms a deployed rule would have raised")
    runs = (phase.host_runs(cluster, {h for h, _ in by_unit}, lo_s, hi_s, timeout_s=timeout_s)["runs"]
            if by_unit else None)
    _count_alarms(result, by_unit, chosen, failing, W, runs)
    fleet_contrasts.collect(result.parts, cluster, signal.metric, by_unit, chosen,
                            windows.with_lead_window(found, failing), host_t0s, coverage, W,
                            lo_s, hi_s, timeout_s=timeout_s)
    fleet_contrasts.collect_groups(result.groups, cluster, found, chosen, failing, by_unit, timeout_s=timeout_s)
    phase.collect_fleet(result.phases, cluster, found, lo_s, hi_s, timeout_s=timeout_s)
    result.node_days += sum(len(v) for v in coverage.values()) * COVERAGE_S / 86400


def run(signal: Signal, outcome: Outcome, *, clusters: list[str] | None = None,
        start: datetime | None = None, end: datetime | None = None,
        progress: Callable[[int, int, str], None] | None = None, timeout_s: int = QUERY_TIMEOUT_S) -> FleetTestResult:
    """Test ``signal`` against ``outcome`` on the given clusters (default: every cluster with jobs)
    over [start, end) (default: all the metric's history in the store)."""
    progress = progress or (lambda done, total, stage: None)
    clusters = clusters or windows.clusters_with_jobs(timeout_s=timeout_s)
    result = FleetTestResult(signal=signal.text, outcome=outcome.label, clusters=list(clusters), range=None,
                             n_outcome=0, controls={"same_hosts": 0, "peers": 0})
    steps = 4 * max(1, len(clusters))  # four steps per cluster
    lo_all = hi_all = None
    for ci, cluster in enumerate(clusters):
        prefix = f"cluster {cluster} ({ci + 1}/{len(clusters)})"

        def say(k: int, stage: str, _ci=ci, _prefix=prefix) -> None:
            progress(4 * _ci + k, steps, f"{_prefix}: {stage}")

        say(0, "finding the metric's history")
        tested = _tested_range(cluster, signal.metric, start, end, timeout_s)
        if tested is None:
            continue
        lo_s, hi_s = tested
        lo_all = lo_s if lo_all is None else min(lo_all, lo_s)
        hi_all = hi_s if hi_all is None else max(hi_all, hi_s)
        _test_cluster(result, signal, outcome, cluster, lo_s, hi_s, say, timeout_s)
    if lo_all is not None:
        iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat()  # noqa: E731
        result.range = (iso(lo_all), iso(hi_all))
    # Fired first (longest lead first), then the quiet ones, then those without data.
    result.examples.sort(key=lambda e: (not e["fired"], not e["has_data"], -(e["lead_s"] or 0), e["t0"]))
    del result.examples[MAX_EXAMPLES:]
    progress(steps, steps, "done")
    return result
