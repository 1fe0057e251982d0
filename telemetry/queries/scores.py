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
[t, t + 60) with s <= t and t + 60 <= e, so nothing at or after t0 enters) against its own past,
two baselines of it (earlier history only, never the window itself; the same rule for minutes):

- the **recent past**: the ``baseline_s`` before the window, [s − baseline_s, s) (by default four
  lead windows, at least 6 h, at most 3 days);
- the **earlier past**: up to ``EARLIER_BASELINE_S`` (3 days) of history before that, ending where
  the recent past starts. A precursor that builds up over a day or two — a DRAM trickle slowly
  rising before row remaps and an XID 94 — is in the recent past already (the last hours look
  only a few times worse than the day before them), not in the earlier one.

Against each past:

- **counters** (error counts, bytes, nanoseconds): k = the unit's reset-aware increase in the
  window (summed over its series), λ = the increase the past's rate predicts for a window of
  that length (the past's increase × window minutes / its minutes). score = ln((k + 1) / (λ + 1)):
  0 for a part that goes on as before however noisy it always was; ln 21 ≈ 3 for a quiet part
  that logs 20 errors; a trickling part must multiply its own rate to score as high;
- **gauges** (temperatures, power, clocks, flags): the window's mean against the past's mean,
  in the past's standard deviations (a floor of 1e-6 × the mean's size keeps a constant gauge —
  a link width, a status flag — finite: any change of one scores very high).
Scores are oriented in the catalog's bad direction (higher = worse; for ``up`` and ``none`` as
they are, negated for ``down``), and the window's score is the one against the past it departs
from most in that direction (for a counter: λ the lower of the two predictions; for a metric
without a bad direction, the larger departure either way). A part noisy for weeks is as noisy in
both pasts and still scores about 0. Every window — before an outcome and in its controls — is
scored the same way, so a threshold set on the controls' scores (the pin rule) stays calibrated.
A past with fewer than half a window's minutes does not count; a unit with neither has no score
in that window (NaN). A past starts no earlier than one window after the host's last interruption
before it: the teardown and reboot after a failure (fans idling, counters reset) are no baseline of
anything. Neither past reaches back across that interruption: where it cut the recent past short,
there is no earlier past (the history before it is another job's workload: on the 96-host bench
fleet, InfiniBand and NVLink byte counters scored that way ran higher before NODE_FAIL than in the
controls, AUC 0.58-0.63, and 0.55-0.56 once the earlier past stopped at the interruption); the earlier past, too, starts no earlier than one window after the interruption
before it.

Besides the score, each unit's raw value in the window (the counter's mean rate per second over
the window, the gauge's mean) is kept: the pin rule sets its threshold in the metric's own unit.

How it runs
-----------
In the engine, for a batch of metrics at once: the rollup rows of the windows' hosts are cut at
every window's boundaries (s, e − 59, and each past's start and end − 59: an ASOF join of each row
to its host's last boundary at or before it; the boundaries are a few per window and host), and summed
per (metric, host, unit, segment) — minute count, sum and sum of squares of the minute means, and
the counter's increase inside the segment plus the step from the previous segment. Python then
adds segments up with prefix sums per unit (each unit's own, so the same numbers however the rows
were batched), so every window and baseline costs two look-ups, however many windows overlap.

Memory does not grow with the fleet: a query reads at most about ``ROWS_PER_QUERY`` rollup rows
(metrics batched by the rows each has in the range, a heavy metric read in host slices), and the
scan is handed one metric's per-window values at a time (``iter_window_scores``), so it holds a
batch's window values and one metric's dicts, never every metric's. The engine reads the next
query's rows on a reader thread of its own while this thread reduces the last result and the scan
works on its metrics (the engine lets go of the GIL, so the two cores overlap): the same queries,
reduced in the same order, so the same values (the XID 94/95 scan of the 48-host bench fleet on a
slow 2-core machine: 64-72 s in five runs, 70-83 s without the reader thread, about 12 % less).
(The engine's float sums depend on the order its threads add rows in, so a score can differ in its
last bits from run to run; on a constant gauge, scored in units of a near-zero spread, that shows.)

A rule on the score (the fleet test's ``rise`` condition, ``rolling_fires``) reads the same
statistic for the window ending with every minute: the same query with every minute its own
segment, the same pasts and prefix sums, so a rule fires on a part exactly where the scan would
score it high (up to a past's first minute: the scan's segments leave out the step into it).
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from telemetry import catalog, store
from telemetry.queries import windows

QUERY_TIMEOUT_S = 600
METRICS_PER_QUERY = 24
ROWS_PER_QUERY = 4_000_000  # rollup rows an engine query of the scores reads, about (bounds its memory)
MAX_LOOKUP = 500_000  # window boundaries per query (a few MB of boundary lists; bounds each query's look-up)
HOSTS_PER_ROLLING_QUERY = 8  # rolling_fires: a row per (host, unit, minute) comes back
MIN_BASELINE_S = 6 * 3600
MAX_BASELINE_S = 3 * 86400
BASELINE_WINDOWS = 4
GAP_MARGIN_S = 3600  # rows read before a baseline that follows time no window covers (``_bounds``)
EARLIER_BASELINE_S = 3 * 86400  # the earlier past: up to this long, ending where the recent baseline starts

# The rollup's rows as they are, no merge: a minute split over two unmerged parts counts as two
# (a mean of means, a counter's first/last/highest are the same either way).
_ROWS = ("SELECT metric, host, component, toInt64(toUnixTimestamp(ts)) AS t, "
         "sum / count AS v, max AS hi, min AS lo, toUnixTimestamp64Milli(max_ts) / 1000.0 AS c, "
         "metric IN {counters:Array(String)} AS is_counter FROM samples_1m "
         "WHERE cluster = {cluster:String} AND metric IN {metrics:Array(String)} AND host IN {hosts:Array(String)} "
         "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND count > 0 "
         "AND isFinite(v) AND isFinite(hi) AND isFinite(lo)")

# Each row's segment: the last boundary of its host at or before it (an ASOF join against the
# boundaries, which go in as three comma-separated lists (``bounds_params``): the host's position in
# ``hosts``, from 1 (``hid``), the boundary, and how its segment is read (``keep``: 0 not at all — a
# stretch no window or baseline covers begins; 2 inside a window: a counter's minute rates too, what a rule reads; 1 otherwise,
# see ``_bounds``); 0 where a row comes before all its host's boundaries). The boundaries are few (four
# per window and host), so what a query costs grows with the rows it reads, not with the range or
# the fleet (a look-up table per host and time cell cost ~4 µs per entry to bind, in every query).
# Each row's metric and host as numbers, their positions in ``metrics`` and ``hosts`` (from 1): the
# segments are grouped by them (grouping millions of rows by three strings cost a third more).
_IDS = ("toUInt32(transform(metric, {metrics:Array(String)}, arrayEnumerate({metrics:Array(String)}), 0)) AS mid, "
        "toUInt32(transform(host, {hosts:Array(String)}, arrayEnumerate({hosts:Array(String)}), 0)) AS hid")

_ROWS_BY_BOUNDS = (
    "SELECT r.mid AS mid, r.hid AS hid, r.component AS component, r.t AS t, r.v AS v, r.hi AS hi, "
    " r.lo AS lo, r.c AS c, r.is_counter AND b.keep = 2 AS rated, b.seg AS seg "
    f"FROM (SELECT *, {_IDS} FROM ({_ROWS})) AS r "
    "ASOF LEFT JOIN (SELECT hid, seg, keep FROM (SELECT 1) "
    "                ARRAY JOIN arrayMap(x -> toUInt32(x), splitByChar(',', {b_host:String})) AS hid, "
    "                           arrayMap(x -> toInt64(x), splitByChar(',', {b_t:String})) AS seg, "
    "                           arrayMap(x -> toUInt8(x), splitByChar(',', {b_keep:String})) AS keep) AS b "
    "ON r.hid = b.hid AND r.t >= b.seg WHERE b.keep > 0")


def _segments_sql(rows: str, kind: str = "mixed") -> str:
    """Per (metric, host, component, segment) sums of the rollup rows ``rows`` (with each row's
    metric and host as ``mid`` and ``hid`` (``_IDS``); its segment ``seg``: its last boundary;
    ``t``: every minute its own; ``rated``: a counter's row whose minute rates are wanted).
    ``kind``: "counter" or "gauge" where every metric read is one (``_kind``): only what that kind
    is scored on is summed (the other's columns are 0) — the values are the same, and a gauge's
    query skips the counter's first and last values and minute rates, a counter's the sums of
    squares (with ``bounds_params``: the 96-host bench fleet's XID 74/79 scan ~8 % faster, the two
    versions alternating three times)."""
    gauge = kind != "counter"
    counter = kind != "gauge"
    return (
    "SELECT {metrics:Array(String)}[mid] AS metric, {hosts:Array(String)}[hid] AS host, component, seg, "
    " count() AS n, "
    + (" sum(v) AS sv, sum(v * v) AS sv2, min(lo) AS min_lo, " if gauge else " 0. AS sv, 0. AS sv2, 0. AS min_lo, ")
    + " max(hi) AS max_hi, "
    + (" argMin(hi, t) AS first_hi, argMax(hi, t) AS last_hi, argMin(c, t) AS first_c, argMax(c, t) AS last_c, "
       # (three plain arrays zipped and sorted, then split: an array of tuples collected row by row,
       # and its tuples read inside the pairs' lambda, cost a third of a counter query's time)
       " arraySort(arrayZip(groupArrayIf(t, rated), groupArrayIf(hi, rated), groupArrayIf(c, rated))) AS xs, "
       " arrayMap(x -> x.2, xs) AS xh, arrayMap(x -> x.3, xs) AS xc, "
       " arrayMax(arrayPushBack(arrayMap((h0, h1, c0, c1) -> if(c1 > c0 AND h1 >= h0, (h1 - h0) / (c1 - c0), 0.), "
       "   arrayPopBack(xh), arrayPopFront(xh), arrayPopBack(xc), arrayPopFront(xc)), 0.)) AS rate_in "
       if counter else " max(c) AS last_c ")
    + f"FROM ({rows}) WHERE seg > 0 GROUP BY mid, hid, component, seg")

# The counter's increase in a segment: last − first when it only grew; across one reset (a reboot
# starts it again from 0) the climb to the highest value plus the climb after the reset. The step
# from the previous segment's last value to this one's first belongs to this segment (a drop: a
# reset, nothing counted). Also each segment's highest per-second rate between consecutive minutes
# (counters, from minute max to minute max over their last samples' times, as the fleet test's
# ``rate`` condition reads them) and its highest and lowest minute value (gauges).
def _units_sql(segments: str, kind: str = "mixed") -> str:
    """Per (metric, host, unit, segment): minutes, sums, the counter's increase, the highest rate,
    the highest and lowest value, and the last sample's time (seconds). ``kind`` "gauge" (every
    metric a gauge, ``_segments_sql``): no increase or rate (0), so no step from the previous
    segment either."""
    if kind == "gauge":
        inner = f"SELECT metric, host, component, seg, n, sv, sv2, max_hi, min_lo, last_c, 0. AS inc, 0. AS rate FROM ({segments})"
    else:
        inner = (
        "  SELECT metric, host, component, seg, n, sv, sv2, max_hi, min_lo, last_c, "
        "   if(last_hi >= first_hi AND last_hi = max_hi, last_hi - first_hi, max_hi - first_hi + last_hi) "
        "   + if(rn > 1 AND first_hi >= prev_last, first_hi - prev_last, 0) AS inc, "
        "   greatest(rate_in, if(rn > 1 AND first_hi >= prev_last AND first_c > prev_c, "
        "                        (first_hi - prev_last) / (first_c - prev_c), 0.)) AS rate "
        # (the columns named: ``*`` would carry each segment's array of counter rows through the window's sort)
        "  FROM (SELECT metric, host, component, seg, n, sv, sv2, first_hi, last_hi, max_hi, min_lo, first_c, last_c, "
        "        rate_in, lagInFrame(last_hi) OVER w AS prev_last, lagInFrame(last_c) OVER w AS prev_c, "
        "        row_number() OVER w AS rn "
        f"        FROM ({segments}) WINDOW w AS (PARTITION BY metric, host, component ORDER BY seg "
        "        ROWS BETWEEN 1 PRECEDING AND CURRENT ROW))")
    return (
    "SELECT metric, host, splitByChar('/', component)[1] AS unit, seg, max(n) AS u_n, sum(n) AS u_nv, sum(sv) AS u_sv, "
    " sum(sv2) AS u_sv2, sum(inc) AS u_inc, max(rate) AS u_rate, max(max_hi) AS u_hi, min(min_lo) AS u_lo, "
    f" max(last_c) AS u_c FROM ({inner}) "
    "GROUP BY metric, host, unit, seg ORDER BY metric, host, unit, seg")


KINDS = ("mixed", "counter", "gauge")
_UNITS = {k: _units_sql(_segments_sql(_ROWS_BY_BOUNDS, k), k) for k in KINDS}
# Every minute its own segment: the rolling scores of a rule (``rolling_fires``).
_UNIT_MINUTES = {k: _units_sql(_segments_sql(
    f"SELECT component, t, v, hi, lo, c, t AS seg, is_counter AS rated, {_IDS} FROM ({_ROWS})", k), k) for k in KINDS}


def _kind(metrics: list[str], counters: list[str]) -> str:
    """"counter" or "gauge" where every one of ``metrics`` is one, else "mixed" (``_segments_sql``)."""
    return "counter" if len(counters) == len(metrics) else "gauge" if not counters else "mixed"


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


def _pasts(starts: np.ndarray, W: int, B: int, t0s: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each window's baselines (module docstring), as (start, end) arrays, start = end where a
    window has none: the recent past [b0, start) (``_baseline_starts``) and the earlier past, up
    to ``EARLIER_BASELINE_S`` long, that ends where the recent one starts (start − B) and starts
    no earlier than one window after the host's last interruption before that; none where the
    host's last interruption cut the recent past short (the history before it is another job's)."""
    starts = np.asarray(starts, dtype=np.int64)
    b0 = _baseline_starts(starts, W, B, t0s)
    f1 = starts - B
    f0 = np.minimum(_baseline_starts(f1, W, EARLIER_BASELINE_S, t0s), f1)
    if t0s is not None and len(t0s):
        t0s = np.asarray(t0s, dtype=np.int64)
        k = np.searchsorted(t0s, starts, side="left") - 1
        last = t0s[np.maximum(k, 0)]
        f0 = np.where((k >= 0) & (last + W > starts - B), f1, f0)  # no earlier past across an interruption
    return [(b0, starts), (f0, f1)]


def window_scores(cluster: str, spans, metrics: list[str], *, baseline_s: int | None = None,
                  host_t0s: dict[str, np.ndarray] | None = None, progress=None,
                  timeout_s: int = QUERY_TIMEOUT_S) -> Scores:
    """Every unit's score and raw value in each of ``spans`` (objects with hosts, start, end; all
    of one length W) for each of ``metrics``, all held at once (``iter_window_scores`` gives them
    one metric at a time). ``host_t0s`` (each host's sorted interruption times): a baseline starts
    no earlier than one window after the host's last interruption before the window (a dead job's
    idle fans, a reboot's reset counters are no baseline)."""
    out = Scores({}, {}, {})
    for metric, score, level, rule in iter_window_scores(cluster, spans, metrics, baseline_s=baseline_s,
                                                         host_t0s=host_t0s, progress=progress, timeout_s=timeout_s):
        out.score[metric], out.level[metric], out.rule[metric] = score, level, rule
    return out


def iter_window_scores(cluster: str, spans, metrics: list[str], *, baseline_s: int | None = None,
                       host_t0s: dict[str, np.ndarray] | None = None, progress=None,
                       timeout_s: int = QUERY_TIMEOUT_S):
    """``(metric, score, level, rule)`` for each of ``metrics`` in turn, each a dict per window
    index of (host, unit) -> value as ``Scores`` holds them. Memory stays bounded whatever the
    fleet: an engine query reads at most about ``ROWS_PER_QUERY`` rollup rows (a batch of metrics
    on a slice of hosts, sized by the rows each metric has on each host), and only the batch's
    per-window values are held (compactly) until its metrics are handed out, one at a time."""
    if not spans or not metrics:
        for metric in metrics:
            yield metric, {}, {}, {}
        return
    W = int(spans[0].end - spans[0].start)
    B = int(baseline_s or baseline_for(W))
    by_host: dict[str, list[tuple[int, ...]]] = {}  # host -> [(window index, each past's start, end, ...)]
    for i, w in enumerate(spans):
        for h in w.hosts:
            pasts = _pasts(np.array([w.start], dtype=np.int64), W, B, (host_t0s or {}).get(h))
            by_host.setdefault(h, []).append((i, *(int(x[0]) for past in pasts for x in past)))
    bounds = _bounds(by_host, spans)
    starts = np.array([w.start for w in spans], dtype=np.int64)
    ends = np.array([w.end for w in spans], dtype=np.int64)
    lo_s = int(min(b for _, b, _ in bounds) - 60)
    hi_s = int(ends.max())
    # host -> (its windows' indices, their pasts' starts and ends: one row each)
    win_idx = {h: (np.array([x[0] for x in v], dtype=np.int64), np.array([x[1:] for x in v], dtype=np.int64).T)
               for h, v in by_host.items()}
    hosts = sorted(by_host)
    rows = _row_counts(cluster, metrics, hosts, lo_s, hi_s, timeout_s=timeout_s)
    batches = _metric_batches(metrics, rows)

    def queries():  # (batch index, the query's parameters), in order, made as they are read
        for b, batch in enumerate(batches):
            counters = [m for m in batch if catalog.get(m).is_counter]
            wanted = set(batch)
            for part, params in _host_slices(bounds, [h for h in hosts if any(rows.get((m, h)) for m in batch)],
                                             {k: n for k, n in rows.items() if k[0] in wanted}):
                yield b, {"cluster": cluster, "metrics": batch, "counters": counters,
                          "hosts": part, "lo_s": lo_s, "hi_s": hi_s, **params}

    def read(params):
        return store.query_arrow(_UNITS[_kind(params["metrics"], params["counters"])], params,
                                 tag="scores:window_scores", timeout_s=timeout_s)

    # The engine reads the next query's rows (on the reader thread; the engine lets go of the GIL)
    # while this thread reduces the last one's and the caller works on its metrics: one query
    # ahead, so at most two results are held. The same queries, reduced in the same order.
    pending = _Ahead(queries(), read)
    done = 0
    try:
        for b, batch in enumerate(batches):
            if progress:
                which = f"metric {done + 1}" if len(batch) == 1 else f"metrics {done + 1}-{done + len(batch)}"
                progress(done, len(metrics), f"scores: {which} of {len(metrics)}")
            got: dict[str, list] = {m: [] for m in batch}
            while pending.next_batch() == b:
                table = pending.take()
                if table.num_rows:
                    _reduce(table, win_idx, starts, ends, got)
                del table
            for metric in batch:
                yield (metric, *_as_dicts(got.pop(metric)))
            done += len(batch)
    finally:
        pending.close()


_reader: ThreadPoolExecutor | None = None
_reader_guard = threading.Lock()


def _reader_pool() -> ThreadPoolExecutor:
    # one long-lived thread: it keeps its store client between scans
    global _reader
    with _reader_guard:
        if _reader is None:
            _reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scores-read")
        return _reader


class _Ahead:
    """The results of ``read`` over ``items`` ((key, argument) pairs), in order: taking one starts
    reading the next (on ``_reader_pool``'s thread), so at most two results are held at once; a
    failed read raises from ``take``."""

    def __init__(self, items, read) -> None:
        self._items = iter(items)
        self._read = read
        self._queue: deque = deque()  # (key, future)
        self._fill()

    def _fill(self) -> None:
        item = next(self._items, None) if not self._queue else None
        if item is not None:
            self._queue.append((item[0], _reader_pool().submit(self._read, item[1])))

    def next_batch(self):
        """The key of the next result (None when every item is taken)."""
        return self._queue[0][0] if self._queue else None

    def take(self):
        _, future = self._queue.popleft()
        try:
            return future.result()
        finally:
            self._fill()

    def close(self) -> None:
        """Wait for reads still running (a caller that stops early, or an error): nothing is
        left reading the store behind it."""
        while self._queue:
            _, future = self._queue.popleft()
            if not future.cancel():
                try:
                    future.result()
                except Exception:  # noqa: BLE001 - the caller already stopped (or is raising its own error)
                    pass


def _bounds(by_host: dict[str, list[tuple[int, ...]]], spans) -> list[tuple[str, int, int]]:
    """Each host's segment boundaries, sorted, as (host, boundary, keep): every window's s and
    e − 59, and each of its pasts' start and end − 59 (``by_host``: (window index, each past's start,
    end, ...); a past with start = end is none) (keep 2 where the segment lies in a window, [s, e − 59): its
    counters' highest minute rate is what a rule reads — a baseline needs none, and those rates
    cost a quarter of the query; else 1), and where the host's time is no window's or baseline's
    the rows are not summed: a boundary with keep 0 at the end of each stretch of overlapping
    [earliest past's start, end) intervals, and one with keep 1 ``GAP_MARGIN_S`` before the next stretch
    begins — a counter's step into the baseline comes from its last row before it, which is in
    that margin (a series silent for the margin before a baseline that is not its host's first
    takes the step from its last row before the previous stretch's end instead). Segments a window
    or baseline sums are the same either way: the extra boundaries fall where no window sums."""
    out = []
    for h, wins in by_host.items():
        cuts: set[int] = set()
        spans_h = []
        for i, *ab in wins:
            pasts = [(int(a), int(b)) for a, b in zip(ab[0::2], ab[1::2]) if a < b]
            cuts.update((int(spans[i].start), int(spans[i].end) - 59))
            cuts.update(x for a, b in pasts for x in (a, b - 59))
            spans_h.append((min([a for a, _ in pasts] + [int(spans[i].start)]), int(spans[i].end)))
        stretches: list[list[int]] = []
        for b0, e in sorted(spans_h):
            if stretches and b0 - GAP_MARGIN_S <= stretches[-1][1]:
                stretches[-1][1] = max(stretches[-1][1], e)
            else:
                stretches.append([b0, e])
        inside = sorted((int(spans[i].start), int(spans[i].end) - 59) for i, *_ in wins)
        marks = {b: 2 if any(s <= b < e for s, e in inside) else 1 for b in cuts}
        for k, (a, e) in enumerate(stretches):
            marks[e] = 0  # no window's segment starts at or after e before the next stretch
            if k:  # the host's first stretch: rows before its first boundary are not read (as ever)
                marks[a - GAP_MARGIN_S] = 1
        out += [(h, b, keep) for b, keep in marks.items()]
    return sorted(out)


_ROW_COUNTS = ("SELECT metric, host, count() FROM samples_1m WHERE cluster = {cluster:String} "
               "AND metric IN {metrics:Array(String)} AND host IN {hosts:Array(String)} "
               "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) GROUP BY metric, host "
               # the rollup is ordered by (cluster, metric, host, ...): counted as it is read, 4 s -> 1 s
               # on the 48-host bench fleet's 124 M rows
               "SETTINGS optimize_aggregation_in_order = 1")


def _row_counts(cluster: str, metrics: list[str], hosts: list[str], lo_s: int, hi_s: int, *,
                timeout_s: int) -> dict[tuple[str, str], int]:
    """The rollup rows of each (metric, host) in [lo_s, hi_s): what sizes the queries."""
    got = store.query_rows(_ROW_COUNTS, {"cluster": cluster, "metrics": list(metrics), "hosts": list(hosts),
                                         "lo_s": lo_s, "hi_s": hi_s}, tag="scores:row_counts", timeout_s=timeout_s)
    return {(m, h): int(n) for m, h, n in got}


def _metric_batches(metrics: list[str], rows: dict[tuple[str, str], int]) -> list[list[str]]:
    """The metrics in order, in batches of at most ``METRICS_PER_QUERY`` with at most
    ``ROWS_PER_QUERY`` rows between them (a metric with more is a batch of its own, read in host
    slices), a batch of counters or of gauges only (its query sums only what they are scored on,
    ``_segments_sql``)."""
    total: dict[str, int] = {}
    for (m, _), n in rows.items():
        total[m] = total.get(m, 0) + n
    out: list[list[str]] = []
    batch: list[str] = []
    load = 0
    for m in metrics:
        need = total.get(m, 0)
        if batch and (len(batch) >= METRICS_PER_QUERY or load + need > ROWS_PER_QUERY
                      or catalog.get(m).is_counter != catalog.get(batch[0]).is_counter):
            out.append(batch)
            batch, load = [], 0
        batch.append(m)
        load += need
    if batch:
        out.append(batch)
    return out


def bounds_params(b_host: list[int], b_t: list[int], b_keep: list[int]) -> dict[str, str]:
    """The boundaries as ``_ROWS_BY_BOUNDS`` takes them: three comma-separated lists of whole
    numbers. (As typed arrays zipped and joined they cost the engine ~0.13 s a query for 15,000
    boundaries — binding the array literals and the zip's tuples — against ~0.03 s split from
    strings: about 14 s of a scan of the 96-host bench fleet's 113 queries.)"""
    return {"b_host": ",".join(map(str, b_host)), "b_t": ",".join(map(str, b_t)), "b_keep": ",".join(map(str, b_keep))}


def _host_slices(bounds: list[tuple[str, int, int]], hosts: list[str],
                 rows: dict[tuple[str, str], int] | None = None) -> list[tuple[list[str], dict]]:
    """The hosts in slices, each with its boundaries as the query takes them: a slice's rows
    (``rows``: per (metric, host), of the metrics read together) stay within ``ROWS_PER_QUERY`` —
    so a query's memory does not grow with the fleet — and its boundaries within ``MAX_LOOKUP``
    (the engine refuses an array parameter of more than a million). One slice for a small fleet."""
    per_host: dict[str, int] = {}
    for (_, h), n in (rows or {}).items():
        per_host[h] = per_host.get(h, 0) + n
    by: dict[str, list[tuple[int, int]]] = {h: [] for h in hosts}
    for h, b, keep in bounds:
        if h in by:
            by[h].append((b, keep))
    parts: list[list[str]] = []
    part: list[str] = []
    load = n_bounds = 0
    for h in hosts:
        if part and (load + per_host.get(h, 0) > ROWS_PER_QUERY or n_bounds + len(by[h]) > MAX_LOOKUP):
            parts.append(part)
            part, load, n_bounds = [], 0, 0
        part.append(h)
        load, n_bounds = load + per_host.get(h, 0), n_bounds + len(by[h])
    if part:
        parts.append(part)
    out = []
    for part in parts:
        b_host = [k + 1 for k, h in enumerate(part) for _ in by[h]]
        if len(b_host) > MAX_LOOKUP:
            raise ValueError(f"{len(b_host):,} window boundaries on one host, more than the engine takes in one "
                             f"query ({MAX_LOOKUP:,}): scan fewer windows")
        out.append((part, bounds_params(b_host, [b for h in part for b, _ in by[h]], [k for h in part for _, k in by[h]])))
    return out


def _statistic(is_counter: bool, n, nv, sv, sv2, inc, i0, i1, j0, j1):
    """The score (not yet oriented) of each window — segments [i0, i1) of a unit's rows —
    against its baseline — segments [j0, j1) — as the module docstring defines it; also the
    window's amount (a counter's increase, a gauge's mean) and the minutes of window and baseline."""
    if is_counter:
        return _counter_statistic(_cum(n), _cum(inc), i0, i1, j0, j1)
    return _gauge_statistic(_cum(nv), _cum(sv), _cum(sv2), i0, i1, j0, j1)


def _counter_statistic(N, I, i0, i1, j0, j1):
    nw, nb = N[i1] - N[i0], N[j1] - N[j0]
    k, kb = I[i1] - I[i0], I[j1] - I[j0]
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = kb * nw / nb
        score = np.log((k + 1.0) / (lam + 1.0))
    return score, k, nw, nb


def _gauge_statistic(NV, S, S2, i0, i1, j0, j1):
    nw, nb = NV[i1] - NV[i0], NV[j1] - NV[j0]
    with np.errstate(divide="ignore", invalid="ignore"):
        mw = (S[i1] - S[i0]) / nw
        mb = (S[j1] - S[j0]) / nb
        var = np.maximum((S2[j1] - S2[j0]) / nb - mb * mb, 0.0)
        score = (mw - mb) / (np.sqrt(var) + 1e-6 * np.maximum(np.abs(mb), 1.0))
    return score, mw, nw, nb


def _worse_of(sign, two_sided, scores_k: np.ndarray, scored_k: np.ndarray):
    """The window's score, oriented (higher is worse), from its scores against each past (rows
    of ``scores_k``, where ``scored_k``): the one it departs from most in the bad direction — for
    counters, against the lowest rate the pasts predict — (the largest departure either way for a
    metric without a bad direction); and where it has a score at all."""
    oriented = np.where(scored_k, sign * scores_k, np.nan)
    scored = scored_k.any(axis=0)
    if not scored.any():
        return np.full(scored.shape, np.nan), scored
    with np.errstate(invalid="ignore"):
        filled = np.where(scored_k, oriented, -np.inf)
        up = np.max(filled, axis=0)
        far = np.take_along_axis(oriented, np.argmax(np.where(scored_k, np.abs(oriented), -1.0), axis=0)[None], 0)[0]
    return np.where(scored, np.where(two_sided, far, up), np.nan), scored


def _scored(score, nw, nb):
    """Where a window has a score: data in it, a baseline of at least half its minutes."""
    return (nw > 0) & (nb * 2 >= np.maximum(nw, 1)) & np.isfinite(score)


def _group_cums(x: np.ndarray, ga: np.ndarray, gb: np.ndarray, groups) -> np.ndarray:
    """Each group's prefix sums (``_cum`` of its rows x[a:b], summed in the same order, so the
    same numbers to the last bit), laid end to end: group g's occupy [a + g, b + g + 1)."""
    out = np.zeros(len(x) + len(ga))
    for g in groups:
        a, b = int(ga[g]), int(gb[g])
        out[a + g:b + g + 1] = _cum(x[a:b])
    return out


_KEY = 1 << 34  # seconds a group's segments may span in the composite (group, second) keys


def _reduce(table, win_idx, starts, ends, out: dict[str, list]) -> None:
    """Each (metric, host, unit) of one ``_UNITS`` result (a group: its rows, ordered by segment),
    reduced to its windows' values and appended to ``out[metric]`` as arrays (``_as_dicts`` turns
    a metric's into ``Scores``' dicts, in the same order: by host, then unit). All groups' windows
    at once: a window's segments are found in the composite (group, segment) keys, its sums from
    the group's own prefix sums — the same numbers as a group at a time."""
    # the names as codes into their few distinct values (windows.codes): no Python string per row
    (metric_ix, metric_names), (host_ix, host_names), (unit_ix, unit_names) = (
        windows.codes(table.column(i)) for i in range(3))
    seg = table.column(3).to_numpy().astype(np.int64)
    n = table.column(4).to_numpy().astype(float)
    nv = table.column(5).to_numpy().astype(float)
    sv = table.column(6).to_numpy().astype(float)
    sv2 = table.column(7).to_numpy().astype(float)
    inc = table.column(8).to_numpy().astype(float)
    rate = table.column(9).to_numpy().astype(float)
    vhi = table.column(10).to_numpy().astype(float)
    vlo = table.column(11).to_numpy().astype(float)
    change = (metric_ix[1:] != metric_ix[:-1]) | (host_ix[1:] != host_ix[:-1]) | (unit_ix[1:] != unit_ix[:-1])
    cuts = np.flatnonzero(change) + 1
    ga = np.concatenate(([0], cuts)).astype(np.int64)
    gb = np.concatenate((cuts, [len(seg)])).astype(np.int64)
    info: dict[str, tuple[bool, float]] = {}
    kept, pair_g, pair_w, pair_past = [], [], [], []
    is_counter_g = np.zeros(len(ga), dtype=bool)
    sign_g = np.ones(len(ga))
    none_g = np.zeros(len(ga), dtype=bool)
    for g, a in enumerate(ga.tolist()):
        metric, host = metric_names[metric_ix[a]], host_names[host_ix[a]]
        found = win_idx.get(host)
        if found is None:
            continue
        if metric not in info:
            m = catalog.get(metric)
            info[metric] = (m.is_counter, -1.0 if m.bad == "down" else 1.0, m.bad not in ("up", "down"))
        is_counter_g[g], sign_g[g], none_g[g] = info[metric]
        kept.append(g)
        pair_g.append(np.full(len(found[0]), g, dtype=np.int64))
        pair_w.append(found[0])
        pair_past.append(found[1])
    if not kept:
        return
    pg, pw = np.concatenate(pair_g), np.concatenate(pair_w)
    past = np.concatenate(pair_past, axis=1)  # rows: each past's start, end
    base = int(min(seg.min(), past[0::2].min(), starts.min() - 59))
    row_g = np.repeat(np.arange(len(ga), dtype=np.int64), gb - ga)
    keys = row_g * _KEY + (seg - base)
    s, e = starts[pw], ends[pw]

    def find(t):  # index of the group's first segment at or after t (global row index)
        return np.searchsorted(keys, pg * _KEY + (t - base), "left")

    i0, i1 = find(s), find(e - 59)
    # each past's segments [j0, j1) (none: j0 = j1)
    js = [(find(a), np.where(a < b, find(b - 59), find(a))) for a, b in zip(past[0::2], past[1::2])]
    counter = is_counter_g[pg]
    amount = np.empty(len(pg))
    nw = np.empty(len(pg))
    score = np.full((len(js), len(pg)), np.nan)
    nb = np.zeros((len(js), len(pg)))
    # prefix-sum positions: group g's entries sit g further along (each group starts with its 0)
    for mask, is_counter in ((counter, True), (~counter, False)):
        if not mask.any():
            continue
        groups = [g for g in kept if is_counter_g[g] == is_counter]
        off = pg[mask]
        a0, a1 = i0[mask] + off, i1[mask] + off
        if is_counter:
            Np = _spread(np.concatenate(([0.0], np.cumsum(n))), ga, gb)  # whole minutes: exact
            I = _group_cums(inc, ga, gb, groups)
            stat = lambda b0_, b1: _counter_statistic(Np, I, a0, a1, b0_, b1)  # noqa: E731
        else:
            Np = _spread(np.concatenate(([0.0], np.cumsum(nv))), ga, gb)
            S, S2 = _group_cums(sv, ga, gb, groups), _group_cums(sv2, ga, gb, groups)
            stat = lambda b0_, b1: _gauge_statistic(Np, S, S2, a0, a1, b0_, b1)  # noqa: E731
        for k, (j0, j1) in enumerate(js):
            got = stat(j0[mask] + off, j1[mask] + off)
            score[k, mask], nb[k, mask] = got[0], got[3]
            if k == 0:
                amount[mask], nw[mask] = got[1], got[2]
    level = np.where(counter, amount / (e - s), amount)
    # what a rule on the metric reads in the window: the highest minute rate (counters), the
    # highest minute value (the lowest for a metric whose bad direction is down)
    down = sign_g[pg] < 0
    rule = np.where(counter, _range(np.maximum, rate, i0, i1),
                    np.where(down, _range(np.minimum, vlo, i0, i1), _range(np.maximum, vhi, i0, i1)))
    seen = (nw > 0) & np.isfinite(level)
    oriented, scored = _worse_of(sign_g[pg], none_g[pg], score, _scored(score, nw, nb) & (nb > 0))
    ok = seen & scored
    pair_cuts = np.flatnonzero(pg[1:] != pg[:-1]) + 1
    for a, b in zip(np.r_[0, pair_cuts].tolist(), np.r_[pair_cuts, len(pg)].tolist()):
        if not seen[a:b].any():
            continue
        r = int(ga[pg[a]])
        key = (host_names[host_ix[r]], unit_names[unit_ix[r]])
        out[metric_names[metric_ix[r]]].append((key, pw[a:b], seen[a:b], ok[a:b], oriented[a:b], level[a:b], rule[a:b]))


def _spread(P: np.ndarray, ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """Whole-table prefix sums of whole numbers (minute counts) laid out as ``_group_cums`` lays
    out each group's own (group g's at [a + g, b + g + 1), from 0): exact, the same numbers."""
    gid = np.repeat(np.arange(len(ga), dtype=np.int64), gb - ga + 1)
    pos = np.arange(len(gid), dtype=np.int64)
    return P[pos - gid] - P[ga[gid]]


def _as_dicts(pieces: list) -> tuple[dict, dict, dict]:
    """One metric's score, level and rule dicts (window index -> (host, unit) -> value) from its
    ``_reduce`` pieces."""
    sc_m: dict[int, dict] = {}
    lv_m: dict[int, dict] = {}
    rule_m: dict[int, dict] = {}
    for key, wins, seen, ok, score, level, rule in pieces:
        for wi, has, good, sc, lv, rv in zip(wins.tolist(), seen.tolist(), ok.tolist(), score.tolist(),
                                             level.tolist(), rule.tolist()):
            if has:
                lv_m.setdefault(wi, {})[key] = lv
                rule_m.setdefault(wi, {})[key] = rv
            if good:
                sc_m.setdefault(wi, {})[key] = sc
    return sc_m, lv_m, rule_m


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
        table = store.query_arrow(_UNIT_MINUTES["counter" if m.is_counter else "gauge"],
                                  {"cluster": cluster, "metrics": [metric],
                                                  "counters": [metric] if m.is_counter else [],
                                                  "hosts": hosts[c:c + HOSTS_PER_ROLLING_QUERY],
                                                  "lo_s": int(lo_s - B - EARLIER_BASELINE_S - W), "hi_s": int(hi_s)},
                                  tag="scores:rolling_fires", timeout_s=timeout_s)
        _rolling_hits(table, m.is_counter, sign, W, B, operator, threshold, lo_s, hi_s, host_t0s, out,
                      two_sided=m.bad not in ("up", "down"))
    return out


def _rolling_hits(table, is_counter: bool, sign: float, W: int, B: int, operator: str, threshold: float,
                  lo_s: int, hi_s: int, host_t0s, out: dict, *, two_sided: bool = False) -> None:
    """Add to ``out`` each (host, unit)'s firing times in one ``_UNIT_MINUTES`` result."""
    if not table.num_rows:
        return
    cols = [table.column(i) for i in range(13)]
    (host_ix, host_names), (unit_ix, unit_names) = windows.codes(cols[1]), windows.codes(cols[2])
    seg = cols[3].to_numpy().astype(np.int64)
    n, nv, sv, sv2, inc = (cols[i].to_numpy().astype(float) for i in (4, 5, 6, 7, 8))
    last_c = cols[12].to_numpy().astype(float)
    change = np.flatnonzero((host_ix[1:] != host_ix[:-1]) | (unit_ix[1:] != unit_ix[:-1])) + 1
    for a, b in zip(np.r_[0, change].tolist(), np.r_[change, len(seg)].tolist()):
        host, segs = host_names[host_ix[a]], seg[a:b]
        e = segs + 60
        starts = e - W
        i0 = np.searchsorted(segs, starts, "left")
        i1 = np.arange(1, len(segs) + 1)
        t0s = (host_t0s or {}).get(host)
        args = (is_counter, n[a:b], nv[a:b], sv[a:b], sv2[a:b], inc[a:b], i0, i1)
        got = []
        for p0, p1 in _pasts(starts, W, B, t0s):
            j0 = np.searchsorted(segs, p0, "left")
            j1 = np.where(p0 < p1, np.searchsorted(segs, p1 - 59, "left"), j0)
            got.append(_statistic(*args, j0, j1))
        nw = got[0][2]
        sc_k, nb_k = np.array([g[0] for g in got]), np.array([g[3] for g in got])
        score, scored = _worse_of(sign, two_sided, sc_k, _scored(sc_k, nw, nb_k) & (nb_k > 0))
        with np.errstate(invalid="ignore"):
            hit = scored & ((score > threshold) if operator == ">" else (score < threshold))
        hit &= (segs >= lo_s) & (e <= hi_s)
        if t0s is not None and len(t0s):  # no window across an interruption of the host
            hit &= np.searchsorted(t0s, e, "left") == np.searchsorted(t0s, starts, "right")
        if hit.any():
            out[(host, unit_names[unit_ix[a]])] = np.sort(last_c[a:b][hit])

