"""Self-normalised window scores: how far each unit's behaviour in a window departs from that
unit's OWN recent past — the statistic the signal scan compares before outcomes and at healthy
times.

Why self-normalised
-------------------
A fleet's healthy background has heavy tails: a few percent of GPUs and links trickle corrected
errors for weeks and never fail, and every host runs its own workload. A statistic that takes the
highest raw value of a window (any GPU of any host) is dominated by those chronically noisy parts,
before failures and at healthy times alike, so a real precursor on one part disappears in them.
What a reliability engineer looks for instead is a *change*: a part that starts misbehaving. So
each unit (a host's component up to its first ``/``: ``gpu3`` for ``gpu3/nvlink2``, ``mlx5_0``
for ``mlx5_0/1``, '' for host-level series) is measured against itself.

The score of a unit in a window [s, e) (only the one-minute rollup rows wholly inside it: a minute
[t, t + 60) with s <= t and t + 60 <= e, so nothing at or after t0 enters) against its baseline,
the ``baseline_s`` before the window ([s − baseline_s, s), the same rule for minutes; by default
four lead windows, at least 6 h, at most 3 days; earlier history only, never the window itself):

- **counters** (error counts, bytes, nanoseconds): k = the unit's reset-aware increase in the
  window (summed over its series), λ = the increase its baseline rate predicts for a window of
  that length (baseline increase × window minutes / baseline minutes). score = ln((k + 1) / (λ + 1)):
  0 for a part that goes on as before however noisy it always was; ln 21 ≈ 3 for a quiet part
  that logs 20 errors; a trickling part must multiply its own rate to score as high;
- **gauges** (temperatures, power, clocks, flags): the window's mean against the baseline's mean,
  in baseline standard deviations (a floor of 1e-6 × the mean's size keeps a constant gauge —
  a link width, a status flag — finite: any change of one scores very high).
Scores are oriented in the catalog's bad direction (higher = worse; for ``up`` and ``none`` as
they are, negated for ``down``). A unit without a baseline of at least half a window's minutes
has no score in that window (NaN). A baseline starts no earlier than one window after the host's
last interruption before the window: the teardown and reboot after a failure (fans idling,
counters reset) are no baseline of anything.

Besides the score, each unit's raw value in the window (the counter's mean rate per second over
the window, the gauge's mean) is kept: the pin rule sets its threshold in the metric's own unit.

How it runs
-----------
In the engine, for a batch of metrics at once: the rollup rows of the windows' hosts are cut at
every window's boundaries (s − baseline, s − 59, s, e − 59: a look-up per (host, hour) in small arrays of the
boundaries in and just before each hour; one pass over the rows, no join, no merge), and summed per (metric, host, unit, segment) — minute count,
sum and sum of squares of the minute means, and the counter's increase inside the segment plus
the step from the previous segment. Python then adds segments up with prefix sums per unit, so
every window and baseline costs two look-ups, however many windows overlap.

A rule on the score (the fleet test's ``rise`` condition, ``rolling_fires``) reads the same
statistic for the window ending with every minute: the same query with every minute its own
segment, the same prefix sums, so a rule fires on a part exactly where the scan would score it
high (up to the baseline's first minute: the scan's segments leave out the step into it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from telemetry import catalog, store

QUERY_TIMEOUT_S = 600
METRICS_PER_QUERY = 24
MAX_LOOKUP = 500_000  # entries per look-up array parameter (the engine refuses arrays over 1,000,000)
HOSTS_PER_ROLLING_QUERY = 8  # rolling_fires: a row per (host, unit, minute) comes back
MIN_BASELINE_S = 6 * 3600
MAX_BASELINE_S = 3 * 86400
BASELINE_WINDOWS = 4
GRID_CELLS_S = (3600, 900, 300, 60)  # the cells boundaries are looked up by, largest first
CELL_BOUNDS = 4
_NEVER = 2 ** 62

# The rollup's rows as they are, no merge: a minute split over two unmerged parts counts as two
# (a mean of means, a counter's first/last/highest are the same either way).
_ROWS = ("SELECT metric, host, component, toInt64(toUnixTimestamp(ts)) AS t, intDiv(t, {grid_s:Int64}) AS cell, "
         "sum / count AS v, max AS hi, min AS lo, toUnixTimestamp64Milli(max_ts) / 1000.0 AS c, "
         "metric IN {counters:Array(String)} AS is_counter FROM samples_1m "
         "WHERE cluster = {cluster:String} AND metric IN {metrics:Array(String)} AND host IN {hosts:Array(String)} "
         "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND count > 0 "
         "AND isFinite(v) AND isFinite(hi) AND isFinite(lo)")

# Each row's segment: the last boundary at or before it. The boundaries go in as flat arrays
# indexed by (host, grid cell): the host's last boundary before the cell (a0) and up to
# CELL_BOUNDS inside it (a1..a4, sorted; a sentinel where there are fewer), so a look-up and a few
# comparisons place every row — no join.
_POS = ("toUInt32(transform(host, {hosts:Array(String)}, {host_idx:Array(UInt32)}, 0) * {n_cells:UInt32} "
        "+ (cell - {cell0:Int64}) + 1)")
_SEG_BY_BOUNDS = (
    "multiIf(t >= {a4:Array(Int64)}[pos], {a4:Array(Int64)}[pos], t >= {a3:Array(Int64)}[pos], {a3:Array(Int64)}[pos], "
    "        t >= {a2:Array(Int64)}[pos], {a2:Array(Int64)}[pos], t >= {a1:Array(Int64)}[pos], {a1:Array(Int64)}[pos], "
    "        {a0:Array(Int64)}[pos])")


def _segments_sql(seg: str, pos: str) -> str:
    """Per (metric, host, component, segment) sums of the rollup rows; ``seg`` is a row's segment
    (its last boundary; ``t``: every minute its own), ``pos`` what ``seg`` needs computed first."""
    return (
    "SELECT metric, host, component, seg, count() AS n, sum(v) AS sv, sum(v * v) AS sv2, "
    " argMin(hi, t) AS first_hi, argMax(hi, t) AS last_hi, max(hi) AS max_hi, min(lo) AS min_lo, "
    " argMin(c, t) AS first_c, argMax(c, t) AS last_c, "
    " arraySort(groupArrayIf((t, hi, c), is_counter)) AS xs, "
    " arrayMax(arrayPushBack(arrayMap((x, y) -> if(y.3 > x.3 AND y.2 >= x.2, (y.2 - x.2) / (y.3 - x.3), 0.), "
    "   arrayPopBack(xs), arrayPopFront(xs)), 0.)) AS rate_in FROM ("
    f"  SELECT metric, host, component, t, v, hi, lo, c, is_counter, {pos}{seg} AS seg "
    f"  FROM ({_ROWS})) "
    "WHERE seg > 0 GROUP BY metric, host, component, seg")

# The counter's increase in a segment: last − first when it only grew; across one reset (a reboot
# starts it again from 0) the climb to the highest value plus the climb after the reset. The step
# from the previous segment's last value to this one's first belongs to this segment (a drop: a
# reset, nothing counted). Also each segment's highest per-second rate between consecutive minutes
# (counters, from minute max to minute max over their last samples' times, as the fleet test's
# ``rate`` condition reads them) and its highest and lowest minute value (gauges).
def _units_sql(segments: str) -> str:
    """Per (metric, host, unit, segment): minutes, sums, the counter's increase, the highest rate,
    the highest and lowest value, and the last sample's time (seconds)."""
    return (
    "SELECT metric, host, splitByChar('/', component)[1] AS unit, seg, max(n) AS u_n, sum(n) AS u_nv, sum(sv) AS u_sv, "
    " sum(sv2) AS u_sv2, sum(inc) AS u_inc, max(rate) AS u_rate, max(max_hi) AS u_hi, min(min_lo) AS u_lo, "
    " max(last_c) AS u_c FROM ("
    "  SELECT metric, host, component, seg, n, sv, sv2, max_hi, min_lo, last_c, "
    "   if(last_hi >= first_hi AND last_hi = max_hi, last_hi - first_hi, max_hi - first_hi + last_hi) "
    "   + if(rn > 1 AND first_hi >= prev_last, first_hi - prev_last, 0) AS inc, "
    "   greatest(rate_in, if(rn > 1 AND first_hi >= prev_last AND first_c > prev_c, "
    "                        (first_hi - prev_last) / (first_c - prev_c), 0.)) AS rate "
    "  FROM (SELECT *, lagInFrame(last_hi) OVER w AS prev_last, lagInFrame(last_c) OVER w AS prev_c, "
    "        row_number() OVER w AS rn "
    f"        FROM ({segments}) WINDOW w AS (PARTITION BY metric, host, component ORDER BY seg "
    "        ROWS BETWEEN 1 PRECEDING AND CURRENT ROW))) "
    "GROUP BY metric, host, unit, seg ORDER BY metric, host, unit, seg")


_UNITS = _units_sql(_segments_sql(_SEG_BY_BOUNDS, f"{_POS} AS pos, "))
# Every minute its own segment: the rolling scores of a rule (``rolling_fires``).
_UNIT_MINUTES = _units_sql(_segments_sql("t", ""))


def baseline_for(W: int) -> int:
    """The baseline a window of length W is measured against (seconds)."""
    return int(min(MAX_BASELINE_S, max(MIN_BASELINE_S, BASELINE_WINDOWS * W)))


@dataclass
class Scores:
    """Per metric, per window index, per (host, unit): ``score`` (oriented: higher is worse; only
    where the unit has a baseline), ``level`` (a counter's mean rate per second over the window, a
    gauge's mean) and ``rule`` (what a rule reads: the highest minute rate of a counter, the highest
    minute value of a gauge — the lowest for one whose bad direction is down)."""
    score: dict[str, dict[int, dict[tuple[str, str], float]]]
    level: dict[str, dict[int, dict[tuple[str, str], float]]]
    rule: dict[str, dict[int, dict[tuple[str, str], float]]]


def _grid(bounds: list[tuple[str, int]], hosts: list[str], lo_s: int, hi_s: int) -> dict:
    """The look-up parameters of ``_SEGMENTS``: per (host, cell) from lo_s to hi_s, the host's last
    boundary before the cell (0: none) and its boundaries inside it, padded with a sentinel; the
    cell is the largest of GRID_CELLS_S that no cell overflows."""
    per_host: dict[str, list[int]] = {}
    for h, b in bounds:
        per_host.setdefault(h, []).append(b)
    arrs = [np.asarray(sorted(per_host.get(h, [])), dtype=np.int64) for h in hosts]
    for size in GRID_CELLS_S:
        cell0, n_cells = lo_s // size, hi_s // size - lo_s // size + 1
        edges = (cell0 + np.arange(n_cells + 1, dtype=np.int64)) * size
        table = np.full((CELL_BOUNDS + 1, len(hosts), n_cells), _NEVER, dtype=np.int64)
        table[0] = 0
        ok = True
        for k, arr in enumerate(arrs):
            cut = np.searchsorted(arr, edges, "left")  # boundaries before each cell edge
            i, j = cut[:-1], cut[1:]
            if np.any(j - i > CELL_BOUNDS):
                ok = False
                break
            table[0, k] = np.where(i > 0, arr[np.maximum(i - 1, 0)] if len(arr) else 0, 0)
            for slot in range(CELL_BOUNDS):
                has = i + slot < j
                table[slot + 1, k, has] = arr[(i + slot)[has]]
        if ok:
            out = {"host_idx": list(range(len(hosts))), "cell0": int(cell0), "n_cells": int(n_cells), "grid_s": size}
            out.update({f"a{slot}": table[slot].ravel().tolist() for slot in range(CELL_BOUNDS + 1)})
            return out
    raise ValueError("window boundaries closer than a minute apart")


def _range(ufunc, x: np.ndarray, i0: np.ndarray, i1: np.ndarray) -> np.ndarray:
    """ufunc-reduce of x[i0:i1] for each pair (NaN where the range is empty)."""
    if not len(x):
        return np.full(len(i0), np.nan)
    idx = np.empty(2 * len(i0), dtype=np.int64)
    idx[0::2], idx[1::2] = np.minimum(i0, len(x) - 1), np.minimum(i1, len(x))
    got = ufunc.reduceat(np.append(x, np.nan), idx)[0::2]
    return np.where(i1 > i0, got, np.nan)


def _cum(x: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(x, dtype=float)))


def _baseline_starts(starts: np.ndarray, W: int, B: int, t0s: np.ndarray | None) -> np.ndarray:
    """Where the baseline of each window starting at ``starts`` begins: B before it, but no earlier
    than one window after the host's last interruption before it (``t0s``, sorted)."""
    b0 = starts - B
    if t0s is not None and len(t0s):
        k = np.searchsorted(t0s, starts, side="left") - 1
        # the host's recovery from its last interruption is no baseline
        b0 = np.where(k >= 0, np.maximum(b0, np.asarray(t0s, dtype=np.int64)[np.maximum(k, 0)] + W), b0)
    return np.minimum(b0, starts - 59)


def window_scores(cluster: str, spans, metrics: list[str], *, baseline_s: int | None = None,
                  host_t0s: dict[str, np.ndarray] | None = None, progress=None,
                  timeout_s: int = QUERY_TIMEOUT_S) -> Scores:
    """Every unit's score and raw value in each of ``spans`` (objects with hosts, start, end; all
    of one length W) for each of ``metrics``: a few engine queries, ``METRICS_PER_QUERY`` metrics
    each. ``host_t0s`` (each host's sorted interruption times): a baseline starts no earlier than
    one window after the host's last interruption before the window (a dead job's idle fans, a
    reboot's reset counters are no baseline)."""
    out = Scores({m: {} for m in metrics}, {m: {} for m in metrics}, {m: {} for m in metrics})
    if not spans or not metrics:
        return out
    W = int(spans[0].end - spans[0].start)
    B = int(baseline_s or baseline_for(W))
    by_host: dict[str, list[tuple[int, int]]] = {}  # host -> [(window index, baseline start)]
    for i, w in enumerate(spans):
        for h in w.hosts:
            b0 = int(_baseline_starts(np.array([w.start], dtype=np.int64), W, B, (host_t0s or {}).get(h))[0])
            by_host.setdefault(h, []).append((i, b0))
    bounds = sorted({(h, int(b)) for h, wins in by_host.items() for i, b0 in wins
                     for b in (b0, spans[i].start - 59, spans[i].start, spans[i].end - 59)})
    starts = np.array([w.start for w in spans], dtype=np.int64)
    ends = np.array([w.end for w in spans], dtype=np.int64)
    lo_s = int(min(b for _, b in bounds) - 60)
    hi_s = int(ends.max())
    win_idx = {h: (np.array([i for i, _ in v], dtype=np.int64), np.array([b for _, b in v], dtype=np.int64))
               for h, v in by_host.items()}
    slices = _host_slices(bounds, sorted(by_host), lo_s, hi_s)
    for c in range(0, len(metrics), METRICS_PER_QUERY):
        batch = metrics[c:c + METRICS_PER_QUERY]
        if progress:
            progress(c, len(metrics), f"scores: metrics {c + 1}-{c + len(batch)} of {len(metrics)}")
        counters = [m for m in batch if catalog.get(m).is_counter]
        for hosts, grid in slices:
            table = store.query_arrow(_UNITS, {"cluster": cluster, "metrics": batch, "counters": counters,
                                               "hosts": hosts, "lo_s": lo_s,
                                               "hi_s": hi_s, **grid},
                                      tag="scores:window_scores", timeout_s=timeout_s)
            if table.num_rows:
                _reduce(table, win_idx, starts, ends, out)
    return out


def _host_slices(bounds: list[tuple[str, int]], hosts: list[str], lo_s: int, hi_s: int) -> list[tuple[list[str], dict]]:
    """The hosts in slices whose look-up arrays (hosts x cells each) stay within ``MAX_LOOKUP``
    entries — the engine refuses an array parameter of more than a million — each with its own
    grid: one slice for a small fleet, more where many hosts, a long range or closely spaced
    windows (a fine grid) would overflow it."""
    grid = _grid(bounds, hosts, lo_s, hi_s)
    if len(hosts) * grid["n_cells"] <= MAX_LOOKUP:
        return [(hosts, grid)]
    per = max(1, MAX_LOOKUP // grid["n_cells"])
    out = []
    for c in range(0, len(hosts), per):
        part = hosts[c:c + per]
        keep = set(part)
        g = _grid([(h, b) for h, b in bounds if h in keep], part, lo_s, hi_s)
        if len(part) * g["n_cells"] > MAX_LOOKUP:
            raise ValueError(f"the windows span {g['n_cells']:,} cells of {g['grid_s']} s on one host, more than the "
                             f"engine takes in one query ({MAX_LOOKUP:,}): scan a shorter range")
        out.append((part, g))
    return out


def _statistic(is_counter: bool, n, nv, sv, sv2, inc, i0, i1, j0, j1):
    """The score (not yet oriented) of each window — segments [i0, i1) of a unit's rows —
    against its baseline — segments [j0, j1) — as the module docstring defines it; also the
    window's amount (a counter's increase, a gauge's mean) and the minutes of window and baseline."""
    if is_counter:
        N, I = _cum(n), _cum(inc)
        nw, nb = N[i1] - N[i0], N[j1] - N[j0]
        k, kb = I[i1] - I[i0], I[j1] - I[j0]
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = kb * nw / nb
            score = np.log((k + 1.0) / (lam + 1.0))
        return score, k, nw, nb
    NV, S, S2 = _cum(nv), _cum(sv), _cum(sv2)
    nw, nb = NV[i1] - NV[i0], NV[j1] - NV[j0]
    with np.errstate(divide="ignore", invalid="ignore"):
        mw = (S[i1] - S[i0]) / nw
        mb = (S[j1] - S[j0]) / nb
        var = np.maximum((S2[j1] - S2[j0]) / nb - mb * mb, 0.0)
        score = (mw - mb) / (np.sqrt(var) + 1e-6 * np.maximum(np.abs(mb), 1.0))
    return score, mw, nw, nb


def _scored(score, nw, nb):
    """Where a window has a score: data in it, a baseline of at least half its minutes."""
    return (nw > 0) & (nb * 2 >= np.maximum(nw, 1)) & np.isfinite(score)


def _reduce(table, win_idx, starts, ends, out: Scores) -> None:
    metric_col = table.column(0).to_pandas().astype(str).to_numpy()
    host_col = table.column(1).to_pandas().astype(str).to_numpy()
    unit_col = table.column(2).to_pandas().astype(str).to_numpy()
    seg = table.column(3).to_numpy().astype(np.int64)
    n = table.column(4).to_numpy().astype(float)
    nv = table.column(5).to_numpy().astype(float)
    sv = table.column(6).to_numpy().astype(float)
    sv2 = table.column(7).to_numpy().astype(float)
    inc = table.column(8).to_numpy().astype(float)
    rate = table.column(9).to_numpy().astype(float)
    vhi = table.column(10).to_numpy().astype(float)
    vlo = table.column(11).to_numpy().astype(float)
    key = np.char.add(np.char.add(metric_col.astype(str), "\x00"),
                      np.char.add(np.char.add(host_col.astype(str), "\x00"), unit_col.astype(str)))
    cuts = np.flatnonzero(key[1:] != key[:-1]) + 1
    edges = np.concatenate(([0], cuts, [len(key)]))
    info: dict[str, tuple[bool, float]] = {}
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        metric, host, unit = metric_col[a], host_col[a], unit_col[a]
        found = win_idx.get(host)
        if found is None:
            continue
        wins, b0 = found
        if metric not in info:
            m = catalog.get(metric)
            info[metric] = (m.is_counter, -1.0 if m.bad == "down" else 1.0)
        is_counter, sign = info[metric]
        segs = seg[a:b]
        s, e = starts[wins], ends[wins]
        i0 = np.searchsorted(segs, s, "left")
        i1 = np.searchsorted(segs, e - 59, "left")
        j0 = np.searchsorted(segs, b0, "left")
        j1 = np.searchsorted(segs, s - 59, "left")
        score, amount, nw, nb = _statistic(is_counter, n[a:b], nv[a:b], sv[a:b], sv2[a:b], inc[a:b],
                                           i0, i1, j0, j1)
        level = amount / (e - s) if is_counter else amount
        # what a rule on the metric reads in the window: the highest minute rate (counters), the
        # highest minute value (the lowest for a metric whose bad direction is down)
        if is_counter:
            rule = _range(np.maximum, rate[a:b], i0, i1)
        elif sign < 0:
            rule = _range(np.minimum, vlo[a:b], i0, i1)
        else:
            rule = _range(np.maximum, vhi[a:b], i0, i1)
        seen = (nw > 0) & np.isfinite(level)
        ok = seen & _scored(score, nw, nb)
        sc_m, lv_m, rule_m = out.score[metric], out.level[metric], out.rule[metric]
        key = (host, unit)
        for wi, has, good, sc, lv, rv in zip(wins.tolist(), seen.tolist(), ok.tolist(), (sign * score).tolist(),
                                             level.tolist(), rule.tolist()):
            if has:
                lv_m.setdefault(wi, {})[key] = lv
                rule_m.setdefault(wi, {})[key] = rv
            if good:
                sc_m.setdefault(wi, {})[key] = sc


def rolling_fires(cluster: str, metric: str, W: int, operator: str, threshold: float, lo_s: int, hi_s: int,
                  hosts: list[str], *, host_t0s: dict[str, np.ndarray] | None = None,
                  timeout_s: int = QUERY_TIMEOUT_S) -> dict[tuple[str, str], np.ndarray]:
    """Where a rule on the score fires (the fleet test's ``rise`` condition): per (host, unit),
    the sorted times (seconds) at which the unit's score — the statistic above, oriented, with
    the same baseline — of the window of length W ending with a minute passes ``threshold``
    (``operator`` > or <). Each minute of data ends one window [e − W, e); the firing is timed at
    that minute's last sample (the data that raised it), so an alarm never starts before it. A
    window with one of its host's interruptions inside (``host_t0s``) has no score: it mixes the
    part before the failure with its teardown (and the next windows' baselines start one window
    after the interruption, as above)."""
    B = baseline_for(W)
    m = catalog.get(metric)
    sign = -1.0 if m.bad == "down" else 1.0
    out: dict[tuple[str, str], np.ndarray] = {}
    hosts = sorted(hosts)
    for c in range(0, len(hosts), HOSTS_PER_ROLLING_QUERY):  # a few hosts at a time: bounded memory
        table = store.query_arrow(_UNIT_MINUTES, {"cluster": cluster, "metrics": [metric],
                                                  "counters": [metric] if m.is_counter else [],
                                                  "hosts": hosts[c:c + HOSTS_PER_ROLLING_QUERY],
                                                  "lo_s": int(lo_s - B - W), "hi_s": int(hi_s), "grid_s": 60},
                                  tag="scores:rolling_fires", timeout_s=timeout_s)
        _rolling_hits(table, m.is_counter, sign, W, B, operator, threshold, lo_s, hi_s, host_t0s, out)
    return out


def _rolling_hits(table, is_counter: bool, sign: float, W: int, B: int, operator: str, threshold: float,
                  lo_s: int, hi_s: int, host_t0s, out: dict) -> None:
    """Add to ``out`` each (host, unit)'s firing times in one ``_UNIT_MINUTES`` result."""
    if not table.num_rows:
        return
    cols = [table.column(i) for i in range(13)]
    host_col = cols[1].to_pandas().astype(str).to_numpy()
    unit_col = cols[2].to_pandas().astype(str).to_numpy()
    seg = cols[3].to_numpy().astype(np.int64)
    n, nv, sv, sv2, inc = (cols[i].to_numpy().astype(float) for i in (4, 5, 6, 7, 8))
    last_c = cols[12].to_numpy().astype(float)
    change = np.flatnonzero((host_col[1:] != host_col[:-1]) | (unit_col[1:] != unit_col[:-1])) + 1
    for a, b in zip(np.r_[0, change].tolist(), np.r_[change, len(seg)].tolist()):
        host, segs = str(host_col[a]), seg[a:b]
        e = segs + 60
        starts = e - W
        i0 = np.searchsorted(segs, starts, "left")
        i1 = np.arange(1, len(segs) + 1)
        t0s = (host_t0s or {}).get(host)
        j0 = np.searchsorted(segs, _baseline_starts(starts, W, B, t0s), "left")
        j1 = np.searchsorted(segs, starts - 59, "left")
        score, _, nw, nb = _statistic(is_counter, n[a:b], nv[a:b], sv[a:b], sv2[a:b], inc[a:b], i0, i1, j0, j1)
        score = sign * score
        with np.errstate(invalid="ignore"):
            hit = _scored(score, nw, nb) & ((score > threshold) if operator == ">" else (score < threshold))
        hit &= (segs >= lo_s) & (e <= hi_s)
        if t0s is not None and len(t0s):  # no window across an interruption of the host
            hit &= np.searchsorted(t0s, e, "left") == np.searchsorted(t0s, starts, "right")
        if hit.any():
            out[(host, str(unit_col[a]))] = np.sort(last_c[a:b][hit])

