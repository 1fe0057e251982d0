"""Job phase and checkpoint flags: a finding that tracks what the job was doing, not a failing part.

Failures do not strike at random moments of a job: they come more often during the heavy phases
of a run (the power and heat peak) and while a checkpoint is being written (the I/O and PCIe
burst). A metric that only moves during such phases then reads higher before failures than at
healthy times, and would pass for a precursor. This module says, for each scanned window, what
the job was doing in it, and whether a finding still holds among windows of the same phase.

What the window's hosts were doing (``window_phases``)
-----------------------------------------------------
Read from the jobs' own workload signals, in the one-minute rollup, for the window's hosts over
the minutes wholly inside it:
- **checkpoint**: ``storage.checkpoint_write_throughput`` — the rate of the job's checkpoint
  write, reported while a write is under way. A window is *in a checkpoint write* when any of its
  hosts reports a write rate above 0 in a minute; its *exposure* is the number of such minutes.
  (An exporter that keeps reporting the last write's rate between writes would mark every minute:
  one stratum only, and no flag can be raised — never a false one.)
- **heavy phase**: ``gpu.power`` — the hosts' mean GPU board power per minute, against the
  median of the same host's minutes over the job run (the allocation) that minute belongs to,
  checkpoint minutes left out of the median. A minute is heavy for a host when its power is at
  least ``HEAVY_RISE`` (4 %) above that median: a job-wide step of its own load, far beyond the
  minute-to-minute noise of a mean over a host's GPUs (~1 %). Power is the job's own load gauge:
  it rises with the phase and does not depend on the inlet air. A minute is heavy for the window
  when at least half of its hosts reporting power are heavy; its *exposure* is the number of
  heavy minutes.
Strata: by exposure — none; then the same number of minutes up to 4, and within a factor 1.5
beyond (5–7, 8–11, 12–16, 17–25, ...: ``stratum``). A phase covers part of a window, and a metric that
only moves in it moves the window's value by about its share: a window brushed by a write at its
edge (one minute of it) is no match for one that holds the whole write, nor a window spent in a
heavy phase for one that met its last minutes. Windows of one scan or fleet test have the same
length, so minutes compare. Before the outcome and in controls a window is *in the phase* when
its exposure is above 0.
A window whose hosts reported none of the signal has no stratum for that phase and is left out of
its test.

When a finding is flagged (``judge``, per scan row; ``summarize_fleet``, per fleet test)
-----------------------------------------------------------------------------------------
A phase is a rival explanation of a finding when both hold:
(a) the phase is over-represented before the outcome: windows before it are in the phase more
    often than controls (Fisher's exact test, one-sided, p < ``OVER_P``) — or, in a scan, under-
    represented (less often; the rival is then the time out of the phase, and (c) reads it);
(c) the metric runs worse in the phase at healthy times: the control windows in the phase against
    the controls out of it (Mann–Whitney, in the metric's bad direction, p < ``TRACKS_P``; at least
    3 windows each). For a fleet test: the rule fires more often in controls in the phase (Fisher).
    Idle time runs both ways: rarer before the outcome where the window before is spent inside the
    running job, more common where jobs fail soon after they start (the window before reaches back
    past the start, and a metric that drops when idle — memory clocks — reads lower before it).
The finding must then also hold within the phase strata — windows before the outcome against
controls of the same stratum only (the van Elteren stratified rank-sum test and the tail test
within the strata, the smaller p doubled, ``contrasts.stratified_gate_p``, as the scan tests a
row; Cochran–Mantel–Haenszel over the fleet test's 2×2 tables) — and its p
is the larger of the two (an intersection-union test, as for the job-wide and group flags). It is
flagged ("tracks checkpoint writes", "tracks job phase") when it does not hold there (p ≥
``HOLDS_P`` or nothing to compare). A true precursor that happens to come with a heavy phase
before failures still stands out from controls in the same phase: it holds, is not flagged, and
its p is at most the larger of the two.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import fisher_exact, mannwhitneyu

from telemetry import store
from telemetry.queries import contrasts, scores, windows
from telemetry.stats import jeffreys_interval

CHECKPOINT_METRIC = "storage.checkpoint_write_throughput"
POWER_METRIC = "gpu.power"
HEAVY_RISE = 0.04  # a host's power this far above its run's median: a heavy minute
OVER_P = 0.05  # the phase is over-represented before the outcome
TRACKS_P = 0.01  # the metric runs worse in the phase at healthy times
HOLDS_P = contrasts.SURVIVES_P
MIN_EACH = 3

PHASES = ("checkpoint", "heavy")  # the fleet test's phases
# The scan's: also whether the window's hosts ran a job all along. Controls are matched on activity
# at their end only, and a window before an interruption is spent inside the running job, so idle
# minutes are rarer before the outcome than in controls (or more common, where jobs fail soon after
# they start: ``judge`` tests both ways); a metric that moves with the load -- the
# time clocks were lowered for want of work, a switch's supply voltage sagging under traffic --
# then differs before the outcome for that reason alone (the 96-host bench fleet: both before
# NODE_FAIL at AUC 0.26/0.28, q 0.004/0.009).
SCAN_PHASES = PHASES + ("idle",)
FLAG = {"checkpoint": "tracks checkpoint writes", "heavy": "tracks job phase", "idle": "tracks job activity"}
IN_PHASE = {"checkpoint": "a checkpoint write under way",
            "heavy": f"the job in a heavy phase (GPU power ≥ {HEAVY_RISE:.0%} above its run's median)",
            "idle": "hosts idle part of the time (half or more of them running no job in a minute)"}
UNIT = {"checkpoint": "min writing", "heavy": "min heavy", "idle": "min idle"}


def stratum(minutes: int) -> int:
    """The exposure's stratum: 0 for none, the minutes themselves up to 4, then bins a factor 1.5 wide."""
    if minutes <= 4:
        return int(minutes)
    return 5 + int(math.floor(math.log(minutes / 5.0) / math.log(1.5) + 1e-9))


def stratum_label(k: int, unit: str) -> str:
    if k == 0:
        return "none"
    if k <= 4:
        return f"{k} {unit}"
    lo = math.ceil(5 * 1.5 ** (k - 5) - 1e-9)
    hi = math.ceil(5 * 1.5 ** (k - 4) - 1e-9) - 1
    return f"{lo}–{hi} {unit}"

_POWER_SQL = ("SELECT host, toUnixTimestamp(ts) AS t, sum(sum) / sum(count) AS v FROM samples_1m "
              "WHERE cluster = {cluster:String} AND metric = {metric:String} AND host IN {hosts:Array(String)} "
              "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND count > 0 "
              "GROUP BY host, t HAVING isFinite(v) ORDER BY host, t")
_CHECKPOINT_SQL = ("SELECT host, toUnixTimestamp(ts) AS t FROM samples_1m "
                   "WHERE cluster = {cluster:String} AND metric = {metric:String} AND host IN {hosts:Array(String)} "
                   "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND count > 0 "
                   "GROUP BY host, t HAVING max(max) > 0 AND isFinite(max(max)) ORDER BY host, t")
_ROWS_SQL = ("SELECT count() FROM samples_1m WHERE cluster = {cluster:String} AND metric = {metric:String} "
             "AND host IN {hosts:Array(String)} AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64})")
ROWS_PER_QUERY = 1_000_000  # power rollup rows a query of host_minutes groups, about (bounds its memory)
_RUNS_SQL = ("SELECT host, toUnixTimestamp(start_ts) AS s, toUnixTimestamp(ifNull(end_ts, now64(3))) AS e "
             "FROM job_hosts FINAL WHERE cluster = {cluster:String} AND host IN {hosts:Array(String)} "
             "AND (end_ts IS NULL OR end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC')) "
             "AND start_ts < toDateTime64({hi_s:Int64}, 3, 'UTC') ORDER BY host, s, e")


def _by_host(table, with_value: bool) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """An Arrow result ordered by host: per host, its times (column 1) and values (column 2)."""
    out = {}
    if not table.num_rows:
        return out
    t = table.column(1).to_numpy().astype(np.int64)
    v = table.column(2).to_numpy().astype(float) if with_value else None
    for h, a, b in windows.host_runs(table):
        out[h] = (t[a:b], v[a:b] if with_value else None)
    return out


def host_minutes(cluster: str, hosts: list[str], lo_s: int, hi_s: int, *, timeout_s: int) -> dict:
    """Per host: the minutes with a checkpoint write under way, and the minutes with GPU power data
    and whether each was heavy (see the module docstring). ``{"checkpoint": {host: t[]} | None,
    "heavy": {host: (t[], heavy[])} | None}``; None where the cluster reports no such signal."""
    hosts = sorted(hosts)
    params = {"cluster": cluster, "hosts": hosts, "lo_s": int(lo_s), "hi_s": int(hi_s)}
    # in host slices of about ROWS_PER_QUERY rollup rows of the power metric (the engine groups a
    # slice's rows by host and minute: the whole 256-host bench fleet's GPU power at once, 7.9 M
    # rows into 1 M minutes, raised the scan's memory by 115-140 MB before its first metric)
    total = int(store.query_rows(_ROWS_SQL, dict(params, metric=POWER_METRIC), tag="phase:rows",
                                 timeout_s=timeout_s)[0][0])
    n = max(1, min(len(hosts), -(-total // ROWS_PER_QUERY)))
    checkpoints, power = {}, {}
    any_ck = any_power = False
    for k in range(n):
        part = dict(params, hosts=hosts[k::n])
        ck_rows = store.query_arrow(_CHECKPOINT_SQL, dict(part, metric=CHECKPOINT_METRIC),
                                    tag="phase:checkpoints", timeout_s=timeout_s)
        checkpoints.update((h, t) for h, (t, _) in _by_host(ck_rows, False).items())
        power_rows = store.query_arrow(_POWER_SQL, dict(part, metric=POWER_METRIC), tag="phase:power",
                                       timeout_s=timeout_s)
        power.update(_by_host(power_rows, True))
        any_ck, any_power = any_ck or bool(ck_rows.num_rows), any_power or bool(power_rows.num_rows)
        del ck_rows, power_rows
    runs = _by_host(store.query_arrow(_RUNS_SQL, params, tag="phase:runs", timeout_s=timeout_s), True)
    heavy = {}
    for h, (t, v) in power.items():
        base = np.full(len(t), np.nan)
        ck = np.isin(t, checkpoints.get(h, np.empty(0, np.int64)))
        starts, ends = runs.get(h, (np.empty(0, np.int64), np.empty(0)))
        for s, e in zip(starts.tolist(), ends.astype(np.int64).tolist()):  # later runs overwrite: nested allocations
            i0, i1 = np.searchsorted(t, s, side="left"), np.searchsorted(t, e, side="left")
            if i1 <= i0:
                continue
            own = v[i0:i1][~ck[i0:i1]]
            if len(own):
                base[i0:i1] = np.median(own)
        with np.errstate(invalid="ignore"):
            heavy[h] = (t, np.isfinite(base) & (base > 0) & (v >= base * (1.0 + HEAVY_RISE)))
    return {"checkpoint": checkpoints if any_ck else None, "heavy": heavy if any_power else None,
            "runs": runs or None, "lo_s": int(lo_s)}


def _inside(t: np.ndarray, start: int, end: int) -> slice:
    # minutes wholly inside [start, end): start <= t and t + 60 <= end (the scan's rule)
    return slice(int(np.searchsorted(t, start, side="left")), int(np.searchsorted(t, end - 60, side="right")))


# A host idle (or down) for this share of the past a score is measured against or more has no
# baseline under load: where the outcome names no part, the scan leaves it out of the window
# (``idle_past_hosts``; signal_scan).
IDLE_PAST_SHARE = 0.5


def running(run: tuple[np.ndarray, np.ndarray] | None, t: np.ndarray) -> np.ndarray:
    """Whether the host ran a job at each of the times ``t``: some run of it (starts sorted, as
    ``host_minutes`` reads them) began at or before t and ends after it."""
    if run is None or not len(run[0]):
        return np.zeros(len(t), dtype=bool)
    starts, ends = run
    reach = np.maximum.accumulate(ends.astype(float))  # the latest end of the runs begun so far
    i = np.searchsorted(starts, t, side="right") - 1
    return (i >= 0) & (reach[np.maximum(i, 0)] > t)


def idle_past_hosts(minutes: dict, hosts, start: int, end: int) -> tuple[str, ...]:
    """The hosts of a window that ran no job for ``IDLE_PAST_SHARE`` or more of the past its score
    is measured against (``scores.baseline_for`` before it, from the data's start at the earliest).

    Where the outcome names no part, each part is scored against its own past. A host idle (or
    down) for most of that past and busy in the window scores high on every workload-driven
    metric — traffic, load, power, temperatures, and the error counters that grow with traffic —
    for that reason alone, and failures follow idle stretches more often than controls do: a large
    job starts on hosts drained for it, or on hosts back from a repair, and fails within hours.
    On the 48-host bench fleet once it ran busy, 3 of 8 windows before NODE_FAIL had hosts idle for
    most of the day before against 3 of 80 controls, and 45 workload metrics came out at q < 0.05
    before NODE_FAIL. Such a host has no baseline under load to be scored against: the scan leaves
    it out of the window, before the outcome and in controls alike, and counts it. () where the
    cluster has no job allocations on record."""
    runs = minutes.get("runs")
    if runs is None:
        return ()
    past_from = max(int(start) - scores.baseline_for(int(end) - int(start)), int(minutes.get("lo_s") or 0))
    t = np.arange(past_from, int(start), 60, dtype=np.int64)
    if not len(t):
        return ()
    return tuple(h for h in hosts if np.count_nonzero(~running(runs.get(h), t)) >= IDLE_PAST_SHARE * len(t))


def host_runs(cluster: str, hosts, lo_s: int, hi_s: int, *, timeout_s: int) -> dict:
    """``host_minutes`` with the job runs alone (``{"runs": {host: (starts, ends)} | None, "lo_s"}``):
    what ``idle_past_hosts`` and ``busy_past`` read."""
    runs = _by_host(store.query_arrow(_RUNS_SQL, {"cluster": cluster, "hosts": sorted(hosts), "lo_s": int(lo_s),
                                                  "hi_s": int(hi_s)}, tag="phase:runs", timeout_s=timeout_s), True)
    return {"runs": runs or None, "lo_s": int(lo_s)}


def busy_past(minutes: dict, host: str, ends: np.ndarray, W: int) -> np.ndarray:
    """For windows of length W ending at each of ``ends`` (seconds) on ``host``: whether the host
    ran a job for more than ``1 - IDLE_PAST_SHARE`` of the past a score of the window is measured
    against — the rule ``idle_past_hosts`` applies to one window, for many at once (a rule on the
    score, ``rise``, firing minute by minute). True everywhere where the cluster has no job
    allocations on record, and for a window with no past inside the data."""
    runs = minutes.get("runs")
    ends = np.asarray(ends, dtype=np.int64)
    if runs is None or not len(ends):
        return np.ones(len(ends), dtype=bool)
    starts = ends - int(W)
    past_from = np.maximum(starts - scores.baseline_for(int(W)), int(minutes.get("lo_s") or 0))
    # the minutes of each past, as idle_past_hosts counts them: t = past_from + 60 k < start
    n = np.maximum(0, (starts - past_from + 59) // 60)
    run = runs.get(host)
    if run is None or not len(run[0]):
        return n == 0
    # busy minutes on the grid of each past: a merged run [a, b) covers the grid's t with a <= t < b
    # (merged once per host: a rise rule asks again for each of the host's parts)
    cache = minutes.setdefault("merged", {})
    if host not in cache:
        cache[host] = _merged(run)
    a, b = cache[host]
    def grid_count(lo: np.ndarray, hi: np.ndarray, base: np.ndarray) -> np.ndarray:
        # grid points base + 60 k in [lo, hi)
        first = base + np.maximum(0, -((base - lo) // 60)) * 60
        return np.where(hi > first, (hi - first + 59) // 60, 0)
    busy = np.zeros(len(ends), dtype=np.int64)
    for x, y in zip(a.tolist(), b.tolist()):  # few runs per host
        lo, hi = np.maximum(past_from, x), np.minimum(starts, y)
        busy += np.where(hi > lo, grid_count(lo, hi, past_from), 0)
    return (n == 0) | ((n - busy) < IDLE_PAST_SHARE * n)


def _merged(run: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A host's runs (starts sorted) as disjoint [start, end) stretches."""
    out_a, out_b = [], []
    for s, e in zip(run[0].astype(np.int64).tolist(), run[1].astype(float).tolist()):
        e = math.ceil(e)
        if out_b and s <= out_b[-1]:
            out_b[-1] = max(out_b[-1], e)
        else:
            out_a.append(s)
            out_b.append(e)
    return np.asarray(out_a, dtype=np.int64), np.asarray(out_b, dtype=np.int64)


def strata_of(minutes: dict, hosts, start: int, end: int) -> dict[str, int | None]:
    """The window's exposure per phase (minutes in it), None where its hosts reported none of the signal."""
    out: dict[str, int | None] = {"checkpoint": None, "heavy": None, "idle": None}
    runs = minutes.get("runs")
    if runs is not None and hosts:
        t = np.arange(int(start), int(end) - 59, 60, dtype=np.int64)  # the minutes wholly inside
        busy = np.zeros(len(t), dtype=np.int64)
        for h in hosts:
            starts, ends = runs.get(h, (np.empty(0, np.int64), np.empty(0)))
            on = np.zeros(len(t), dtype=bool)
            for a, b in zip(starts.tolist(), ends.tolist()):
                if a < end and b > start:
                    on |= (t >= a) & (t < b)
            busy += on
        out["idle"] = int(np.count_nonzero(2 * busy < len(hosts)))
    ck = minutes.get("checkpoint")
    if ck is not None:
        got = [ck[h][_inside(ck[h], start, end)] for h in hosts if h in ck]
        out["checkpoint"] = int(len(np.unique(np.concatenate(got)))) if got else 0
    hv = minutes.get("heavy")
    if hv is not None:
        ts, flags = [], []
        for h in hosts:
            if h in hv:
                t, f = hv[h]
                sl = _inside(t, start, end)
                ts.append(t[sl])
                flags.append(f[sl])
        if ts and sum(len(x) for x in ts):
            t, f = np.concatenate(ts), np.concatenate(flags).astype(int)
            mins, inv = np.unique(t, return_inverse=True)
            n, k = np.bincount(inv, minlength=len(mins)), np.bincount(inv, weights=f, minlength=len(mins))
            out["heavy"] = int(np.count_nonzero((k > 0) & (2 * k >= n)))
    return out


def window_phases(cluster: str, spans, lo_s: int, hi_s: int, *, timeout_s: int) -> list[dict[str, int | None]]:
    """Per window of ``spans`` (objects with ``hosts``, ``start``, ``end``), its exposure per phase."""
    if not spans:
        return []
    return window_phases_and_idle_past(cluster, spans, lo_s, hi_s, timeout_s=timeout_s)[0]


def window_phases_and_idle_past(cluster: str, spans, lo_s: int, hi_s: int, *,
                                timeout_s: int) -> tuple[list[dict[str, int | None]], list[tuple[str, ...]]]:
    """``window_phases`` and, per window, its ``idle_past_hosts``, from one read of the job runs."""
    if not spans:
        return [], []
    hosts = sorted({h for w in spans for h in w.hosts})
    minutes = host_minutes(cluster, hosts, lo_s, hi_s, timeout_s=timeout_s)
    return ([strata_of(minutes, w.hosts, int(w.start), int(w.end)) for w in spans],
            [idle_past_hosts(minutes, w.hosts, int(w.start), int(w.end)) for w in spans])


def count(found, phased, into: dict | None = None) -> dict:
    """Windows in each phase before the outcome and in controls, added to ``into`` (the scan's
    summary: how often each phase came before the outcome)."""
    into = into if into is not None else {p: {"before_in": 0, "before": 0, "controls_in": 0, "controls": 0}
                                          for p in SCAN_PHASES}
    for w, ph in zip(found, phased):
        side = "before" if w.kind == "before" else "controls"
        for p in SCAN_PHASES:
            if ph.get(p) is not None:
                into[p][side] += 1
                into[p][side + "_in"] += int(ph[p] > 0)
    return into


def _over(b_in: int, b_n: int, c_in: int, c_n: int, alternative: str = "greater") -> float | None:
    if not b_n or not c_n:
        return None
    return float(fisher_exact([[b_in, c_in], [b_n - b_in, c_n - c_in]], alternative=alternative).pvalue)


def judge(before: list[float], control: list[float], phases_b: list[dict], phases_c: list[dict],
          alternative: str) -> list[dict]:
    """Per phase over-represented before the outcome (a), the evidence of one scan row: whether the
    metric runs worse in the phase at healthy times (c), the window counts per stratum, and the
    stratified test within the strata. ``flagged`` when (c) and it does not hold there; ``p``
    (the within-strata p) then bounds the row's p from below where (c) holds."""
    out = []
    for p in SCAN_PHASES:
        b = [(v, s[p]) for v, s in zip(before, phases_b) if s.get(p) is not None]
        c = [(v, s[p]) for v, s in zip(control, phases_c) if s.get(p) is not None]
        b_in, c_in = sum(s > 0 for _, s in b), sum(s > 0 for _, s in c)
        if not b or not c:
            continue
        # (a) either way: a phase rarer before the outcome than in controls (idle minutes: the
        # window before is spent inside the running job) is as much a rival as one more common
        # (idle minutes again, where jobs fail soon after they start); the rival explanation is
        # then the time out of the phase, and (c) runs the other way
        more = b_in * len(c) >= c_in * len(b)
        over_p = _over(b_in, len(b), c_in, len(c), "greater" if more else "less")
        if over_p is None or over_p >= OVER_P:
            continue
        inside = [v for v, s in c if s > 0]
        outside = [v for v, s in c if s == 0]
        if not more:  # (c): the metric runs worse in controls OUT of the phase
            inside, outside = outside, inside
        tracks_p = auc = None
        if len(inside) >= MIN_EACH and len(outside) >= MIN_EACH:
            res = mannwhitneyu(inside, outside, alternative=alternative)
            tracks_p, auc = float(res.pvalue), float(res.statistic) / (len(inside) * len(outside))
        within = contrasts.stratified_gate_p([(v, stratum(s)) for v, s in b], [(v, stratum(s)) for v, s in c],
                                             alternative)
        ks = sorted({stratum(s) for _, s in b} | {stratum(s) for _, s in c})
        strata = [{"stratum": stratum_label(k, UNIT[p]), "before": sum(stratum(s) == k for _, s in b),
                   "controls": sum(stratum(s) == k for _, s in c)} for k in ks]
        tracks = tracks_p is not None and tracks_p < TRACKS_P
        holds = within is not None and within < HOLDS_P
        out.append({"phase": p, "before_in": b_in, "before": len(b), "controls_in": c_in, "controls": len(c),
                    "more_before": more, "over_p": over_p, "runs_worse_auc": auc, "runs_worse_p": tracks_p, "tracks": tracks,
                    "strata": strata, "p": within, "holds": holds, "flagged": bool(tracks and not holds)})
    return out


def flag_text(e: dict) -> str:
    p = e["phase"]
    head = (f"{FLAG[p]}: {IN_PHASE[p]} in {e['before_in']} of {e['before']} windows before the outcome against "
            f"{e['controls_in']} of {e['controls']} controls (Fisher p {e['over_p']:.2g}), and it runs worse in controls "
            f"{'during' if e['more_before'] else 'outside'} it (AUC {e['runs_worse_auc']:.2f})")
    counts = ", ".join(f"{s['stratum']} {s['before']} · {s['controls']}" for s in e["strata"] if s["before"])
    if e["p"] is None:
        return head + f"; not testable within the strata (no stratum with windows before and controls: {counts})"
    return head + f"; within the strata it does not hold (p {e['p']:.2g}; windows before · controls: {counts})"


def apply(row: dict, before, control, phases_b, phases_c, alternative: str) -> None:
    """The scan row's phase evidence (``row["phases"]``), its flags, and its p: where the metric
    tracks a phase over-represented before the outcome, the larger of its p and the within-strata p."""
    row["phases"] = []
    if len(before) < MIN_EACH or len(control) < MIN_EACH:
        return
    row["phases"] = judge(before, control, phases_b, phases_c, alternative)
    for e in row["phases"]:
        if e["tracks"] and row["p"] is not None and e["p"] is not None:
            row["p"] = max(row["p"], e["p"])
        if e["flagged"]:
            row["flags"].append(flag_text(e))


# --- the fleet test ---------------------------------------------------------------------------

def collect_fleet(into: dict, cluster: str, found, lo_s: int, hi_s: int, *, timeout_s: int) -> None:
    """The fleet test's 2×2 table split by phase stratum, added to ``into``: per phase,
    ``{stratum: t[before][fired]}`` over the windows with data (as the main table counts them)."""
    judged = [w for w in found if w.has_data]
    if not judged:
        return
    for w, ph in zip(judged, window_phases(cluster, judged, lo_s, hi_s, timeout_s=timeout_s)):
        for p in PHASES:
            if ph[p] is None:
                continue
            t = into.setdefault(p, {}).setdefault(stratum(ph[p]), np.zeros((2, 2), dtype=int))
            t[int(w.kind == "before"), int(w.fired_at is not None)] += 1


def summarize_fleet(into: dict) -> list[dict]:
    """Per phase with windows: how often the phase came before the outcome and in controls (a:
    Fisher one-sided), how often the rule fired in controls in the phase and out of it (c: Fisher
    one-sided, p < TRACKS_P: it marks the phase), and whether it still fires more before the
    outcome than in controls of the same stratum (Cochran–Mantel–Haenszel, holds at p < HOLDS_P).
    ``flagged`` when (a), (c) and it does not hold."""
    from telemetry.queries.fleet_contrasts import mantel_haenszel_p

    out = []
    for p in PHASES:
        by = into.get(p)
        if not by:
            continue
        ks = sorted(by)
        t = np.stack([by[k] for k in ks]) if 0 in by else np.stack([np.zeros((2, 2), dtype=int)] + [by[k] for k in ks])
        ks = ks if 0 in by else [0] + ks
        b_in, b_n = int(t[1:, 1].sum()), int(t[:, 1].sum())
        c_in, c_n = int(t[1:, 0].sum()), int(t[:, 0].sum())
        over_p = _over(b_in, b_n, c_in, c_n)
        f_in, f_out = int(t[1:, 0, 1].sum()), int(t[0, 0, 1].sum())
        marks_p = (float(fisher_exact([[f_in, f_out], [c_in - f_in, (c_n - c_in) - f_out]],
                                      alternative="greater").pvalue) if c_in and c_n - c_in else None)
        within = mantel_haenszel_p([[[int(t[k, 1, 1]), int(t[k, 0, 1])], [int(t[k, 1, 0]), int(t[k, 0, 0])]]
                                    for k in range(len(t))])
        over = over_p is not None and over_p < OVER_P
        marks = marks_p is not None and marks_p < TRACKS_P
        holds = within is not None and within < HOLDS_P

        def share(k: int, n: int) -> dict:
            rate, lo, hi = jeffreys_interval(k, n - k) if n else (None, None, None)
            return {"fired": k, "windows": n, "rate": rate, "ci": [lo, hi]}

        out.append({"phase": p, "flag": FLAG[p], "in_phase": IN_PHASE[p],
                    "before_in_phase": b_in, "before": b_n, "controls_in_phase": c_in, "controls": c_n,
                    "over_p": over_p, "over_represented": over,
                    "fired_before_in_phase": share(int(t[1:, 1, 1].sum()), b_in),
                    "fired_controls_in_phase": share(f_in, c_in), "fired_controls_elsewhere": share(f_out, c_n - c_in),
                    "fires_more_in_phase_p": marks_p, "within_p": within, "holds_within": holds,
                    "strata": [{"stratum": stratum_label(k, UNIT[p]), "table": {
                        "a": int(t[i, 1, 1]), "b": int(t[i, 0, 1]), "c": int(t[i, 1, 0]), "d": int(t[i, 0, 0])}}
                        for i, k in enumerate(ks) if t[i].sum()],
                    "flagged": bool(over and marks and not holds)})
    return out
