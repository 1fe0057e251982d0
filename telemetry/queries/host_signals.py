"""A host's main signals over a range: which series it has (samples per metric and component),
which of them to chart, and how whole each one is (samples, usual step, gaps).

``host_signals(cluster, host, start, end)`` picks the range (the last ``DEFAULT_DAYS`` up to
the host's newest sample, from its first sample at the earliest, when none is given; a range longer than the overlay's
``MAX_WINDOW_S`` is cut to its last part, and says so), lists what the host stored there,
with the labels kept beside each series (``series_labels``: several label sets = series merged
into one row key), chooses the main signals and charts them with the case overlay (``telemetry.queries.overlay``:
same queries, same downsampling, bands off), t0 being the range's end. The chart is drawn by
``investigations.charts.overlay_figure``, which breaks lines at gaps.

Main signals: metrics the catalog knows (its entries and yours; names it does not know cannot
be charted, they are counted in ``unmapped``), those with a bad direction first (what goes
wrong), in the catalog's layer order, then by samples; up to ``MAX_METRICS`` metrics and
``MAX_SERIES`` series (every component of a metric, in order).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from telemetry import catalog, store
from telemetry.ingestion import series_labels
from telemetry.queries import overlay

DEFAULT_DAYS = 7
MAX_METRICS = 6
MAX_SERIES = 32
MAX_LABEL_SETS = 4  # kept label sets shown per series
GAP_STEPS = 3  # a gap: more than this many usual steps without a sample (as the chart breaks lines)
QUERY_TIMEOUT_S = 30


@dataclass
class SeriesFacts:
    metric: str
    component: str
    samples: int
    first: datetime
    last: datetime
    step_s: float = 0.0  # the usual (median) time between samples
    gaps: int = 0  # stretches without samples longer than GAP_STEPS usual steps
    longest_gap_s: float = 0.0
    labels: list[str] = field(default_factory=list)  # kept label sets (series_labels), 'slot=3 rack=u7'; >1: merged

    @property
    def labels_shown(self) -> str:
        """The kept label sets, at most ``MAX_LABEL_SETS`` of them."""
        shown = " · ".join(self.labels[:MAX_LABEL_SETS])
        more = len(self.labels) - MAX_LABEL_SETS
        return shown + (f" · {more} more" if more > 0 else "")


@dataclass
class HostSignals:
    cluster: str
    host: str
    start: datetime | None
    end: datetime | None
    note: str = ""  # e.g. the range was cut to the overlay's longest window
    series: list[SeriesFacts] = field(default_factory=list)  # the charted ones, with their facts
    other_metrics: int = 0  # metrics stored in the range and not charted
    unmapped: list[str] = field(default_factory=list)  # stored names the catalog does not know
    result: overlay.OverlayResult | None = None


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _range(cluster: str, host: str, start: datetime | None, end: datetime | None) -> tuple:
    note = ""
    oldest = None
    if end is None or start is None:
        cond = "".join(f" AND ts {op} {{{k}:DateTime64(3)}}" for op, k, v in ((">=", "s", start), ("<", "e", end))
                       if v is not None)
        (oldest, newest), = store.query_rows(
            "SELECT min(ts), max(ts) FROM samples WHERE cluster = {c:String} AND host = {h:String}" + cond,
            {"c": cluster, "h": host, "s": start, "e": end}, tag="host.signals.span", timeout_s=QUERY_TIMEOUT_S)
        if newest is None or _utc(newest).year < 1971:
            return None, None, "no samples stored for this host in this range"
        oldest = _utc(oldest)
        if end is None:
            end = _utc(newest) + timedelta(seconds=1)
    end = _utc(end)
    if start is None:  # the last days up to the end, not before the host's first sample
        start = max(end - timedelta(days=DEFAULT_DAYS), oldest)
    start = _utc(start)
    longest = timedelta(seconds=overlay.MAX_WINDOW_S)
    if end - start > longest:
        note = (f"the chart shows the last {overlay.MAX_WINDOW_S // 86400} days of the range "
                f"({(end - longest):%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC); narrow from/to for earlier ones")
        start = end - longest
    return start, end, note


def _stored(cluster: str, host: str, start: datetime, end: datetime) -> list[tuple]:
    return store.query_rows(
        "SELECT metric, component, count(), min(ts), max(ts) FROM samples "
        "WHERE cluster = {c:String} AND host = {h:String} AND ts >= {s:DateTime64(3)} AND ts < {e:DateTime64(3)} "
        "GROUP BY metric, component ORDER BY metric, component",
        {"c": cluster, "h": host, "s": start, "e": end}, tag="host.signals.stored", timeout_s=QUERY_TIMEOUT_S)


def choose(stored: list[tuple]) -> tuple[list[tuple], int, list[str]]:
    """(rows of the series to chart, metrics left out, names the catalog does not know)."""
    per_metric: dict[str, list[tuple]] = {}
    unmapped = []
    for row in stored:
        metric = catalog.resolve(row[0])
        if metric is None:
            if row[0] not in unmapped:
                unmapped.append(row[0])
            continue
        per_metric.setdefault(metric.name, []).append(row)
    layers = {name: i for i, name in enumerate(catalog.LAYERS)}

    def rank(name: str):
        m = catalog.resolve(name)
        return (m.bad == "none", layers.get(m.layer, len(layers)), -sum(r[2] for r in per_metric[name]), name)

    chosen, n_metrics = [], 0
    for name in sorted(per_metric, key=rank):
        rows = per_metric[name]
        if n_metrics >= MAX_METRICS or len(chosen) >= MAX_SERIES:
            break
        chosen.extend(rows[: MAX_SERIES - len(chosen)])
        n_metrics += 1
    return chosen, len(per_metric) - n_metrics, unmapped


_GAPS_SQL = """
SELECT metric, component, quantileExact(0.5)(d) AS step, max(d) AS longest,
       arrayCount(x -> x > {k:Float64} * step, groupArray(d)) AS gaps
FROM (
    SELECT metric, component,
           toFloat64(ts - lagInFrame(ts) OVER (PARTITION BY metric, component ORDER BY ts
                                                ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) AS d,
           row_number() OVER (PARTITION BY metric, component ORDER BY ts) AS i
    FROM samples
    WHERE cluster = {c:String} AND host = {h:String} AND metric IN {metrics:Array(String)}
      AND ts >= {s:DateTime64(3)} AND ts < {e:DateTime64(3)}
)
WHERE i > 1 AND (metric, component) IN {keys:Array(Tuple(String, String))}
GROUP BY metric, component
"""


def _gaps(cluster: str, host: str, start: datetime, end: datetime, rows: list[tuple]) -> dict:
    keys = [(r[0], r[1]) for r in rows]
    found = store.query_rows(_GAPS_SQL, {"c": cluster, "h": host, "s": start, "e": end, "k": float(GAP_STEPS),
                                         "metrics": sorted({k[0] for k in keys}), "keys": keys},
                             tag="host.signals.gaps", timeout_s=QUERY_TIMEOUT_S)
    return {(m, c): (float(step), int(gaps), float(longest)) for m, c, step, longest, gaps in found}


def host_signals(cluster: str, host: str, start: datetime | None = None, end: datetime | None = None, *,
                 max_points: int = 600) -> HostSignals:
    start, end, note = _range(cluster, host, start, end)
    out = HostSignals(cluster, host, start, end, note)
    if start is None:
        return out
    stored = _stored(cluster, host, start, end)
    rows, out.other_metrics, out.unmapped = choose(stored)
    if not rows:
        return out
    gaps = _gaps(cluster, host, start, end, rows)
    kept = series_labels.for_host(cluster, host)
    for metric, component, n, first, last in rows:
        step, n_gaps, longest = gaps.get((metric, component), (0.0, 0, 0.0))
        labels = [" ".join(f"{k}={v}" for k, v in sorted(s.items())) for s in kept.get((metric, component), ())]
        out.series.append(SeriesFacts(catalog.resolve(metric).name, component, int(n), _utc(first), _utc(last),
                                      step, n_gaps, longest, labels))
    window = int((end - start).total_seconds())
    q = overlay.OverlayQuery(
        cluster=cluster, t0=end, start_offset_s=-window, end_offset_s=0, max_points=max_points, band="peers",
        signals=[overlay.SignalSpec(metric=s.metric, host=host, component=s.component) for s in out.series])
    out.result = overlay.run_overlay(q, allowed_hosts={host}, timeout_s=QUERY_TIMEOUT_S)
    return out
