"""Signal scan — "what differs before failures": rank every catalog metric by how its behaviour in
the lead window before an outcome differs from the same kind of window at healthy times, and say
how likely each finding is noise.

Windows are the fleet test's (``windows.matched_windows``): the lead window before each
interruption of the outcome on the job's hosts, against the same hosts 1–3 days before and after
at the same time of day and as many healthy peers at the same time, matched on activity (the
hosts were running a job): workload-driven metrics — temperatures, power, traffic — differ
between busy and idle hosts and would otherwise top the list.

Per metric, the engine reduces the one-minute rollup to one value per (host, hour): the highest
and the lowest over the host's components of the minute means (gauges) or of the reset-aware
per-second rates between consecutive minutes (counters). A window's value is the worst over its
hosts and hours in the catalog's bad direction (highest for ``up``; lowest for ``down``; for
``none`` the highest — the scan then tests both ways). So one misbehaving GPU among 128 hosts
counts, as it does for the people reading the case.

Per metric, with B the window values before the outcome and C the control values:
- ``auc`` = P(b > c) + ½·P(b = c) over all pairs (0.5: no difference; 1: every window before
  the outcome is worse than every control), from the Mann–Whitney U statistic;
- ``p``: the Mann–Whitney U test, one-sided in the bad direction (two-sided for ``none``);
- ``q``: Benjamini–Hochberg over every metric tested in the scan: the expected share of false
  findings among those ranked at or above it. Many metrics are compared, so p alone overstates;
- medians of B and C, and how many windows each had.
Metrics with fewer than ``MIN_WINDOWS`` windows on either side are listed as not tested.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import numpy as np
from scipy.stats import false_discovery_control, mannwhitneyu

from telemetry import catalog, store
from telemetry.queries import windows
from telemetry.queries.windows import COVERAGE_S, Outcome, hosts_of, metrics_present

MIN_WINDOWS = 3
QUERY_TIMEOUT_S = 600
HOUR = COVERAGE_S

_ROLLUP = windows.ROLLUP_SQL

_GAUGE_HOURLY = (
    "SELECT host, intDiv(toUnixTimestamp(ts), 3600) AS hr, max(v) AS vmax, min(v) AS vmin "
    f"FROM (SELECT host, ts, s / n AS v FROM ({_ROLLUP}) WHERE n > 0) "
    "GROUP BY host, hr ORDER BY host, hr")

_COUNTER_HOURLY = (
    "SELECT host, intDiv(t, 3600) AS hr, max(r) AS vmax, min(r) AS vmin FROM ("
    "  SELECT host, t, (v - pv) / (c - pc) AS r FROM ("
    "    SELECT host, toUnixTimestamp(ts) AS t, hi AS v, toUnixTimestamp64Milli(last_ts) / 1000.0 AS c, "
    "     lagInFrame(v) OVER w AS pv, lagInFrame(c) OVER w AS pc, row_number() OVER w AS rn "
    f"    FROM ({_ROLLUP}) WINDOW w AS (PARTITION BY host, component ORDER BY ts "
    "     ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) "
    "  WHERE rn > 1 AND c > pc AND v >= pv) "
    "GROUP BY host, hr ORDER BY host, hr")

@dataclass
class _Hourly:
    hours: np.ndarray
    vmax: np.ndarray
    vmin: np.ndarray


def _hourly(sql: str, params: dict, timeout_s: int) -> dict[str, _Hourly]:
    table = store.query_arrow(sql, params, tag="signal_scan:hourly", timeout_s=timeout_s)
    if table.num_rows == 0:
        return {}
    hours = table.column(1).to_numpy().astype(np.int64)
    vmax = table.column(2).to_numpy().astype(float)
    vmin = table.column(3).to_numpy().astype(float)
    return {host: _Hourly(hours[a:b], vmax[a:b], vmin[a:b]) for host, a, b in windows.host_runs(table)}


def _window_value(hourly: dict[str, _Hourly], hosts, start: int, end: int, highest: bool) -> float:
    lo, hi = start // HOUR, (end - 1) // HOUR
    best = np.nan
    for h in hosts:
        rows = hourly.get(h)
        if rows is None:
            continue
        a, b = np.searchsorted(rows.hours, lo, side="left"), np.searchsorted(rows.hours, hi, side="right")
        if a >= b:
            continue
        seg = rows.vmax[a:b] if highest else rows.vmin[a:b]
        seg = seg[np.isfinite(seg)]
        if not len(seg):
            continue
        v = seg.max() if highest else seg.min()
        if np.isnan(best) or (v > best if highest else v < best):
            best = float(v)
    return best


def window_features(cluster: str, spans, metrics: list[str], *, lo_s: int, hi_s: int,
                    progress: Callable[[int, int, str], None] | None = None,
                    timeout_s: int = QUERY_TIMEOUT_S) -> dict[str, np.ndarray]:
    """Per metric, each window's value as the scan computes it (the worst hourly value over the
    window's hosts in the metric's bad direction; NaN where the hosts reported nothing).
    ``spans`` are windows (or any objects) with ``hosts``, ``start`` and ``end``; one query per metric."""
    out: dict[str, np.ndarray] = {}
    for i, metric in enumerate(metrics):
        if progress:
            progress(i, len(metrics), f"features: metric {i + 1}/{len(metrics)}: {metric}")
        m = catalog.get(metric)
        hourly = _hourly(_COUNTER_HOURLY if m.is_counter else _GAUGE_HOURLY,
                         {"cluster": cluster, "metric": metric, "lo_s": lo_s, "hi_s": hi_s}, timeout_s)
        highest = m.bad != "down"
        out[metric] = np.array([_window_value(hourly, w.hosts, w.start, w.end, highest) for w in spans], dtype=float)
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
    n_outcome = 0
    matched = False
    lo_all = hi_all = None
    plan = []
    for cluster in clusters:
        present = [p for p in metrics_present(cluster, timeout_s=timeout_s) if not metrics or p[0] in metrics]
        plan.append((cluster, present))
    total = sum(len(p) for _, p in plan) or 1
    done = 0
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
        n_outcome += len(chosen)
        if not chosen:
            done += len(present)
            continue
        hosts = hosts_of(cluster, timeout_s=timeout_s)
        allocations = windows.Allocations.load(cluster, *windows.allocation_range(lo_s, hi_s, W), timeout_s=timeout_s)
        matched = matched or bool(allocations)
        found = windows.matched_windows(cluster, chosen, host_t0s, W, lo_s, hi_s, hosts, allocations)
        for metric, _, _ in present:
            done += 1
            say(done - 1, total, f"scanning metric {done}/{total}: {metric}")
            vals = window_features(cluster, found, [metric], lo_s=lo_s - W - HOUR, hi_s=hi_s,
                                   timeout_s=timeout_s)[metric]
            before, control = values.setdefault(metric, ([], []))
            for w, v in zip(found, vals):
                if np.isfinite(v):
                    (before if w.kind == "before" else control).append(float(v))
    say(total, total, "ranking")
    rows = []
    for metric, (before, control) in values.items():
        m = catalog.get(metric)
        row = {"metric": metric, "layer": m.layer, "unit": m.unit, "kind": m.kind, "bad": m.bad,
               "n_before": len(before), "n_control": len(control),
               "median_before": float(np.median(before)) if before else None,
               "median_control": float(np.median(control)) if control else None,
               "auc": None, "p": None, "q": None}
        if len(before) >= MIN_WINDOWS and len(control) >= MIN_WINDOWS:
            alternative = {"up": "greater", "down": "less"}.get(m.bad, "two-sided")
            res = mannwhitneyu(before, control, alternative=alternative, method="auto")
            # statistic is U of the first sample whatever the alternative: U / (n1·n2) = P(b > c) + ½P(b = c)
            row.update(auc=float(res.statistic) / (len(before) * len(control)), p=float(res.pvalue))
        rows.append(row)
    tested = [r for r in rows if r["p"] is not None]
    if tested:
        qs = false_discovery_control([r["p"] for r in tested], method="bh")
        for r, q in zip(tested, qs):
            r["q"] = float(q)
    rows.sort(key=lambda r: (r["q"] is None, r["q"] if r["q"] is not None else 1.0,
                             -abs((r["auc"] if r["auc"] is not None else 0.5) - 0.5), r["metric"]))
    iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat()  # noqa: E731
    return {
        "outcome": outcome.label, "lead_window_s": W, "clusters": list(clusters),
        "range": [iso(lo_all), iso(hi_all)] if lo_all is not None else None,
        "outcome_interruptions": n_outcome, "matched_on_activity": matched, "metrics_tested": len(tested), "metrics_seen": len(rows),
        "rows": rows,
    }
