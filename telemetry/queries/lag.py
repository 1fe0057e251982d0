"""Lag analysis: which of two signals leads the other, and by how much.

Two series (``series_lag``)
---------------------------
Each metric becomes one value per (host, step) in the engine: the mean over the host's
components of the one-minute means (gauges), or the sum over its components of the reset-aware
increase per second (counters: the rise of each series' minute maximum since its previous
bucket, a drop read as a reset). Per host both series are standardised (mean 0, sd 1 over the
steps where both have a value), and the cross-correlation at lag k is the mean of
``a(t) · b(t + k)`` over every host and step where both exist, for k from ``-max_lag`` to
``+max_lag`` steps. A peak at k > 0 says A moves first and B follows k steps later; k < 0 the
reverse; 0: together. ``band`` is the ±1.96/√n band a correlation of unrelated series stays in
(n: the pairs behind the peak), so a peak inside it is no lead at all.

Events before events (``event_lead_times``)
-------------------------------------------
For each occurrence of the later event (an event kind, optionally with codes, or the
interruptions of an outcome on each of the job's hosts), the time since the latest earlier
event on the same host within ``max_lag_s``: the lead-time histogram. Beside it, the share of
later events that had such an earlier event, against the share of host time that lies within
``max_lag_s`` after one (what chance alone gives): their ratio is the lift.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import binom

from telemetry import catalog, store
from telemetry.queries import windows
from telemetry.stats import jeffreys_interval

QUERY_TIMEOUT_S = 600
MAX_STEPS = 200_000  # buckets per host kept in memory: range / step must stay below this

# '' = every component; 'gpu3' = gpu3 and its sub-parts (gpu3/nvlink2)
_IN_COMPONENT = ("({component:String} = '' OR component = {component:String} "
                 "OR startsWith(component, concat({component:String}, '/'))) ")

_GAUGE_STEPS = (
    "SELECT host, intDiv(toUnixTimestamp(ts), {step:UInt32}) AS b, sum(s) / sum(n) AS v "
    "FROM (SELECT host, component, ts, sum(sum) AS s, sum(count) AS n FROM samples_1m "
    "      WHERE cluster = {cluster:String} AND metric = {metric:String} AND host IN {hosts:Array(String)} "
    "      AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND " + _IN_COMPONENT +
    "      GROUP BY host, component, ts) "
    "WHERE n > 0 GROUP BY host, b ORDER BY host, b")

_COUNTER_STEPS = (
    "SELECT host, b, sum(greatest(v - pv, 0)) / {step:UInt32} AS v FROM ("
    "  SELECT host, component, b, v, lagInFrame(v) OVER w AS pv, row_number() OVER w AS rn FROM ("
    "    SELECT host, component, intDiv(toUnixTimestamp(ts), {step:UInt32}) AS b, max(max) AS v FROM samples_1m "
    "    WHERE cluster = {cluster:String} AND metric = {metric:String} AND host IN {hosts:Array(String)} "
    "    AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) AND " + _IN_COMPONENT +
    "    GROUP BY host, component, b) "
    "  WINDOW w AS (PARTITION BY host, component ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
    "WHERE rn > 1 GROUP BY host, b ORDER BY host, b")

_HOSTS_SQL = ("SELECT DISTINCT host FROM samples_1m WHERE cluster = {cluster:String} AND metric IN {metrics:Array(String)} "
              "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) ORDER BY host")


class LagError(ValueError):
    """The analysis cannot run as asked; the message says why."""


@dataclass
class SeriesLag:
    metric_a: str
    metric_b: str
    step_s: int
    lags: list[int]  # in steps
    corr: list[float | None]  # None where no pairs
    pairs: list[int]
    hosts: int
    best_lag: int | None  # steps; > 0: A leads
    best_corr: float | None
    band: float | None  # ±1.96/sqrt(n) at the peak
    lag_interval: tuple[int, int] | None = None  # steps: 2.5–97.5 % of the best lag over host resamples
    component_a: str = ""
    component_b: str = ""

    @property
    def label_a(self) -> str:
        return self.metric_a + (f" on {self.component_a}" if self.component_a else "")

    @property
    def label_b(self) -> str:
        return self.metric_b + (f" on {self.component_b}" if self.component_b else "")

    @property
    def verdict(self) -> str:
        if self.best_lag is None:
            return "no overlapping data"
        if self.band is not None and abs(self.best_corr) <= self.band:
            return "no lead: the correlation stays within chance at every lag"
        if self.best_lag == 0:
            return f"{self.label_a} and {self.label_b} move together (peak at lag 0)"
        first, second = (self.label_a, self.label_b) if self.best_lag > 0 else (self.label_b, self.label_a)
        return f"{first} leads {second} by {abs(self.best_lag) * self.step_s / 60:g} min"

    def as_dict(self) -> dict:
        iv = self.lag_interval
        return {"kind": "series", "metric_a": self.metric_a, "metric_b": self.metric_b,
                "component_a": self.component_a, "component_b": self.component_b, "step_s": self.step_s,
                "lags": self.lags, "lag_s": [k * self.step_s for k in self.lags], "corr": self.corr,
                "pairs": self.pairs, "hosts": self.hosts, "best_lag": self.best_lag,
                "best_lag_s": self.best_lag * self.step_s if self.best_lag is not None else None,
                "best_lag_interval_s": [iv[0] * self.step_s, iv[1] * self.step_s] if iv else None,
                "best_pairs": self.pairs[self.lags.index(self.best_lag)] if self.best_lag is not None else 0,
                "best_corr": self.best_corr, "band": self.band, "verdict": self.verdict}


def _per_host(metric: str, cluster: str, hosts: list[str], lo_s: int, hi_s: int, step_s: int,
              timeout_s: int, component: str = "") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    m = catalog.get(metric)
    table = store.query_arrow(_COUNTER_STEPS if m.is_counter else _GAUGE_STEPS,
                              {"cluster": cluster, "metric": metric, "hosts": hosts, "lo_s": lo_s, "hi_s": hi_s,
                               "step": step_s, "component": component}, tag="lag:series", timeout_s=timeout_s)
    if not table.num_rows:
        return {}
    b = table.column(1).to_numpy().astype(np.int64)
    v = table.column(2).to_numpy().astype(float)
    return {host: (b[a:e], v[a:e]) for host, a, e in windows.host_runs(table)}


BOOTSTRAP = 200  # host resamples behind the best lag's interval


def series_lag(cluster: str, metric_a: str, metric_b: str, *, lo_s: int, hi_s: int, step_s: int = 60,
               max_lag_steps: int = 60, hosts: list[str] | None = None, component_a: str = "",
               component_b: str = "", progress: Callable[[int, int, str], None] | None = None,
               timeout_s: int = QUERY_TIMEOUT_S) -> SeriesLag:
    """Cross-correlation of two catalog metrics over lags, pooled over hosts (module docstring).
    ``component_a``/``component_b`` keep one part (and its sub-parts) of each host; '' keeps all."""
    say = progress or (lambda done, total, stage: None)
    for name in (metric_a, metric_b):
        if not catalog.is_known(name):
            raise LagError(f"metric {name!r} is not in the catalog")
    if step_s < 60 or step_s % 60:
        raise LagError(f"step {step_s} s: a whole number of minutes (the rollup's resolution)")
    if not 1 <= max_lag_steps <= 1440:
        raise LagError(f"max lag {max_lag_steps} steps: between 1 and 1440")
    if hi_s <= lo_s:
        raise LagError("the range is empty")
    if (hi_s - lo_s) // step_s > MAX_STEPS:
        raise LagError(f"{(hi_s - lo_s) // step_s} steps per host: use a longer step or a shorter range "
                       f"(at most {MAX_STEPS})")
    say(0, 4, "hosts with both metrics")
    if hosts is None:
        hosts = [r[0] for r in store.query_rows(_HOSTS_SQL, {"cluster": cluster, "metrics": [metric_a, metric_b],
                                                             "lo_s": lo_s, "hi_s": hi_s},
                                                tag="lag:hosts", timeout_s=timeout_s)]
    say(1, 4, f"{metric_a} per host and step")
    a_by = _per_host(metric_a, cluster, hosts, lo_s, hi_s, step_s, timeout_s, component_a)
    say(2, 4, f"{metric_b} per host and step")
    b_by = _per_host(metric_b, cluster, hosts, lo_s, hi_s, step_s, timeout_s, component_b)
    say(3, 4, "correlating over lags")
    lags = list(range(-max_lag_steps, max_lag_steps + 1))
    host_sums, host_counts = [], []
    first, n = lo_s // step_s, (hi_s - lo_s) // step_s + 1
    for host in sorted(set(a_by) & set(b_by)):
        a = np.full(n, np.nan)
        b = np.full(n, np.nan)
        for arr, (buckets, values) in ((a, a_by[host]), (b, b_by[host])):
            idx = buckets - first
            ok = (idx >= 0) & (idx < n)
            arr[idx[ok]] = values[ok]
        both = np.isfinite(a) & np.isfinite(b)
        if both.sum() < 3:
            continue
        za, zb = _standardise(a, both), _standardise(b, both)
        if za is None or zb is None:
            continue  # a flat series correlates with nothing
        sums = np.zeros(len(lags))
        counts = np.zeros(len(lags), dtype=np.int64)
        for i, k in enumerate(lags):
            x, y = (za[: n - k], zb[k:]) if k >= 0 else (za[-k:], zb[: n + k])
            ok = np.isfinite(x) & np.isfinite(y)
            sums[i] = float(np.dot(x[ok], y[ok]))
            counts[i] = int(ok.sum())
        host_sums.append(sums)
        host_counts.append(counts)
    S = np.asarray(host_sums).reshape(len(host_sums), len(lags))
    C = np.asarray(host_counts, dtype=np.int64).reshape(len(host_counts), len(lags))
    sums, counts = S.sum(axis=0), C.sum(axis=0)
    corr = [float(s / c) if c else None for s, c in zip(sums, counts)]
    best = _peak(corr, lags)
    interval = None
    if best is not None and len(S) >= 2:
        # which lag wins when the hosts are drawn again with replacement (fixed seed: reproducible)
        rng = np.random.default_rng(0)
        picks = rng.integers(0, len(S), size=(BOOTSTRAP, len(S)))
        won = []
        for row in picks:
            c = C[row].sum(axis=0)
            r = np.divide(S[row].sum(axis=0), c, out=np.full(len(lags), np.nan), where=c > 0)
            k = _peak([None if not np.isfinite(v) else float(v) for v in r], lags)
            if k is not None:
                won.append(lags[k])
        if won:
            interval = (int(np.floor(np.percentile(won, 2.5))), int(np.ceil(np.percentile(won, 97.5))))
    say(4, 4, "done")
    return SeriesLag(metric_a, metric_b, step_s, lags, corr, counts.tolist(), len(S),
                     lags[best] if best is not None else None, corr[best] if best is not None else None,
                     1.959963984540054 / math.sqrt(counts[best]) if best is not None and counts[best] else None,
                     interval, component_a, component_b)


def _peak(corr: list[float | None], lags: list[int]) -> int | None:
    """Index of the strongest correlation; a tie goes to the smaller lag (the simpler story)."""
    best = None
    for i, c in enumerate(corr):
        if c is not None and (best is None or abs(c) > abs(corr[best]) + 1e-12
                              or (abs(abs(c) - abs(corr[best])) <= 1e-12 and abs(lags[i]) < abs(lags[best]))):
            best = i
    return best


def _standardise(x: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    mu, sd = float(np.mean(x[mask])), float(np.std(x[mask]))
    if not sd > 0:
        return None
    out = (x - mu) / sd
    out[~np.isfinite(x)] = np.nan
    return out


# --- events before events -----------------------------------------------------------------------

_EVENTS_SQL = ("SELECT host, toUnixTimestamp64Milli(ts) / 1000.0 AS t FROM events WHERE cluster = {cluster:String} "
               "AND kind = {kind:String} AND (length({codes:Array(Int32)}) = 0 OR code IN {codes:Array(Int32)}) "
               "AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC') "
               "ORDER BY host, t")

_COVERAGE_SQL = ("SELECT host, toUnixTimestamp(min(ts)), toUnixTimestamp(max(ts)) + 60 FROM samples_1m "
                 "WHERE cluster = {cluster:String} AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) "
                 "GROUP BY host")


@dataclass(frozen=True)
class EventSpec:
    kind: str  # an events.kind (xid, link_down, ...)
    codes: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "xid" and self.codes:
            return "XID " + "/".join(map(str, self.codes))
        return self.kind.replace("_", " ") + (f" {'/'.join(map(str, self.codes))}" if self.codes else "")


def _events(cluster: str, spec: EventSpec, lo_s: int, hi_s: int, timeout_s: int) -> dict[str, np.ndarray]:
    rows = store.query_rows(_EVENTS_SQL, {"cluster": cluster, "kind": spec.kind, "codes": list(spec.codes),
                                          "lo_s": lo_s, "hi_s": hi_s}, tag="lag:events", timeout_s=timeout_s)
    out: dict[str, list[float]] = {}
    for host, t in rows:
        out.setdefault(host, []).append(float(t))
    return {h: np.asarray(v) for h, v in out.items()}


def event_lead_times(cluster: str, earlier: EventSpec, later: EventSpec | dict[str, np.ndarray], *, lo_s: int,
                     hi_s: int, max_lag_s: int = 24 * 3600, bins: int = 24, hosts: list[str] | None = None,
                     timeout_s: int = QUERY_TIMEOUT_S) -> dict:
    """Lead times of ``earlier`` events before each ``later`` one on the same host (module docstring).
    ``later`` is an event spec or, for interruptions, {host: sorted times}; ``hosts`` keeps only
    those hosts (None: every host)."""
    if not 60 <= max_lag_s <= 30 * 86400:
        raise LagError(f"max lag {max_lag_s} s: between 1 min and 30 days")
    keep = (lambda h: True) if hosts is None else set(hosts).__contains__
    first = {h: v for h, v in _events(cluster, earlier, lo_s - max_lag_s, hi_s, timeout_s).items() if keep(h)}
    second = later if isinstance(later, dict) else _events(cluster, later, lo_s, hi_s, timeout_s)
    second = {h: v for h, v in second.items() if keep(h)}
    leads: list[float] = []
    n_later = 0
    for host, times in second.items():
        a = first.get(host)
        for t in np.asarray(times, dtype=float):
            n_later += 1
            if a is None or not len(a):
                continue
            i = int(np.searchsorted(a, t, side="right")) - 1  # the latest earlier event at or before t
            while i >= 0 and a[i] == t and earlier == later:
                i -= 1  # the event itself is not its own precursor
            if i >= 0 and t - a[i] <= max_lag_s:
                leads.append(float(t - a[i]))
    # chance: the share of observed host time within max_lag_s after an earlier event
    covered = observed = 0.0
    for host, start, end in store.query_rows(_COVERAGE_SQL, {"cluster": cluster, "lo_s": lo_s, "hi_s": hi_s},
                                             tag="lag:coverage", timeout_s=timeout_s):
        start, end = max(float(start), lo_s), min(float(end), hi_s)
        if end <= start or not keep(host):
            continue
        observed += end - start
        a = first.get(host)
        if a is not None and len(a):
            covered += _union_length(a, max_lag_s, start, end)
    edges = np.linspace(0, max_lag_s, bins + 1)
    hist = np.histogram(leads, bins=edges)[0].tolist() if leads else [0] * bins
    share = len(leads) / n_later if n_later else None
    chance = covered / observed if observed else None
    return {
        "kind": "events", "earlier": earlier.label,
        "later": later.label if isinstance(later, EventSpec) else "interruptions",
        "max_lag_s": max_lag_s, "edges_s": edges.tolist(), "counts": hist, "lead_times_s": sorted(leads),
        "n_later": n_later, "n_preceded": len(leads), "share_preceded": share, "share_by_chance": chance,
        "lift": (share / chance) if share is not None and chance else None,
        "median_lead_s": float(np.median(leads)) if leads else None,
        "median_lead_interval_s": _median_interval(leads),
        "share_preceded_ci": list(jeffreys_interval(len(leads), n_later - len(leads))[1:]) if n_later else None,
    }


def _median_interval(values: list[float]) -> list[float] | None:
    """Distribution-free 95 % interval of a median from order statistics (binomial ranks)."""
    n = len(values)
    if n < 2:
        return None
    x = np.sort(np.asarray(values, dtype=float))
    j = max(int(binom.ppf(0.025, n, 0.5)) - 1, 0)  # 0-based rank of the lower bound
    k = min(n - 1 - j, n - 1)
    return [float(x[j]), float(x[k])]


def _union_length(starts: np.ndarray, length: float, lo: float, hi: float) -> float:
    """Length of the union of [s, s + length) clipped to [lo, hi)."""
    total, cur_s, cur_e = 0.0, None, None
    for s in np.sort(starts):
        a, b = max(float(s), lo), min(float(s) + length, hi)
        if b <= a:
            continue
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
