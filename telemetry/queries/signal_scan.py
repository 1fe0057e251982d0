"""Signal scan — "what differs before failures": rank every catalog metric by how its behaviour in
the lead window before an outcome differs from the same kind of window at healthy times, and say
how likely each finding is noise.

Windows are the fleet test's (``windows.matched_windows``): the lead window before each
interruption of the outcome on the job's hosts, against the same hosts at other times of the
history and as many healthy peers at the same time, matched on activity (the
hosts were running a job): workload-driven metrics — temperatures, power, traffic — differ
between busy and idle hosts and would otherwise top the list.

Per metric, each window gets one value, from one unit (a GPU, a NIC, a fan; the host for
host-level series), chosen the same way before the outcome and in its controls (equal exposure).
Only minutes wholly inside [start, end) count: nothing at or after t0 (a fan spinning down once
the job died) and nothing before the window, and every window covers the same number of minutes.
- Where the outcome names the failing unit (the GPU of an XID, the NIC of a link-down): that
  unit's level in the window (a counter's mean rate per second, a gauge's mean); in the controls
  the same unit at the same hosts' other times — its own history: a part that was always noisy
  is as noisy there — and its namesake on the peer host that takes the failing host's place
  among healthy peers. For a metric without series of that kind (a fan before an XID), the
  failing host's worst unit.
- Where the outcome names no unit (a Slurm state): levels of different parts are not comparable
  — the 1–3 % of parts that trickle corrected errors for weeks would be the worst of every window,
  before failures and at healthy times alike — so each unit is scored against its OWN past, the
  day or so just before the window and the days before that (``telemetry.queries.scores``: for
  counters ln((k + 1) / (λ + 1)), k the errors in the window, λ what the unit's own past rate
  predicts; for gauges the window mean against the past's mean in its standard deviations; against
  whichever of the two pasts the window departs from most), and the window's
  value is the highest score over its hosts and units. A part noisy for weeks goes on as before
  and scores about 0; a part that starts to misbehave scores high. A host idle for half or more
  of that past (``phase.idle_past_hosts``) has no baseline under load — every load-driven metric
  would score high on it the moment a job runs — and is left out of the window, before the
  outcome and in controls alike (counted in ``controls_excluded``).
Values are oriented: higher is worse (a level of a metric whose bad direction is down is
negated). ``statistic`` says which the row tested: "level" where most windows before the outcome
name the failing unit, else "score"; a "level" row tests the windows holding a level only
(``windows_off_scale`` counts those it left out, which held a score), or, where fewer than
``MIN_WINDOWS`` before the outcome would be left, every window within its matched set. ``rise_readings`` (rules.rise_readings: quantiles per side, and
n) are of what a ``rise`` rule reads in each window — the highest part score over its hosts, those
idle for most of their past left out whatever the outcome (as the fleet test's ``rise`` does) — and,
where the row tested levels, ``level_readings`` (rules.level_readings) of what a ``rate`` (counter)
or ``threshold`` (gauge) rule reads there as the fleet test fires it — the highest minute rate or
raw value (the lowest where the bad direction is down) of any series of any unit of the window's
hosts, in the metric's own unit. They set the pinned rule's threshold (the controls' 95th
percentile, rules.pin_basis). The medians shown are of what a rule reads in the
chosen unit's window: its highest minute rate (counters; from minute max
to minute max, as the fleet test's ``rate`` condition) or its highest minute value (gauges; the
lowest for a metric whose bad direction is down). The contrasts below compare the units'
self-normalised scores.

Per metric, with B the window values before the outcome and C the control values (where the
value is the highest score over the window's hosts — the outcome names no part — each b is
compared only with its own interruption's controls, its value adjusted for the parts it scored:
``stratified_test`` on ``size_adjusted`` values; the row's ``test`` says which; the pooled test
below otherwise):
- ``auc`` = P(b > c) + ½·P(b = c) over all pairs (0.5: no difference; 1: every window before
  the outcome is worse than every control), from the Mann–Whitney U statistic;
- ``p``: the Mann–Whitney U test, one-sided in the bad direction (two-sided for ``none``); under
  heavy ties the exact permutation test (its distribution counted over the tie groups, ``rank_sum_p``)
  where the normal approximation claims p < 0.01. Where
  the metric moved on the job's other hosts too (the job-wide flag; for a finding lower before
  the outcome, their low side), a finding must also hold within the job (``contrasts``: the failing
  part against its siblings of the same job at the same time, where the workload cancels; where the
  outcome names no part, the job's most extreme host against its other hosts, ``job_spread``), so
  its p is the larger of the two (an intersection-union test). Unflagged, the matched healthy windows are the test;
  the sibling and own-history contrasts are shown beside it. Where the failures concentrate on a
  rack/driver/firmware/GPU model whose hosts run worse on the metric at healthy times, the finding
  must also hold within that group (``contrasts.within_group``, the stratified test; ``groups`` in
  the row), so its p is the larger of the two, and it is flagged when it does not hold there.
  Where a checkpoint write or a heavy phase of the job comes before the outcome more often than
  in controls and the metric runs worse during it at healthy times, the finding must also hold
  within the phase strata (``phase``; ``phases`` in the row, ``phase_windows`` in the result):
  again the larger p, and flagged "tracks checkpoint writes" / "tracks job phase" when it does not;
- beside the rank test, the **tail test** (``tail.tail_test``) on the same values, within the same
  matched sets where the rank test runs within them: how many windows before the outcome are
  among the top 2 % of all values, against what chance puts there (``tail`` in the row). A
  precursor before a few of the outcome's failures only (a thermal fault among every NODE_FAIL)
  puts those windows far out and barely moves the ranks. The row's p is the smaller of the two,
  doubled (Bonferroni over two tests; ``p_rank`` keeps the rank test's), and every gate below that
  tests within strata does the same (``contrasts.stratified_gate_p``);
- ``q``: Benjamini–Hochberg over every metric tested in the scan: the expected share of false
  findings among those ranked at or above it. Many metrics are compared, so p alone overstates;
- medians of B and C, and how many windows each had.
Metrics with fewer than ``MIN_WINDOWS`` windows on either side are listed as not tested.
"""
from __future__ import annotations

import math
import zlib
from array import array

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import numpy as np
from scipy.stats import false_discovery_control, mannwhitneyu, rankdata

from telemetry import catalog, rules, store
from telemetry.queries import contrasts, phase, scores, tail, windows
from telemetry.queries.windows import COVERAGE_S, Outcome, hosts_of, metrics_present

MIN_WINDOWS = 3
# failures with siblings behind the within-job contrast at which it gates a finding even where
# nothing moved job-wide (below it, too little power: shown beside, see ``scan``)
SIBLINGS_GATE = 10
QUERY_TIMEOUT_S = 600
HOUR = COVERAGE_S

_ROLLUP = windows.ROLLUP_SQL

# Per (host, unit, minute), unit = the component up to its first '/' (gpu3/nvlink2 -> gpu3): the
# highest and lowest of the minute means (gauges) or of the reset-aware per-second rates since the
# previous minute (counters) over the unit's series.
_UNIT = "splitByChar('/', component)[1]"

_GAUGE_MINUTES = (
    f"SELECT host, {_UNIT} AS unit, toUnixTimestamp(ts) AS t, max(v) AS vmax, min(v) AS vmin "
    f"FROM (SELECT host, component, ts, s / n AS v FROM ({_ROLLUP}) WHERE n > 0) WHERE isFinite(v) "
    "GROUP BY host, unit, t")

_COUNTER_MINUTES = (
    "SELECT host, unit, t, max(r) AS vmax, min(r) AS vmin FROM ("
    f"  SELECT host, {_UNIT} AS unit, t, (v - pv) / (c - pc) AS r FROM ("
    "    SELECT host, component, toUnixTimestamp(ts) AS t, hi AS v, toUnixTimestamp64Milli(last_ts) / 1000.0 AS c, "
    "     lagInFrame(v) OVER w AS pv, lagInFrame(c) OVER w AS pc, row_number() OVER w AS rn "
    f"    FROM ({_ROLLUP}) WINDOW w AS (PARTITION BY host, component ORDER BY ts "
    "     ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
    "  WHERE rn > 1 AND c > pc AND v >= pv) WHERE isFinite(r) "
    "GROUP BY host, unit, t")

# Each window's value from the minutes wholly inside it: a minute [t, t + 60) counts when
# start <= t and t + 60 <= end, so nothing from t0 on (the failure, the job's teardown) and
# nothing before the window enters, and a window and its controls cover the same minutes.
# The windows go in as (id, host, start, end) rows, one per host of each window; out comes each
# unit's worst value per window.
_WINDOW_VALUES = (
    "SELECT q.wid AS wid, m.host AS host, m.unit AS unit, max(m.vmax) AS vmax, min(m.vmin) AS vmin "
    "FROM ({minutes}) AS m "
    "INNER JOIN (SELECT w.1 AS wid, w.2 AS host, w.3 AS ws, w.4 AS we "
    "            FROM (SELECT arrayJoin({{wins:Array(Tuple(UInt32, String, Int64, Int64))}}) AS w)) AS q "
    "ON m.host = q.host WHERE m.t >= q.ws AND m.t + 60 <= q.we GROUP BY wid, host, unit")


def unit_window_values(cluster: str, spans, metric: str, *, lo_s: int, hi_s: int,
                       timeout_s: int = QUERY_TIMEOUT_S) -> tuple[np.ndarray, dict[int, dict[tuple[str, str], float]]]:
    """One metric over ``spans`` (windows, or any objects with ``hosts``, ``start``, ``end``): each window's value
    as the scan computes it (the worst minute value over its hosts and components in the metric's
    bad direction, from the minutes wholly inside it; NaN where the hosts reported nothing), and
    each (host, unit)'s worst value per window index (the contrasts' input)."""
    m = catalog.get(metric)
    highest = m.bad != "down"
    values = np.full(len(spans), np.nan)
    units: dict[int, dict[tuple[str, str], float]] = {}
    wins = [(i, h, int(w.start), int(w.end)) for i, w in enumerate(spans) for h in w.hosts]
    if not wins:
        return values, units
    sql = _WINDOW_VALUES.format(minutes=_COUNTER_MINUTES if m.is_counter else _GAUGE_MINUTES)
    table = store.query_arrow(sql, {"cluster": cluster, "metric": metric, "lo_s": lo_s, "hi_s": hi_s, "wins": wins},
                              tag="signal_scan:window_values", timeout_s=timeout_s)
    if not table.num_rows:
        return values, units
    ids = table.column(0).to_numpy().astype(np.int64)
    hosts = table.column(1).to_pylist()
    unit_names = table.column(2).to_pylist()
    col = table.column(3 if highest else 4).to_numpy().astype(float)
    for i, h, u, v in zip(ids.tolist(), hosts, unit_names, col.tolist()):
        units.setdefault(i, {})[(h, u)] = v
    order = np.argsort(ids, kind="stable")
    ids_s, col_s = ids[order], col[order]
    starts = np.flatnonzero(np.r_[True, ids_s[1:] != ids_s[:-1]])
    worst = (np.maximum if highest else np.minimum).reduceat(col_s, starts)
    values[ids_s[starts]] = worst
    return values, units


def pick_values(found, chosen, failing, unit_scores, unit_level, unit_rule,
                sign: float = 1.0) -> list[tuple[float, float, tuple[str, ...]]]:
    """Each window's (value, what a rule reads there, the hosts it stands for): one unit's, chosen the same way for a window before the
    outcome and its controls (equal exposure; see the module docstring). Where the outcome names
    the failing unit, the value is that unit's raw level, times ``sign`` (−1 for a metric whose bad
    direction is down: values are oriented, higher is worse) — its controls are the same unit at
    other times and its namesake on a healthy peer (``contrasts.window_reads``); elsewhere the
    highest self-normalised score over the window's hosts and units. The second of the pair is what
    a level rule reads there: where the outcome names the failing unit, the worst ``rule`` value
    (highest minute rate or value; the lowest for ``sign`` −1) of the parts the window reads — that
    unit, or every part of the failing host (its stand-in) where the metric has no series of its
    family — as the fleet test fires it; elsewhere the highest-scoring unit's. The third is the host
    the value was read on where the outcome names the failing unit, else the window's hosts (the
    group tests, see ``contrasts.within_group``)."""
    reads = contrasts.window_reads(found, chosen, failing, families(unit_level))
    out = []
    for wi, (w, read) in enumerate(zip(found, reads)):
        if read is None:
            vals = unit_scores.get(wi, {})
            if not vals:
                out.append((np.nan, np.nan, w.hosts))
                continue
            best = max(vals, key=vals.get)
            out.append((vals[best], unit_rule.get(wi, {}).get(best, np.nan), tuple(w.hosts)))
            continue
        raw = contrasts.read_parts(unit_level.get(wi, {}), read)
        if not raw:
            out.append((np.nan, np.nan, (read[0],)))
            continue
        best = max(raw, key=lambda k: sign * raw[k])
        rules_read = [v for v in contrasts.read_parts(unit_rule.get(wi, {}), read).values() if np.isfinite(v)]
        rv = (max(rules_read) if sign > 0 else min(rules_read)) if rules_read else np.nan
        out.append((sign * raw[best], rv, (read[0],)))
    return out


def size_adjusted(found, failing, picked, unit_scores) -> list[float]:
    """Each window's value adjusted for how many parts it had, where it is the highest part score
    over the window's hosts (its outcome names no part): the chance that as many parts at healthy
    times would all score below it — F(v)ⁿ, F the distribution of single part scores over every
    part of the control windows (mid-distribution at ties: ½(F(v⁻)ⁿ + F(v)ⁿ)), n the parts the
    window scored. Under no difference it is uniform whatever n is, so a window over 128 parts and
    one over 8 compare fairly: the highest of more scores is higher by chance, and a window before
    NODE_FAIL on the 96-host bench fleet had ~1.4x the scored parts of its own same-host controls
    (hosts without data or without enough past far from the job). Where the outcome names the part
    the value is that part's level and stays as it is."""
    out = [v for v, _, _ in picked]
    null = np.sort(np.fromiter((x for wi, w in enumerate(found) if w.kind != "before"
                                and (failing[w.index] if w.index < len(failing) else None) is None
                                for x in unit_scores.get(wi, {}).values() if np.isfinite(x)), float))
    if not len(null):
        return out
    for wi, w in enumerate(found):
        if (failing[w.index] if w.index < len(failing) else None) is not None or not np.isfinite(out[wi]):
            continue
        n = sum(1 for x in unit_scores.get(wi, {}).values() if np.isfinite(x))
        below = np.searchsorted(null, out[wi], side="left") / len(null)
        at_most = np.searchsorted(null, out[wi], side="right") / len(null)
        out[wi] = 0.5 * (below ** n + at_most ** n)
    return out


def families(unit_level) -> set[str]:
    """The unit families a metric has in the scan's windows ({wi: {(host, unit): value}})."""
    return {contrasts.family(u) for u in {u for vals in unit_level.values() for (_, u) in vals}}


def window_features(cluster: str, spans, metrics: list[str], *, lo_s: int, hi_s: int,
                    progress: Callable[[int, int, str], None] | None = None,
                    timeout_s: int = QUERY_TIMEOUT_S) -> dict[str, np.ndarray]:
    """Per metric, each window's value as the scan computes it (``unit_window_values``); one
    query per metric, the windows pushed into the engine."""
    out: dict[str, np.ndarray] = {}
    for i, metric in enumerate(metrics):
        if progress:
            progress(i, len(metrics), f"features: metric {i + 1}/{len(metrics)}: {metric}")
        out[metric] = unit_window_values(cluster, spans, metric, lo_s=lo_s, hi_s=hi_s, timeout_s=timeout_s)[0]
    return out


def scan(outcome: Outcome, lead_s: int, *, clusters: list[str] | None = None, start: datetime | None = None,
         end: datetime | None = None, metrics: list[str] | None = None,
         progress: Callable[[int, int, str], None] | None = None, timeout_s: int = QUERY_TIMEOUT_S) -> dict:
    """Rank the catalog metrics (or ``metrics``) by how they differ before ``outcome``."""
    W = windows.check_lead(lead_s, "the scan")
    if metrics:
        unknown = [m for m in metrics if not catalog.is_known(m)]
        if unknown:
            raise windows.NotTestable(f"not in the catalog: {', '.join(unknown)}")
    say = progress or (lambda done, total, stage: None)
    clusters = clusters or windows.clusters_with_jobs(timeout_s=timeout_s)
    # values[metric] = (before values, control values)
    values: dict[str, tuple[list[float], list[float]]] = {}
    strata: dict[str, tuple[list[int], list[int]]] = {}  # each value's interruption (its matched set)
    adjusted_values: dict[str, tuple[list[float], list[float]]] = {}  # the same, adjusted for parts scored
    raws: dict[str, tuple[list[float], list[float]]] = {}  # the same windows' raw values (medians, pin rule)
    where: dict[str, tuple[list[tuple], list[tuple]]] = {}  # the hosts each value stands for (group tests)
    on_part: dict[str, tuple[array, array]] = {}  # whether each value is a named part's level (1) or a score (0)
    readings: dict[str, tuple[list[float], list[float]]] = {}  # what a rise rule reads (rules.rise_readings)
    level_reads: dict[str, tuple[list[float], list[float]]] = {}  # what a rate/threshold rule reads (level_readings)
    tested_as: dict[str, list[int]] = {}  # metric -> [windows before valued by the failing part's level, by a score]
    parts: dict[str, dict] = {}  # metric -> contrasts.collect's pooled parts
    groups: list[contrasts.Concentration] = []  # racks/drivers/firmware the failures concentrate on
    phases: dict[str, tuple[list[dict], list[dict]]] = {}  # each value's window's phase strata (phase.py)
    phase_counts = None  # windows in a checkpoint write / heavy phase, before the outcome and in controls
    excluded = windows.Exclusions()  # candidate controls left out, and why
    no_data: dict[str, list[int]] = {}  # metric -> [windows before without data, controls without data]
    n_outcome = n_named = 0
    matched = False
    lo_all = hi_all = None
    plan = []
    for cluster in clusters:
        present = [p for p in metrics_present(cluster, timeout_s=timeout_s) if not metrics or p[0] in metrics]
        plan.append((cluster, present))
    total = sum(len(p) for _, p in plan) or 1
    done = 0
    # First every cluster's interruptions, failing parts and the groups they concentrate on: the
    # groups are known before any metric is read, so only their hosts' levels are kept (collect)
    prepared = []
    for cluster, present in plan:
        if not present:
            continue
        lo_s = int(start.timestamp()) if start else min(a for _, a, _ in present)
        hi_s = int(end.timestamp()) if end else max(b for _, _, b in present) + 60
        if hi_s <= lo_s:
            continue
        lo_all = lo_s if lo_all is None else min(lo_all, lo_s)
        hi_all = hi_s if hi_all is None else max(hi_all, hi_s)
        say(done, total, f"cluster {cluster}: interruptions of {outcome.label}")
        chosen, host_t0s = windows.outcome_interruptions(cluster, outcome, W, lo_s, hi_s, timeout_s=timeout_s)
        failing = contrasts.failing_units(cluster, chosen, outcome, timeout_s=timeout_s) if chosen else []
        if chosen:
            groups += contrasts.concentration(cluster, [u[0] if u else it.hosts for u, it in zip(failing, chosen)],
                                              timeout_s=timeout_s)
        prepared.append((cluster, present, lo_s, hi_s, chosen, host_t0s, failing))
    for cluster, present, lo_s, hi_s, chosen, host_t0s, failing in prepared:
        stratum0 = n_outcome  # each interruption's window and its controls: one stratum, numbered over clusters
        n_outcome += len(chosen)
        if not chosen:
            done += len(present)
            continue
        hosts = hosts_of(cluster, timeout_s=timeout_s)
        allocations = windows.Allocations.load(cluster, *windows.allocation_range(lo_s, hi_s, W), timeout_s=timeout_s)
        matched = matched or bool(allocations)
        found = windows.matched_windows(cluster, chosen, host_t0s, W, lo_s, hi_s, hosts, allocations,
                                        excluded=excluded, failing=failing,
                                        failed=windows.failed_t0s(cluster, host_t0s, timeout_s=timeout_s))
        n_named += sum(u is not None for u in failing)
        spans = found + contrasts.own_history_windows(chosen, windows.with_lead_window(found, failing), host_t0s, W, lo_s)
        phased, idle_past = phase.window_phases_and_idle_past(cluster, found, lo_s, hi_s, timeout_s=timeout_s)
        # where the outcome names no part, hosts idle for most of their past are not scored there
        # (phase.idle_past_hosts: no baseline under load); a window left with none has no value
        unscored = {wi: frozenset(hs) for wi, (w, hs) in enumerate(zip(found, idle_past))
                    if hs and (failing[w.index] if w.index < len(failing) else None) is None}
        # what a rise rule reads leaves them out everywhere (the fleet test's rise_left_out)
        rise_skip = {wi: frozenset(hs) for wi, hs in enumerate(idle_past) if hs}
        for wi, hs in unscored.items():
            if found[wi].kind == "before":
                excluded.before_hosts_idle_past += len(hs)
            else:
                excluded.control_hosts_idle_past += len(hs)
        phase_counts = phase.count(found, phased, phase_counts)
        names = [metric for metric, _, _ in present]

        def step(i, n, stage, _done=done):
            say(_done + i, total, stage)

        # one metric at a time: only its per-window values are held (bounded memory on any fleet)
        for metric, unit_scores, unit_level, unit_rule in scores.iter_window_scores(
                cluster, spans, names, host_t0s=host_t0s, progress=step, timeout_s=timeout_s):
            for wi, hs in unscored.items():
                for by_part in (unit_scores, unit_rule):
                    if wi in by_part:
                        by_part[wi] = {k: v for k, v in by_part[wi].items() if k[0] not in hs}
            picked = pick_values(found, chosen, failing, unit_scores, unit_level, unit_rule,
                                 -1.0 if catalog.get(metric).bad == "down" else 1.0)
            adjusted = size_adjusted(found, failing, picked, unit_scores)
            # flat arrays, not lists of floats: a window's numbers per metric, ~8 bytes each instead of
            # ~32, held for every metric until the ranking (a big fleet has thousands of windows)
            before, control = values.setdefault(metric, (array("d"), array("d")))
            adj_b, adj_c = adjusted_values.setdefault(metric, (array("d"), array("d")))
            strata_b, strata_c = strata.setdefault(metric, (array("q"), array("q")))
            raw_b, raw_c = raws.setdefault(metric, (array("d"), array("d")))
            where_b, where_c = where.setdefault(metric, ([], []))
            gaps = no_data.setdefault(metric, [0, 0])
            read_b, read_c = readings.setdefault(metric, (array("d"), array("d")))
            lev_b, lev_c = level_reads.setdefault(metric, (array("d"), array("d")))
            lowest = catalog.get(metric).bad == "down"
            reads = contrasts.window_reads(found, chosen, failing, families(unit_level))
            for wi, w in enumerate(found):
                # What a rule reads there: the highest part score (rise), or the highest minute rate
                # (counters) or raw value (gauges; the lowest where the bad direction is down) of
                # any series (rate/threshold). In a control window, over every part of the
                # window's hosts — also where the outcome names the failing part and the fleet
                # test judges that part alone: a deployed rule watches every part, so its
                # threshold (the controls' 95th percentile, rules.pin_basis) is set to stay rare
                # over every part of a host at healthy times (there a control is one host:
                # windows.matched_windows; elsewhere the job's hosts); set on one part's readings
                # it would sit in the quiet part's noise floor and raise alarms on every part of
                # the fleet. Before
                # the outcome, over the parts the fleet test judges there (``reads``: the failing
                # part where the outcome names it), so the share of those windows past the
                # threshold (``before_above``) is what the pinned rule's fleet test will count (a
                # burst on another GPU of the job before an XID is not the rule catching the failure)
                read = reads[wi] if w.kind == "before" else None
                rise_read = [v for k, v in contrasts.read_parts(unit_scores.get(wi, {}), read).items()
                             if k[0] not in rise_skip.get(wi, ())]
                if rise_read:
                    (read_b if w.kind == "before" else read_c).append(max(rise_read))
                got = [v for v in contrasts.read_parts(unit_rule.get(wi, {}), read).values() if math.isfinite(v)]
                if got:
                    (lev_b if w.kind == "before" else lev_c).append(min(got) if lowest else max(got))
            kinds = tested_as.setdefault(metric, [0, 0])
            ph_b, ph_c = phases.setdefault(metric, ([], []))
            part_b, part_c = on_part.setdefault(metric, (array("b"), array("b")))
            for wi, (w, (v, rv, on), ph) in enumerate(zip(found, picked, phased)):
                if np.isfinite(v):
                    if w.kind == "before":  # the failing part's level where the outcome names it, else a score
                        kinds[(failing[w.index] if w.index < len(failing) else None) is None] += 1
                    (before if w.kind == "before" else control).append(float(v))
                    (strata_b if w.kind == "before" else strata_c).append(stratum0 + w.index)
                    (adj_b if w.kind == "before" else adj_c).append(adjusted[wi])
                    (where_b if w.kind == "before" else where_c).append(on)
                    (ph_b if w.kind == "before" else ph_c).append(ph)
                    (part_b if w.kind == "before" else part_c).append(reads[wi] is not None)
                    if np.isfinite(rv):
                        (raw_b if w.kind == "before" else raw_c).append(float(rv))
                else:
                    gaps[w.kind != "before"] += 1
            parts[metric] = contrasts.collect(unit_scores, spans, failing, True, parts.get(metric),
                                              levels=unit_level, highest_level=catalog.get(metric).bad != "down",
                                              groups=groups)
        done += len(names)
    say(total, total, "ranking")
    rows = []
    for metric, (before, control) in values.items():
        m = catalog.get(metric)
        raw_b, raw_c = raws.get(metric, ([], []))
        # what the scan tests: the failing part's level (most windows before the outcome name the
        # part) or the highest self-normalised score; the pin rule follows it (rules.pin_basis)
        named, unnamed = tested_as.get(metric, [0, 0])
        statistic = "level" if named > unnamed else "score"
        where_b, where_c = where.get(metric, ([], []))
        ph_b, ph_c = phases.get(metric, ([], []))
        off_scale = 0
        mixed = False  # a level row whose windows on one scale are too few: tested within matched sets
        if statistic == "level":
            # A level row compares levels with levels: the windows of interruptions that name no
            # part hold a score (another scale) and are left out, before the outcome and in their
            # controls alike. Pooled, the two scales made a difference of their mix alone: on the
            # 256-host bench fleet three constant metrics (the enforced power limit, the host's GPU
            # count and memory) came out before NODE_FAIL at AUC 0.56, q 0.0013, where 116 of 187
            # windows named a part and their controls did in another proportion. Where too few
            # windows before the outcome are on the level's scale to test (a handful of confirmed
            # cases), every window stays and the test runs within each interruption's matched set
            # (stratified_test), where a window is only compared with its own controls, on one scale.
            keep_b, keep_c = on_part.get(metric, ((), ()))
            off_scale = len(before) + len(control) - sum(keep_b) - sum(keep_c)
            if off_scale and sum(keep_b) < MIN_WINDOWS:
                mixed = True
            elif off_scale:
                before, where_b, ph_b = ([x for x, k in zip(xs, keep_b) if k] for xs in (before, where_b, ph_b))
                control, where_c, ph_c = ([x for x, k in zip(xs, keep_c) if k] for xs in (control, where_c, ph_c))
        row = {"metric": metric, "layer": m.layer, "unit": m.unit, "kind": m.kind, "bad": m.bad,
               "n_before": len(before), "n_control": len(control),
               "median_before": float(np.median(raw_b)) if raw_b else None,
               "median_control": float(np.median(raw_c)) if raw_c else None,
               "median_score_before": float(np.median(before)) if before else None,
               "median_score_control": float(np.median(control)) if control else None,
               "auc": None, "p": None, "q": None}
        row["rise_readings"] = rules.rise_readings(*readings.get(metric, ([], [])))
        row["statistic"] = statistic
        row["windows_off_scale"] = 0 if mixed else off_scale
        row["level_readings"] = (rules.level_readings(*level_reads.get(metric, ([], [])),
                                                      "rate" if m.is_counter else "threshold",
                                                      "<" if m.bad == "down" else ">")
                                 if row["statistic"] == "level" else None)
        alternative = "two-sided" if m.bad not in ("up", "down") else "greater"
        if mixed:
            sb, sc = strata.get(metric, ([], []))
            got = stratified_test(list(before), sb, list(control), sc, alternative, seed=metric)
            row["test"] = "within each interruption's matched set (levels and scores)"
            row["strata"] = got["strata"]
            if got["strata"] >= MIN_WINDOWS:
                row.update(auc=got["auc"], p=got["p"])
        elif row["statistic"] == "score":
            # The highest score over every part of the window's hosts: a window over more hosts and
            # parts reads higher by chance alone, and interruptions pick big jobs (more hosts, more
            # to fail), while their controls come mostly from small ones (a big job has fewer quiet
            # stretches and no group of as many healthy peers). So each window before the outcome is
            # compared only with its own controls (the same hosts, or as many peers): a test within
            # strata (stratified_test), the AUC the mean of the per-interruption AUCs; and within a
            # set the window before may have scored more parts than its controls, so the values
            # compared are adjusted for the parts scored (size_adjusted).
            sb, sc = strata.get(metric, ([], []))
            ab, ac = adjusted_values.get(metric, ([], []))
            got = stratified_test(ab, sb, ac, sc, alternative, seed=metric)
            row["test"] = "within each interruption's matched set"
            row["strata"] = got["strata"]
            if got["strata"] >= MIN_WINDOWS:
                row.update(auc=got["auc"], p=got["p"])
        elif len(before) >= MIN_WINDOWS and len(control) >= MIN_WINDOWS:
            # scores are oriented in the bad direction already: higher is worse
            res = mannwhitneyu(before, control, alternative=alternative, method="auto")
            # statistic is U of the first sample whatever the alternative: U / (n1·n2) = P(b > c) + ½P(b = c)
            row.update(auc=float(res.statistic) / (len(before) * len(control)),
                       p=rank_sum_p(before, control, alternative, float(res.pvalue), seed=metric))
            row["test"] = "pooled"
        # Beside the rank test, the tail test (tail.py) on the same values: a precursor that shows
        # before a few of the outcome's failures only puts those windows past nearly every
        # control and barely moves the ranks. The row's p is the smaller of the two, doubled
        # (Bonferroni over the two tests); ``p_rank`` keeps the rank test's, ``tail`` the count.
        row["p_rank"], row["tail"] = row["p"], None
        if row["p"] is not None and alternative == "greater":
            if mixed:
                row["tail"] = tail.tail_test(list(before), list(control), b_strata=list(sb), c_strata=list(sc))
            elif row["statistic"] == "score":
                row["tail"] = tail.tail_test(list(ab), list(ac), b_strata=list(sb), c_strata=list(sc))
            else:
                row["tail"] = tail.tail_test(list(before), list(control))
            if row["tail"]["p"] is not None:
                row["p"] = min(1.0, 2.0 * min(row["p"], row["tail"]["p"]))
        if row["p"] is None:
            row["not_tested"] = _why_not(len(before), len(control), no_data.get(metric, [0, 0]), excluded)
            if row.get("strata") is not None and len(before) >= MIN_WINDOWS and len(control) >= MIN_WINDOWS:
                row["not_tested"] = (f"only {row['strata']} window{'s' if row['strata'] != 1 else ''} before the "
                                     f"outcome with a scored control of their own, {MIN_WINDOWS} needed")
        # a finding lower before the outcome (a metric without a bad direction): its job-wide flag,
        # its within-job contrasts and spread read the low side (a checkpoint write idles every GPU
        # of the job), and the contrasts compare what the row tested (the levels or the scores)
        low = alternative == "two-sided" and row["auc"] is not None and row["auc"] < 0.5
        found = contrasts.summarize(parts.get(metric), groups, low=low, statistic=row["statistic"])
        row.update(level=found["level"], contrasts=found["contrasts"], flags=[],
                   p_fleet=row["p"], within_job=None, job_wide_share=found["job_wide_share"])
        gate_contrasts(row, found, low)
        row["groups"] = []
        for track in found["tracks_group"]:
            # The failures concentrate on a group where the metric runs worse at any time: the
            # group is the rival explanation, so the finding must also hold within it — before
            # the outcome against controls of the same group (and off it against off it), where
            # the group cancels: again an intersection-union test, the larger p. A precursor that
            # rises before failures on the group's hosts as on the others holds and is not flagged.
            got = contrasts.within_group(track, list(zip(before, where_b)), list(zip(control, where_c)),
                                         "two-sided" if m.bad not in ("up", "down") else "greater")
            row["groups"].append(got)
            if row["p"] is not None and got["p"] is not None:
                row["p"] = max(row["p"], got["p"])
            if not got["holds"]:
                row["flags"].append(track.text() + (
                    f"; within the group it does not hold (p {got['p']:.2g}, {got['before_within']} windows before, "
                    f"{got['controls_within']} controls there)" if got["p"] is not None
                    else "; not testable within the group (no stratum with windows before and controls)"))
        # A checkpoint write or heavy phase over-represented before the outcome, in which the
        # metric runs worse at healthy times: the finding must hold within the phase strata too
        # (phase.py; the larger p), and is flagged when it does not.
        phase.apply(row, before, control, ph_b, ph_c,
                    "two-sided" if m.bad not in ("up", "down") else "greater")
        rows.append(row)
    tested = [r for r in rows if r["p"] is not None]
    if tested:
        qs = false_discovery_control([r["p"] for r in tested], method="bh")
        for r, q in zip(tested, qs):
            r["q"] = float(q)
    # Findings the workload explains (flagged) rank below every unflagged one.
    # (q saturates at 1 among many weak findings: p then AUC break its ties)
    rows.sort(key=lambda r: (r["q"] is None, bool(r["flags"]), r["q"] if r["q"] is not None else 1.0,
                             r["p"] if r["p"] is not None else 1.0,
                             -abs((r["auc"] if r["auc"] is not None else 0.5) - 0.5), r["metric"]))
    iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat()  # noqa: E731
    return {
        "outcome": outcome.label, "lead_window_s": W, "clusters": list(clusters),
        "range": [iso(lo_all), iso(hi_all)] if lo_all is not None else None,
        "outcome_interruptions": n_outcome, "components_named": n_named,
        "concentrated_on": [g.as_dict() for g in groups], "controls_excluded": excluded.as_dict(),
        "phase_windows": phase_counts,
        "matched_on_activity": matched, "metrics_tested": len(tested), "metrics_seen": len(rows),
        "rows": rows,
    }


def gate_contrasts(row: dict, found: dict, low: bool) -> None:
    """The within-job and own-history gates of one scan row (``found``: ``contrasts.summarize``'s
    result for it; ``low``: the finding is lower before the outcome): sets ``within_job``, and
    where a contrast with the power to gate does not hold, flags the row and raises its p to the
    contrast's (an intersection-union test: the larger p)."""
    side = "low" if low else "high"
    # within the job: the failing part against its siblings, or where the outcome names no part,
    # the job's most extreme host against its other hosts (contrasts: job spread)
    sib = next((c for c in (found["contrasts"].get("siblings"), found["contrasts"].get("job_spread"))
                if c and c.get("p") is not None), {})
    if sib.get("p") is not None:
        row["within_job"] = bool(sib["survives"])
    if found["job_wide"] and not row["within_job"]:
        row["flags"].append(found["job_wide"])
        if row["p"] is not None and sib.get("p") is not None:
            # The metric moved on the job's other hosts too: the workload is the rival
            # explanation, so the finding must also hold within the job, where the workload
            # cancels — an intersection-union test of the two, the larger p. Where nothing
            # moved job-wide, the matched healthy windows (the same part at other times, the
            # same part on healthy peers) are the test: the sibling contrast, one part against
            # a handful of others, is shown beside it but has too little power to gate it.
            row["p"] = max(row["p"], sib["p"])
    elif (sib.get("p") is not None and sib.get("failures", 0) >= SIBLINGS_GATE and row["p"] is not None
          and row["statistic"] == "level" and not sib["survives"]):
        # With as many failures as this behind it, the within-job contrast has the power to
        # gate: a finding the part's siblings of the same job at the same time read as high as
        # (p >= 0.05 there) is the job's workload (the busy 96-host bench fleet: power-cap
        # throttling, NVSwitch power and traffic, node power before XID 74/79 at q 0.0007-0.02
        # against healthy windows, p 0.3-0.75 against the siblings over 15 failures): the larger
        # p stands, and it is flagged. One that holds there keeps its p against the matched
        # healthy windows (the siblings' Fisher-combined p, weaker by construction, would only
        # drown it in the correction over every metric scanned)
        row["p"] = max(row["p"], sib["p"])
        row["flags"].append(f"does not hold within the job: the part's siblings of the same job read as "
                            f"{side} (p {sib['p']:.2g} over {sib['failures']} failures)")
    own = found["contrasts"].get("own_history") or {}
    if (own.get("p") is not None and own.get("failures", 0) >= SIBLINGS_GATE and row["p"] is not None
            and row["statistic"] == "level" and not own["survives"]):
        # The same power rule for the part's own past: a part whose level before the outcome is no
        # further out than in its own earlier windows of the same length (untouched by interruptions)
        # was always like that — a part that always reads high (or low) predicts nothing. On the
        # 256-host bench fleet gpu.pcie.rx_rate read lower before NODE_FAIL (q 0.0039), its failing
        # parts as low in their own past (p 0.84 over 93 failures); the true precursors held there
        # (PCIe replays before XID 74/79 p 5e-6 over 31, DRAM ECC before XID 94/95 0.003 over 32,
        # symbol errors before a link-down 0.01 over 28: the failures whose counter was not at 0 in
        # every window).
        row["p"] = max(row["p"], own["p"])
        row["flags"].append(f"does not hold against the part's own past: its earlier windows read as {side} "
                            f"(p {own['p']:.2g} over {own['failures']} failures)")


STRATIFIED_DRAWS = 20_000  # the within-strata permutation test's draws (more where p is small)


def stratified_test(before, b_strata, control, c_strata, alternative: str, *, seed: str = "") -> dict:
    """Each window before the outcome against its OWN controls (its stratum: the interruption it
    precedes), never against another interruption's. Per stratum i with a value before the
    outcome b_i and m_i ≥ 1 controls, A_i = P(b_i > c) + ½P(b_i = c) over its controls (that
    window's AUC); ``auc`` = the mean of the A_i (0.5: no difference), ``strata`` how many.
    ``p``: the permutation test within strata: under no difference b_i is equally likely any of
    its stratum's m_i + 1 values (ties as they are), so A_i takes each of the m_i + 1 values
    (r_k − 1)/m_i (r_k the midranks) with equal chance, independently per stratum; p is the share
    of draws whose Σ A_i is at least the observed (two-sided: as far from its mean, k/2).
    ``STRATIFIED_DRAWS`` draws seeded by ``seed`` (a re-run gives the same p), ten times as many
    where fewer than 20 draws reach the observed sum; p ≥ 1/(draws + 1)."""
    by: dict[int, list] = {}
    for v, s in zip(before, b_strata):
        by.setdefault(s, [[], []])[0].append(float(v))
    for v, s in zip(control, c_strata):
        by.setdefault(s, [[], []])[1].append(float(v))
    options, observed = [], 0.0
    for b, c in by.values():
        if not b or not c:
            continue
        for bv in b:  # one window before each interruption; several would each count against its controls
            pooled = np.r_[bv, c]
            r = rankdata(pooled)
            a = (r - 1.0) / len(c)
            options.append(a)
            observed += float(a[0])
    k = len(options)
    if not k:
        return {"auc": None, "p": None, "strata": 0}
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    centre = k / 2.0

    def hits(draws: int) -> int:
        total = np.zeros(draws)
        for a in options:
            total += a[rng.integers(0, len(a), draws)]
        if alternative == "two-sided":
            return int(np.count_nonzero(np.abs(total - centre) >= abs(observed - centre) - 1e-9))
        if alternative == "less":
            return int(np.count_nonzero(total <= observed + 1e-9))
        return int(np.count_nonzero(total >= observed - 1e-9))

    draws = STRATIFIED_DRAWS
    got = hits(draws)
    if got < 20:
        draws *= 10
        got = hits(draws)
    return {"auc": observed / k, "p": float((1 + got) / (1 + draws)), "strata": k}


TIED_SHARE = 0.1  # a tie group this large (share of all values) and the normal approximation is not trusted
EXACT_BELOW_P = 0.01  # ... where it claims a p below this
EXACT_MAX_CELLS = 50_000_000  # the exact distribution's work (cells updated) above which the sampler runs
EXACT_MAX_TABLE = 4_000_000  # ... or its table's cells (8 bytes each, held twice while a group is added: 64 MB)
PERMUTATIONS = 20_000  # the sampler's shuffles (only beyond EXACT_MAX_CELLS or EXACT_MAX_TABLE)


def rank_sum_distribution(pooled, m: int) -> np.ndarray | None:
    """The exact permutation distribution of the sum of DOUBLED midranks (whole numbers) of ``m``
    of the ``pooled`` values drawn without replacement, every one of the C(n, m) subsets equally
    likely and the ties as they are: ``counts[s]`` = the number of subsets whose doubled rank sum
    is s. Dynamic programming over the tie groups (the distinct values): a group of t equal values
    of doubled midrank r adds i·r to the sum in C(t, i) ways, i = 0..min(t, m); the largest group
    goes last and only into the m-subsets' row (one pass instead of m). So the table before it
    counts subsets of the OTHER values only: at most as many rows as there are other values
    (``k``, with k = min(m, values outside the largest group)) and sums up to the largest k of them
    reach — under heavy ties (most windows at 0) a few rows, not m + 1 (before NODE_FAIL on the
    256-host bench fleet, m = 187 with 455 of 463 values tied held a 188-row table of 88,977 sums,
    128 MB, twice; now 9 rows).
    The counts are float64 and exact while C(n, m) < 2**53 (no count, partial count or binomial
    then exceeds it); beyond, each is rounded to ~1e-16 relative. None where that is past its
    reach: the work — (k + 1) × (the sums reached so far + 1) cells per (group, i) step, summed —
    over ``EXACT_MAX_CELLS`` (about a second), the table over ``EXACT_MAX_TABLE`` cells (its
    memory), or C(n, m) over 1e300 (float range)."""
    from math import comb

    _, t = np.unique(np.asarray(pooled, float), return_counts=True)
    n = int(t.sum())
    if m < 0 or m > n:
        return None
    r = 2 * np.cumsum(t) - t + 1  # doubled midranks: 2 × (values below) + t + 1
    top = int(np.repeat(r, t)[n - m:].sum()) if m else 0  # the largest possible sum
    last = int(np.argmax(t))
    order = [k for k in range(len(t)) if k != last]
    rows = min(m, n - int(t[last]))  # subsets of the other values: at most this many of them
    others = np.repeat(r[order], t[order]) if order else np.zeros(0, dtype=r.dtype)
    top_o = int(np.sort(others)[len(others) - rows:].sum()) if rows else 0  # the most they reach
    work, cap = 0, 0
    for k in order:
        cap = min(top_o, cap + min(int(t[k]), rows) * int(r[k]))
        work += min(int(t[k]), rows) * (rows + 1) * (cap + 1)
    work += (min(int(t[last]), m) + 1) * (top + 1)
    if work > EXACT_MAX_CELLS or (rows + 1) * (top_o + 1) > EXACT_MAX_TABLE or comb(n, m) > 1e300:
        return None
    dp = np.zeros((rows + 1, top_o + 1))  # dp[j, s]: ways to take j of the groups so far with sum s
    dp[0, 0] = 1.0
    cap = 0  # no sum so far exceeds cap
    for k in order:
        tk, rk = int(t[k]), int(r[k])
        cap_new = min(top_o, cap + min(tk, rows) * rk)
        new = dp[:, :cap_new + 1].copy()  # i = 0: none of the group taken
        for i in range(1, min(tk, rows) + 1):
            shift = i * rk
            if shift > cap_new:
                break
            w = min(cap + 1, cap_new + 1 - shift)
            new[i:, shift:shift + w] += float(comb(tk, i)) * dp[:rows + 1 - i, :w]
        dp[:, :cap_new + 1] = new
        del new
        cap = cap_new
    out = np.zeros(top + 1)
    tk, rk = int(t[last]), int(r[last])
    # the largest group: i of it and m − i of the others (at most ``rows`` of them)
    for i in range(m - rows, min(tk, m) + 1):
        j = m - i
        shift = i * rk
        if shift > top:
            break
        w = min(cap + 1, top + 1 - shift)
        out[shift:shift + w] += float(comb(tk, i)) * dp[j, :w]
    return out


def rank_sum_p(before, control, alternative: str, p_normal: float, *, seed: str = "") -> float:
    """The Mann–Whitney p, honest under heavy ties. Where most windows share one value (a counter
    quiet in most windows, a status flag at 0), the normal approximation's tie-corrected variance
    is tiny and one window that differs reads as proof: one flap in 1 of 7 windows before the
    outcome against 160 quiet controls gives p 1e-6 where the chance that the one odd window falls
    among the seven is 7/167 = 0.04. So where a tie group holds at least ``TIED_SHARE`` of the
    values and the approximation claims p < ``EXACT_BELOW_P``, the p is the permutation test's,
    exact: the share of all C(n, n1) ways to label n1 of the pooled windows "before" whose rank
    sum is at least as extreme as the observed one (``rank_sum_distribution``, over the smaller
    side; two-sided: as far from its mean), ties as they are. Deterministic, no floor (the
    smallest possible p is 1 / C(n, n1)). Only where that distribution is past its reach
    (``EXACT_MAX_CELLS``: thousands of windows on both sides) does a sampler stand in: the labels
    shuffled ``PERMUTATIONS`` times, seeded by ``seed`` (a re-run gives the same p), p at least
    1 / (PERMUTATIONS + 1), stopping early once 200 shuffles beat the observed sum."""
    b, c = np.asarray(before, float), np.asarray(control, float)
    pooled = np.r_[b, c]
    if p_normal >= EXACT_BELOW_P or not len(b) or not len(c):
        return p_normal
    _, counts = np.unique(pooled, return_counts=True)
    if counts.max() < TIED_SHARE * len(pooled):
        return p_normal
    ranks = rankdata(pooled)
    n1, n = len(b), len(pooled)
    # doubled midranks are whole numbers: the comparisons below are exact
    observed2 = int(round(2 * float(ranks[:n1].sum())))
    centre2 = n1 * (n + 1)
    small_is_before = n1 <= n - n1
    dist = rank_sum_distribution(pooled, n1 if small_is_before else n - n1)
    if dist is not None:
        s = np.arange(len(dist))
        # the smaller side's sum s stands for the before side's S = s (or n(n + 1) − s)
        S = s if small_is_before else n * (n + 1) - s
        if alternative == "two-sided":
            extreme = np.abs(S - centre2) >= abs(observed2 - centre2)
        elif alternative == "less":
            extreme = S <= observed2
        else:
            extreme = S >= observed2
        return float(dist[extreme].sum() / dist.sum())
    observed = float(ranks[:n1].sum())
    centre = n1 * (n + 1) / 2.0
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    hits, done = 0, 0
    chunk = max(1, min(PERMUTATIONS, 4_000_000 // n))
    while done < PERMUTATIONS:
        k = min(chunk, PERMUTATIONS - done)
        pick = np.argpartition(rng.random((k, n)), n1 - 1, axis=1)[:, :n1]
        sums = ranks[pick].sum(axis=1)
        if alternative == "two-sided":
            hits += int(np.count_nonzero(np.abs(sums - centre) >= abs(observed - centre) - 1e-9))
        elif alternative == "less":
            hits += int(np.count_nonzero(sums <= observed + 1e-9))
        else:
            hits += int(np.count_nonzero(sums >= observed - 1e-9))
        done += k
        if hits >= 200:  # p is far above the floor and already known to about 7 %
            break
    return float((1 + hits) / (1 + done))


def _why_not(n_before: int, n_control: int, gaps: list[int], excluded: "windows.Exclusions") -> str:
    """Why a metric was not tested: which windows it lacked, and what left the controls out."""
    parts = []
    if n_before < MIN_WINDOWS:
        parts.append(f"{n_before} window{'s' if n_before != 1 else ''} before the outcome with data "
                     f"({gaps[0]} without: no data, or no baseline where parts are scored against their own past), "
                     f"{MIN_WINDOWS} needed")
    if n_before < MIN_WINDOWS and excluded.before_interrupted:
        parts.append(f"{excluded.before_interrupted} window{'s' if excluded.before_interrupted != 1 else ''} "
                     "before the outcome left out: an earlier interruption inside left its mark in the logs of the host read")
    if n_before < MIN_WINDOWS and excluded.before_hosts_idle_past:
        n = excluded.before_hosts_idle_past
        parts.append(f"{n} host{'s' if n != 1 else ''} left out of windows before the outcome: idle for half or more "
                     "of the past their parts are scored against (no baseline under load)")
    if n_control < MIN_WINDOWS:
        parts.append(f"{n_control} control{'s' if n_control != 1 else ''} with data ({gaps[1]} without), "
                     f"{MIN_WINDOWS} needed")
    left = {"outside the history": excluded.outside_history, "touched by an interruption": excluded.interrupted,
            "hosts idle": excluded.idle, "too few healthy peers": excluded.too_few_peers}
    why = ", ".join(f"{n} {reason}" for reason, n in left.items() if n)
    return "; ".join(parts) + (f"; candidate controls left out: {why}" if why else "")


# --- the outcome classes present --------------------------------------------------------------

_CLASS_EVENTS_SQL = (
    "SELECT j.job_id, j.state, e.kind, e.code FROM "
    "(SELECT job_id, state, toUnixTimestamp(assumeNotNull(end_ts)) AS t0 FROM jobs FINAL "
    " WHERE cluster = {cluster:String} AND state IN {states:Array(String)} AND end_ts IS NOT NULL "
    " AND end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND end_ts < toDateTime64({hi_s:Int64}, 3, 'UTC')) AS j "
    "LEFT JOIN (SELECT DISTINCT job_id, host FROM job_hosts FINAL WHERE cluster = {cluster:String}) AS h "
    "ON h.job_id = j.job_id "
    "LEFT JOIN (SELECT host, toUnixTimestamp(ts) AS t, kind, code FROM events WHERE cluster = {cluster:String} "
    "           AND kind IN ('xid', 'link_down') AND ts >= toDateTime64({lo_s:Int64} - 600, 3, 'UTC') "
    "           AND ts < toDateTime64({hi_s:Int64} + 600, 3, 'UTC')) AS e "
    "ON e.host = h.host WHERE e.kind = '' OR abs(e.t - j.t0) <= 600")


def outcome_classes(clusters: list[str] | None = None, *, start: datetime | None = None, end: datetime | None = None,
                    timeout_s: int = QUERY_TIMEOUT_S) -> list[dict]:
    """The outcome classes the data has, most interruptions first: each Slurm state, each XID seen
    within ±10 min of an interruption's t0 on the job's hosts, and ``link down``; ``any
    interruption`` mixes them all and comes last. ``[{"outcome", "interruptions"}]``."""
    from telemetry.queries.interruptions import INTERRUPTION_STATES

    clusters = clusters or windows.clusters_with_jobs(timeout_s=timeout_s)
    lo_s = int(start.timestamp()) if start else 0
    hi_s = int(end.timestamp()) if end else 7_258_118_400  # 2200-01-01
    by_class: dict[str, set] = {}
    every: set = set()
    for cluster in clusters:
        rows = store.query_rows(_CLASS_EVENTS_SQL, {"cluster": cluster, "states": list(INTERRUPTION_STATES),
                                                    "lo_s": lo_s, "hi_s": hi_s},
                                tag="signal_scan:classes", timeout_s=timeout_s)
        for job_id, state, kind, code in rows:
            key = (cluster, job_id)
            every.add(key)
            by_class.setdefault(state, set()).add(key)
            if kind == "xid":
                by_class.setdefault(f"XID {int(code)}", set()).add(key)
            elif kind == "link_down":
                by_class.setdefault("link down", set()).add(key)
    out = sorted(({"outcome": k, "interruptions": len(v)} for k, v in by_class.items()),
                 key=lambda c: (-c["interruptions"], c["outcome"]))
    if every:
        out.append({"outcome": "any interruption", "interruptions": len(every)})
    return out


def scan_classes(outcomes: list[Outcome], lead_s: int, *, progress: Callable[[int, int, str], None] | None = None,
                 **kwargs) -> dict:
    """One scan per outcome class, in one job: ``{"lead_window_s", "classes": [scan result, ...]}``."""
    say = progress or (lambda done, total, stage: None)
    results = []
    for i, outcome in enumerate(outcomes):
        def step(done, total, stage, _i=i):
            say(_i * 1000 + int(1000 * done / max(total, 1)), len(outcomes) * 1000, f"{outcome.label}: {stage}")
        results.append(scan(outcome, lead_s, progress=step, **kwargs))
    say(len(outcomes) * 1000, max(1, len(outcomes) * 1000), "done")
    return {"lead_window_s": int(lead_s), "classes": results}
