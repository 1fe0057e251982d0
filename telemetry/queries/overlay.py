"""The case overlay: signals from every layer aligned on t0, each against a band of healthy values.

``run_overlay(OverlayQuery) -> OverlayResult``. For every signal (metric, host,
component) it returns the affected series (x = seconds relative to t0), a band
of the same metric on the same component family (``gpu3`` -> every ``gpuN``) as
p5/median/p95 per time bucket, and the events (XID/SXID, link down/up, job
state) on the affected hosts as markers.

Two band definitions (``OverlayResult.band_source`` says which one was used)
--------------------------------------------------------------------------
* ``"fleet"``: the p5/median/p95 of the metric over *every* component of the
  family in the cluster at the same minute, read from the ``band_1m`` rollup
  (migration 0006: t-digest states per cluster, metric, family and minute,
  merged over the minutes of a chart bucket). The affected hosts are part of
  that fleet, but a negligible share of it. Each series counts one value per
  minute: its mean, or its max (metric bad ``up``) or min (bad ``down``), as the
  rollup line of the series itself; counters their within-minute rate. The
  quantiles are t-digest estimates (within a few percent of the spread), and
  ``n`` is the number of series-minutes in the bucket. One band per (metric,
  family), shared by every signal on it.
* ``"peers"``: pooled over the explicit ``peers`` hosts only, computed from the
  samples (``quantilesExactInclusive``, numpy's default ``percentile``), ``n``
  being the peer samples in the bucket.

``OverlayQuery.band`` picks: ``"auto"`` (default) takes the fleet band where
the window reads the rollup and the peers band on raw-resolution windows;
``"fleet"`` / ``"peers"`` force one. A (metric, family) with no fleet rows
(e.g. counters written one sample per insert, which give no within-minute
rate) falls back to the peers band when peers are given.

How it reads the store
----------------------
* Source: the raw ``samples`` table while a chart bucket is shorter than a
  minute, i.e. ``window / max_points < ROLLUP_MIN_BUCKET_S`` (60 s; with the
  default 600 points that is windows up to 10 h); longer windows read the
  ``samples_1m`` rollup, which cannot resolve anything finer than a minute
  anyway and holds 6-60x fewer rows.
* Counters become per-second rates with reset handling: a negative delta means
  the counter restarted, so the increase is the new value itself (as Prometheus
  ``rate`` does). On the rollup, deltas are taken between the minutes' maxima:
  a counter only goes up within a minute, so its max is the minute-closing
  value. A reset inside a minute therefore shows at the next minute boundary
  (that minute's max is below this one's, read as a reset).
* Gauges on the rollup: each minute is represented by its worst value in the
  metric's ``bad`` direction (max for ``up``, min for ``down``, mean for
  ``none``), so a spike inside a minute stays visible; both bands use the same
  rule, so the line and the band stay comparable.
* Downsampling is server-side: ``largestTriangleThreeBuckets(max_points)`` per
  series (keeps spikes). The points come back as two Float64 arrays per series,
  read as Arrow straight into numpy.
* The series are selected by a few exact products (metrics x hosts x
  components) that cover the signals, so the primary key narrows to them;
  gauges and counters are separate branches (only counters need the previous
  sample, a window function); times are bound as epoch integers.
* At most three queries per overlay, whatever the number of signals: one for
  all affected series, one for all bands, one for the events, run at the same
  time on worker threads (each with its own client; the engine runs them in
  parallel). Each has a tag and a ``max_execution_time``.

Validation happens before any SQL is built: a metric must be a catalog name
(or alias); a host must be in ``allowed_hosts``
(the job's hosts and peers; when not given, the cluster inventory is looked up
with a bound query after the metric check). Anything else raises
``InvalidSignal`` naming the signal and the reason.
"""
from __future__ import annotations

import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Collection, Iterable

import numpy as np

from telemetry import catalog, names, store

ROLLUP_MIN_BUCKET_S = 60
MAX_POINTS_LIMIT = 5000
MAX_SIGNALS = 64
MAX_PEERS = 256
MAX_WINDOW_S = 31 * 86400
MAX_EVENTS = 2000
# Raw counters: read a little before the window so the first point has a predecessor.
RAW_COUNTER_MARGIN_S = 300
EVENT_KINDS = ("xid", "sxid", "link_down", "link_up", "job_state")
BAND_MODES = ("auto", "fleet", "peers")
BAND_TABLE = "band_1m"
# The SQL twin of component_family(); band_1m (migration 0006) stores families made by the same expression.
FAMILY_SQL = "replaceRegexpAll(component, '[0-9]+', '')"
QUERY_TIMEOUT_S = 20



class InvalidSignal(ValueError):
    """A signal or query parameter that cannot be charted; the message names it and why."""


@dataclass(frozen=True)
class SignalSpec:
    metric: str
    host: str
    component: str = ""

    @property
    def label(self) -> str:
        return f"{self.metric} {self.component}@{self.host}" if self.component else f"{self.metric} @{self.host}"


@dataclass(frozen=True)
class OverlayQuery:
    cluster: str
    t0: datetime
    start_offset_s: int  # negative: seconds before t0
    end_offset_s: int
    signals: list[SignalSpec]
    peers: list[str] = field(default_factory=list)
    max_points: int = 600
    band: str = "auto"  # auto | fleet | peers: see the module docstring


@dataclass
class Band:
    x: np.ndarray  # bucket centre, seconds relative to t0
    p5: np.ndarray
    median: np.ndarray
    p95: np.ndarray
    n: np.ndarray  # values per bucket: peer samples ("peers") or series-minutes ("fleet")


@dataclass
class SignalSeries:
    signal: SignalSpec
    metric: str  # canonical name
    layer: str
    unit: str  # "/s" appended for counter rates
    kind: str  # gauge | counter
    bad: str
    family: str  # component family the band was drawn from ('gpu', 'mlx_/', '')
    x: np.ndarray
    y: np.ndarray
    band: Band | None


@dataclass
class EventMarker:
    x: float  # seconds relative to t0
    ts: datetime
    host: str
    component: str
    kind: str
    code: int
    severity: str
    message: str


@dataclass
class OverlayResult:
    cluster: str
    t0: datetime
    start_offset_s: int
    end_offset_s: int
    source: str  # "samples" or "samples_1m"
    bucket_s: float
    series: list[SignalSeries]
    events: list[EventMarker]
    peers: list[str]
    band_source: str = ""  # "fleet", "peers", "fleet+peers" (fleet with a peers fallback) or "" (no band)


def component_family(component: str) -> str:
    """Digits removed: gpu3 -> gpu, mlx5_0/1 -> mlx_/, '' -> ''. Same as the SQL below."""
    return re.sub(r"[0-9]+", "", component)


def _utc(ts: datetime) -> datetime:
    if ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)


def choose_source(window_s: float, max_points: int) -> tuple[str, float]:
    """(table, bucket seconds) for a window of `window_s` drawn with `max_points`."""
    bucket = max(window_s / max_points, 1.0)
    if bucket >= ROLLUP_MIN_BUCKET_S:
        return "samples_1m", math.ceil(bucket / 60.0) * 60.0
    return "samples", bucket


def _resolve_metric(name: str) -> catalog.Metric:
    metric = catalog.resolve(name)
    if metric is None:
        raise InvalidSignal(f"metric {name!r} is not in the metric catalog")
    return metric


def validate(q: OverlayQuery, *, allowed_hosts: Collection[str] | None) -> None:
    """Check everything that does not need the store. Hosts are checked when `allowed_hosts` is given."""
    if not isinstance(q.cluster, str) or not q.cluster or len(q.cluster) > 200:
        raise InvalidSignal(f"cluster {q.cluster!r}: must be a non-empty name")
    if not isinstance(q.t0, datetime):
        raise InvalidSignal(f"t0 {q.t0!r}: must be a datetime")
    if not (q.start_offset_s < q.end_offset_s):
        raise InvalidSignal(f"window: start_offset_s {q.start_offset_s} must be before end_offset_s {q.end_offset_s}")
    if q.end_offset_s - q.start_offset_s > MAX_WINDOW_S:
        raise InvalidSignal(f"window: {q.end_offset_s - q.start_offset_s} s is longer than {MAX_WINDOW_S} s")
    if not (2 <= q.max_points <= MAX_POINTS_LIMIT):
        raise InvalidSignal(f"max_points {q.max_points}: must be between 2 and {MAX_POINTS_LIMIT}")
    if not q.signals:
        raise InvalidSignal("signals: at least one signal is needed")
    if len(q.signals) > MAX_SIGNALS:
        raise InvalidSignal(f"signals: {len(q.signals)} given, at most {MAX_SIGNALS}")
    if q.band not in BAND_MODES:
        raise InvalidSignal(f"band {q.band!r}: must be one of {', '.join(BAND_MODES)}")
    if len(q.peers) > MAX_PEERS:
        raise InvalidSignal(f"peers: {len(q.peers)} given, at most {MAX_PEERS}")
    for i, s in enumerate(q.signals):
        where = f"signal {i + 1} ({s.metric!r} {s.component!r}@{s.host!r})"
        if not isinstance(s.metric, str) or not isinstance(s.host, str) or not isinstance(s.component, str):
            raise InvalidSignal(f"{where}: metric, host and component must be strings")
        try:
            _resolve_metric(s.metric)
        except InvalidSignal as exc:
            raise InvalidSignal(f"{where}: {exc}") from None
        if not names.is_host(s.host):
            raise InvalidSignal(f"{where}: host {s.host!r} is not a valid host name")
        if not names.is_component(s.component):
            raise InvalidSignal(f"{where}: component {s.component!r} is not a valid component name")
        if allowed_hosts is not None and s.host not in allowed_hosts:
            raise InvalidSignal(f"{where}: host {s.host!r} is not in the inventory of cluster {q.cluster!r} or the job")
    for p in q.peers:
        if not names.is_host(p):
            raise InvalidSignal(f"peers: {p!r} is not a valid host name")


def _inventory_hosts(cluster: str) -> set[str]:
    rows = store.query_rows(
        "SELECT DISTINCT host FROM hosts WHERE cluster = {cluster:String}",
        {"cluster": cluster},
        tag="overlay.inventory_hosts",
        timeout_s=5,
    )
    return {r[0] for r in rows}


@dataclass(frozen=True)
class _Plan:
    source: str
    bucket_s: float
    lo: datetime  # read from (includes the counter margin)
    start: datetime
    end: datetime
    params: dict


def _rectangles(keys: Iterable[tuple[str, str, str]]) -> list[tuple[list[str], list[str], list[str]]]:
    """The (metric, host, component) keys as a few exact products metrics x hosts x components.

    A case's signals are mostly one product (some metrics on some components of the affected
    hosts). One ``metric IN .. AND host IN .. AND component IN ..`` term per product lets the
    primary key narrow to exactly those series; a tuple IN over every key cost ~20 ms more per
    query on a 100 M-sample store, and a plain cross product of the three lists could read many
    series nobody asked for. The union of the products is exactly the keys."""
    by_metric: dict[str, set[tuple[str, str]]] = {}
    for metric, host, component in keys:
        by_metric.setdefault(metric, set()).add((host, component))
    same_pairs: dict[frozenset, list[str]] = {}
    for metric, pairs in by_metric.items():
        same_pairs.setdefault(frozenset(pairs), []).append(metric)
    out = []
    for pairs, metrics in same_pairs.items():
        hosts = {h for h, _ in pairs}
        components = {c for _, c in pairs}
        if len(pairs) == len(hosts) * len(components):
            out.append((sorted(metrics), sorted(hosts), sorted(components)))
            continue
        by_host: dict[str, set[str]] = {}
        for h, c in pairs:
            by_host.setdefault(h, set()).add(c)
        same_components: dict[frozenset, list[str]] = {}
        for h, cs in by_host.items():
            same_components.setdefault(frozenset(cs), []).append(h)
        for cs, hs in same_components.items():
            out.append((sorted(metrics), sorted(hs), sorted(cs)))
    return sorted(out)


def _keys_filter(n_rectangles: int) -> str:
    """SQL text for `n_rectangles` products; the values are the parameters r{i}m / r{i}h / r{i}c."""
    return "(" + " OR ".join(
        f"(metric IN {{r{i}m:Array(String)}} AND host IN {{r{i}h:Array(String)}} "
        f"AND component IN {{r{i}c:Array(String)}})"
        for i in range(n_rectangles)
    ) + ")"


# Families, not (metric, family) pairs: a tuple per row cost as much as the read itself (component is
# LowCardinality, so the family of a value is computed once per dictionary entry). The few extra
# (metric, family) pairs of the cross product are never looked up.
_BAND_FILTER = f"host IN {{hosts:Array(String)}} AND {FAMILY_SQL} IN {{families:Array(String)}}"

# Times are bound as integers (epoch seconds / milliseconds) and compared in integer arithmetic:
# DateTime64 parameters and conversions cost more than the reads on the rollup. The window
# [start, end] is exact; the rollup minutes are read from floor(start) and cut by x >= x0.
_RAW_TS = "ts >= fromUnixTimestamp64Milli({%s:Int64}, 'UTC') AND ts <= fromUnixTimestamp64Milli({end_ms:Int64}, 'UTC')"
_ROLLUP_TS = "ts >= toDateTime({%s:Int64}) AND ts <= toDateTime({end_s:Int64})"


def _rated_sql(source: str, series_filter: str, *, gauges: bool, counters: bool) -> str:
    """Rows (metric, host, component, x, y) of the window, x in seconds from t0, counters as rates.

    `series_filter` is constant SQL text (parameters only). Gauges and counters are separate
    branches: only counters need the previous sample of their series (a window function, which
    sorts its input), and a branch is left out when the signals have no metric of its kind."""
    where = "cluster = {cluster:String} AND "
    branches = []
    if source == "samples":
        if gauges:
            branches.append(
                "SELECT metric, host, component, (toUnixTimestamp64Milli(ts) - {t0_ms:Int64}) / 1000.0 AS x, "
                "value AS y FROM samples "
                f"WHERE {where}metric IN {{gauges:Array(String)}} AND {_RAW_TS % 'start_ms'} AND {series_filter}"
            )
        counter_rows = (
            "SELECT metric, host, component, toUnixTimestamp64Milli(ts) AS t, value AS v FROM samples "
            f"WHERE {where}metric IN {{counters:Array(String)}} AND {_RAW_TS % 'lo_ms'} AND {series_filter}"
        )
        x, rate = "(t - {t0_ms:Int64}) / 1000.0", "* 1000.0 / (t - pt)"
    else:
        # A minute of the rollup may still be split over unmerged parts: merge it, then take its
        # representative value (the bad direction's extreme, else the mean; a counter's max).
        if gauges:
            branches.append(
                "SELECT metric, host, component, toUnixTimestamp(ts) - {t0_s:Float64} AS x, "
                "multiIf(has({bad_up:Array(String)}, metric), max(max), "
                "has({bad_down:Array(String)}, metric), min(min), sum(sum) / sum(count)) AS y "
                "FROM samples_1m "
                f"WHERE {where}metric IN {{gauges:Array(String)}} AND {_ROLLUP_TS % 'start_s'} AND {series_filter} "
                "GROUP BY metric, host, component, ts"
            )
        counter_rows = (
            "SELECT metric, host, component, toUnixTimestamp(ts) AS t, max(max) AS v FROM samples_1m "
            f"WHERE {where}metric IN {{counters:Array(String)}} AND {_ROLLUP_TS % 'lo_s'} AND {series_filter} "
            "GROUP BY metric, host, component, ts"
        )
        x, rate = "t - {t0_s:Float64}", "/ (t - pt)"
    if counters:
        # Delta to the previous sample of the same series; a negative delta is a reset, so the
        # increase since then is the new value (as Prometheus rate does). No previous: no rate.
        branches.append(
            f"SELECT metric, host, component, {x} AS x, "
            f"if(pt = 0, nan, if(v >= pv, v - pv, v) {rate}) AS y FROM ("
            "SELECT metric, host, component, t, v, lagInFrame(v, 1, v) OVER w AS pv, lagInFrame(t, 1, 0) OVER w AS pt "
            f"FROM ({counter_rows}) "
            "WINDOW w AS (PARTITION BY metric, host, component ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW))"
        )
    return " UNION ALL ".join(branches)


def _kinds(params: dict) -> dict:
    return {"gauges": bool(params["gauges"]), "counters": bool(params["counters"])}


def _series_sql(source: str, params: dict) -> str:
    rated = _rated_sql(source, _keys_filter(params["n_rectangles"]), **_kinds(params))
    # The points come back as two Array(Float64) columns, read as Arrow: no Python object per
    # point (a tuple per point cost ~25 ms per overlay to build and convert, and fed the GC).
    return (
        "SELECT metric, host, component, arrayMap(p -> p.1, pts) AS xs, arrayMap(p -> p.2, pts) AS ys FROM ("
        "SELECT metric, host, component, largestTriangleThreeBuckets({n:UInt64})(x, y) AS pts "
        f"FROM ({rated}) WHERE x >= {{x0:Float64}} AND isFinite(y) "
        "GROUP BY metric, host, component)"
    )


def _series_arrays(table) -> dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]:
    """{(metric, host, component): (x, y)} from the Arrow result of `_series_sql`."""
    if table.num_rows == 0:
        return {}
    xs, ys = table.column("xs").combine_chunks(), table.column("ys").combine_chunks()
    offsets = xs.offsets.to_numpy()
    x_values = xs.values.to_numpy(zero_copy_only=False)
    y_values = ys.values.to_numpy(zero_copy_only=False)
    keys = zip(*(table.column(c).to_pylist() for c in ("metric", "host", "component")))
    return {key: (x_values[offsets[i]:offsets[i + 1]], y_values[offsets[i]:offsets[i + 1]])
            for i, key in enumerate(keys)}


def _band_sql(source: str, params: dict) -> str:
    """The peers band: quantiles over the `hosts` parameter (the peers) per (metric, family, bucket)."""
    rows = _rated_sql(source, _BAND_FILTER, **_kinds(params)) if source == "samples" else _rollup_band_rows(params)
    return (
        f"SELECT metric, {FAMILY_SQL} AS fam, "
        "intDiv(x - {x0:Float64}, {bucket:Float64}) AS b, "
        "quantilesExactInclusive(0.05, 0.5, 0.95)(y) AS q, count() AS n "
        f"FROM ({rows}) "
        "WHERE x >= {x0:Float64} AND isFinite(y) "
        "GROUP BY metric, fam, b ORDER BY metric, fam, b"
    )


def _rollup_band_rows(params: dict) -> str:
    """Peers-band rows on the rollup, without the per-minute merge of not-yet-merged parts (a hash
    GROUP BY over every peer series x minute cost 5-10x the read itself): each rollup row counts
    as one peer sample. Gauges use the row's max/min/mean as the series do. Counters use the
    minute maximum (= the closing value of a monotone counter) differenced in sort-key order, so
    the window reads in storage order; a part split of one minute gives two rows whose increments
    sum correctly."""
    where = "cluster = {cluster:String} AND "
    x = "toUnixTimestamp(ts) - {t0_s:Float64}"
    branches = []
    if params["gauges"]:
        branches.append(
            f"SELECT metric, component, {x} AS x, "
            "multiIf(has({bad_up:Array(String)}, metric), max, has({bad_down:Array(String)}, metric), min, sum / count) AS y "
            f"FROM samples_1m WHERE {where}metric IN {{gauges:Array(String)}} AND {_ROLLUP_TS % 'start_s'} AND {_BAND_FILTER}"
        )
    if params["counters"]:
        branches.append(
            "SELECT metric, component, x, if(isNull(prev), nan, if(max >= prev, max - prev, max) / 60.0) AS y FROM ("
            f"SELECT metric, component, {x} AS x, max, "
            "lagInFrame(toNullable(max), 1, NULL) OVER (PARTITION BY cluster, metric, host, component ORDER BY ts, max "
            "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS prev "
            f"FROM samples_1m WHERE {where}metric IN {{counters:Array(String)}} AND {_ROLLUP_TS % 'lo_s'} AND {_BAND_FILTER})"
        )
    return " UNION ALL ".join(branches)


def _band_table() -> str:
    """band_1m, or on a cluster every shard's band_1m_local (states merge across shards)."""
    cluster = store.config().cluster
    if not cluster:
        return BAND_TABLE
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", cluster):
        raise InvalidSignal(f"store cluster name {cluster!r} is not a valid identifier")
    return f"cluster('{cluster}', currentDatabase(), {BAND_TABLE}_local)"


def fleet_band_bucket(source: str, bucket_s: float) -> float:
    """The fleet band is per minute at best: a raw-resolution chart gets one-minute band buckets."""
    return bucket_s if source == "samples_1m" else max(60.0, math.ceil(bucket_s / 60.0) * 60.0)


# (state column, count column, parameter naming the metrics that read it)
_FLEET_STATES = (
    ("rate_q", "rate_n", "counters"),
    ("max_q", "level_n", "up_gauges"),
    ("min_q", "level_n", "down_gauges"),
    ("mean_q", "level_n", "mean_gauges"),
)


def _fleet_band_sql(params: dict) -> str:
    """Rows (metric, fam, b, [p5, p50, p95], n) from band_1m: one merge per (metric, family, bucket).

    Only the state the metric needs is read: the within-minute rate for counters, the minute
    max / min / mean for gauges by bad direction (the same rule as the rollup line). One branch
    per state, because reading a state column deserialises every state in it even when unused;
    a branch is left out when no signal needs its state. The window is read from ceil(start), so
    the bucket of a minute is an integer division."""
    branches = [
        "SELECT metric, family AS fam, "
        "intDiv(toUnixTimestamp(ts) - {fstart_s:UInt32}, {fbucket_s:UInt32}) AS b, "
        f"quantilesTDigestMerge(0.05, 0.5, 0.95)({state}) AS q, sum({count}) AS n "
        f"FROM {_band_table()} "
        f"WHERE cluster = {{cluster:String}} AND metric IN {{{param}:Array(String)}} "
        "AND family IN {families:Array(String)} "
        "AND ts >= toDateTime({fstart_s:UInt32}) AND ts <= toDateTime({end_s:Int64}) "
        "GROUP BY metric, fam, b HAVING n > 0"
        for state, count, param in _FLEET_STATES
        if params[param]
    ]
    # No (metric, family) tuple filter and no ORDER BY: each cost ~20% of this query; the few extra
    # (metric, family) pairs of the cross product are dropped and the buckets sorted in Python.
    return " UNION ALL ".join(branches)


EVENTS_SQL = (
    "SELECT ts, host, component, kind, code, severity, message FROM events "
    "WHERE cluster = {cluster:String} AND host IN {hosts:Array(String)} "
    "AND ts >= {start:DateTime64(3, 'UTC')} AND ts <= {end:DateTime64(3, 'UTC')} "
    "AND kind IN {kinds:Array(String)} ORDER BY ts LIMIT {limit:UInt32}"
)


def plan(q: OverlayQuery, resolved: dict[str, catalog.Metric | None]) -> _Plan:
    t0 = _utc(q.t0)
    window = q.end_offset_s - q.start_offset_s
    source, bucket = choose_source(window, q.max_points)
    start = t0 + timedelta(seconds=q.start_offset_s)
    end = t0 + timedelta(seconds=q.end_offset_s)
    margin = RAW_COUNTER_MARGIN_S if source == "samples" else 120
    lo = start - timedelta(seconds=margin)
    metrics = sorted({_canonical(s.metric, resolved) for s in q.signals})
    counters = [m for m in metrics if resolved.get(m) is not None and resolved[m].is_counter]
    bad_up = [m for m in metrics if resolved.get(m) is not None and resolved[m].bad == "up"]
    bad_down = [m for m in metrics if resolved.get(m) is not None and resolved[m].bad == "down"]
    keys = sorted({(_canonical(s.metric, resolved), s.host, s.component) for s in q.signals})
    fams = sorted({(_canonical(s.metric, resolved), component_family(s.component)) for s in q.signals})
    rectangles = _rectangles(keys)
    fbucket = fleet_band_bucket(source, bucket)
    start_ms, lo_ms, end_ms = _epoch_ms(start), _epoch_ms(lo), _epoch_ms(end)
    params = {
        "cluster": q.cluster,
        "counters": counters,
        "gauges": [m for m in metrics if m not in counters],
        "bad_up": bad_up,
        "bad_down": bad_down,
        "fams": fams,
        "n_rectangles": len(rectangles),
        # Epoch milliseconds for the raw table; whole seconds (floor, or ceil for the fleet band's
        # first minute) for the minute rollups.
        "t0_ms": _epoch_ms(t0),
        "t0_s": _epoch_ms(t0) / 1000.0,
        "start_ms": start_ms,
        "lo_ms": lo_ms,
        "end_ms": end_ms,
        "start_s": start_ms // 1000,
        "lo_s": lo_ms // 1000,
        "end_s": end_ms // 1000,
        "fstart_s": -(-start_ms // 1000),
        "x0": float(q.start_offset_s),
        "bucket": float(bucket),
        "n": int(q.max_points),
        "families": sorted({f for _, f in fams}),
        "fbucket": fbucket,
        "fbucket_s": int(fbucket),
        "up_gauges": [m for m in bad_up if m not in counters],
        "down_gauges": [m for m in bad_down if m not in counters],
        "mean_gauges": [m for m in metrics if m not in counters and m not in bad_up and m not in bad_down],
    }
    for i, (r_metrics, r_hosts, r_components) in enumerate(rectangles):
        params[f"r{i}m"], params[f"r{i}h"], params[f"r{i}c"] = r_metrics, r_hosts, r_components
    return _Plan(source, bucket, lo, start, end, params)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _epoch_ms(ts: datetime) -> int:
    """Milliseconds since the epoch, truncated as a DateTime64(3) value is."""
    return (ts - _EPOCH) // timedelta(milliseconds=1)


def _canonical(name: str, resolved: dict[str, catalog.Metric | None]) -> str:
    m = resolved.get(name)
    return m.name if m is not None else name


_pool: ThreadPoolExecutor | None = None
_pool_guard = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    # Long-lived workers keep their per-thread store clients between overlays.
    global _pool
    with _pool_guard:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="overlay")
        return _pool


def band_mode(q: OverlayQuery, source: str) -> str:
    """'fleet' or 'peers': the band definition an overlay asks for (see the module docstring)."""
    if q.band != "auto":
        return q.band
    return "fleet" if source == "samples_1m" else "peers"


def run_overlay(
    q: OverlayQuery,
    *,
    allowed_hosts: Collection[str] | None = None,
    timeout_s: int = QUERY_TIMEOUT_S,
) -> OverlayResult:
    validate(q, allowed_hosts=allowed_hosts)
    if allowed_hosts is None:
        inventory = _inventory_hosts(q.cluster)
        validate(q, allowed_hosts=inventory)
    resolved: dict[str, catalog.Metric | None] = {}
    for s in q.signals:
        m = catalog.resolve(s.metric)
        resolved[s.metric] = m
        if m is not None:
            resolved[m.name] = m
    p = plan(q, resolved)
    affected_hosts = sorted({s.host for s in q.signals})
    peers = sorted(set(q.peers) - set(affected_hosts))
    mode = band_mode(q, p.source)

    def peers_band(fams) -> list:
        if not peers or not fams:
            return []
        metrics = {m for m, _ in fams}
        params = {**p.params, "hosts": peers, "families": sorted({f for _, f in fams}),
                  "gauges": [m for m in p.params["gauges"] if m in metrics],
                  "counters": [m for m in p.params["counters"] if m in metrics]}
        return store.query_rows(_band_sql(p.source, params), params, tag="overlay.bands", timeout_s=timeout_s)

    def band() -> tuple[list, list]:
        if mode == "peers":
            return [], peers_band(p.params["fams"])
        wanted = {tuple(f) for f in p.params["fams"]}
        fleet = [r for r in store.query_rows(_fleet_band_sql(p.params), p.params, tag="overlay.fleet_bands", timeout_s=timeout_s)
                 if (r[0], r[1]) in wanted]
        have = {(r[0], r[1]) for r in fleet}
        return fleet, peers_band([f for f in p.params["fams"] if tuple(f) not in have])

    pool = _executor()
    series_job = pool.submit(
        store.query_arrow, _series_sql(p.source, p.params), {**p.params, "hosts": affected_hosts},
        tag="overlay.series", timeout_s=timeout_s,
    )
    band_job = pool.submit(band)
    event_job = pool.submit(
        store.query_rows, EVENTS_SQL,
        {"cluster": q.cluster, "hosts": affected_hosts, "start": p.start, "end": p.end,
         "kinds": list(EVENT_KINDS), "limit": MAX_EVENTS},
        tag="overlay.events", timeout_s=timeout_s,
    )
    fleet_rows, peer_rows = band_job.result()
    series, event_rows = _series_arrays(series_job.result()), event_job.result()
    band_source = "+".join(name for name, rows in (("fleet", fleet_rows), ("peers", peer_rows)) if rows)
    return _assemble(q, p, resolved, series, fleet_rows, peer_rows, event_rows, peers, band_source)


def _bands(rows, x0: float, bucket_s: float) -> dict[tuple[str, str], Band]:
    grouped: dict[tuple[str, str], list] = {}
    for metric, fam, b, qs, n in rows:
        grouped.setdefault((metric, fam), []).append((b, qs[0], qs[1], qs[2], n))
    out = {}
    for key, items in grouped.items():
        a = np.asarray(items, dtype=float)
        a = a[np.argsort(a[:, 0], kind="stable")]
        out[key] = Band(x=x0 + (a[:, 0] + 0.5) * bucket_s, p5=a[:, 1], median=a[:, 2], p95=a[:, 3],
                        n=a[:, 4].astype(int))
    return out


def _assemble(q, p: _Plan, resolved, series, fleet_rows, peer_rows, event_rows, peers,
              band_source: str) -> OverlayResult:
    empty = (np.empty(0), np.empty(0))
    band_objs = _bands(peer_rows, q.start_offset_s, p.bucket_s)
    band_objs.update(_bands(fleet_rows, q.start_offset_s, p.params["fbucket"]))
    out = []
    for s in q.signals:
        m = resolved.get(s.metric)
        name = m.name if m is not None else s.metric
        fam = component_family(s.component)
        x, y = series.get((name, s.host, s.component), empty)
        unit = (m.unit + "/s") if (m is not None and m.is_counter) else (m.unit if m is not None else "")
        out.append(
            SignalSeries(
                signal=s,
                metric=name,
                layer=m.layer if m is not None else "host",
                unit=unit,
                kind=m.kind if m is not None else "gauge",
                bad=m.bad if m is not None else "none",
                family=fam,
                x=x,
                y=y,
                band=band_objs.get((name, fam)),
            )
        )
    t0 = _utc(q.t0)
    events = [
        EventMarker(
            x=(_utc(ts) - t0).total_seconds(), ts=_utc(ts), host=host, component=comp, kind=kind,
            code=int(code), severity=sev, message=msg,
        )
        for ts, host, comp, kind, code, sev, msg in event_rows
    ]
    return OverlayResult(
        cluster=q.cluster, t0=t0, start_offset_s=q.start_offset_s, end_offset_s=q.end_offset_s,
        source=p.source, bucket_s=p.bucket_s, series=out, events=events, peers=peers, band_source=band_source,
    )

