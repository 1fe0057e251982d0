"""Permalinks: a case URL carries its view in the query string —
``?w=<start>,<end>`` (seconds relative to t0) and ``s=<metric>@<host>[/<component>],...``.

Anything in ``s`` that is not a catalog metric or a host of the job (or its healthy peers) is
refused with InvalidSignal naming the signal and the reason (the pages answer HTTP 400 with it).
"""
from __future__ import annotations

import urllib.parse

from telemetry import catalog
from telemetry.queries.overlay import MAX_SIGNALS, InvalidSignal, SignalSpec

DEFAULT_WINDOW = (-6 * 3600, 15 * 60)
WINDOW_PRESETS = (
    ("−1h … +5m", (-3600, 300)),
    ("−6h … +15m", (-21600, 900)),
    ("−24h … +1h", (-86400, 3600)),
    ("−3d … +1h", (-3 * 86400, 3600)),
    ("−7d … +1h", (-7 * 86400, 3600)),
)
MAX_WINDOW_S = 31 * 86400
MIN_WINDOW_S = 10


def parse_window(raw: str | None) -> tuple[int, int]:
    """``-21600,900`` -> (-21600, 900); InvalidSignal for anything else."""
    if not raw:
        return DEFAULT_WINDOW
    parts = raw.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = (int(float(p)) for p in parts)
    except (ValueError, OverflowError):
        raise InvalidSignal(f"w={raw!r}: expected two offsets in seconds from t0, e.g. w=-21600,900") from None
    if start >= end:
        raise InvalidSignal(f"w={raw!r}: the start ({start}) must be before the end ({end})")
    if end - start > MAX_WINDOW_S:
        raise InvalidSignal(f"w={raw!r}: the window is longer than {MAX_WINDOW_S // 86400} days")
    if end - start < MIN_WINDOW_S:
        raise InvalidSignal(f"w={raw!r}: the window must be at least {MIN_WINDOW_S} s long")
    return start, end


def parse_signals(raw: str | None) -> list[SignalSpec]:
    """``metric@host/component,metric@host`` -> SignalSpecs. Metric names must be in the catalog
    (aliases become canonical names), so the URL names one thing however it was typed."""
    if not raw:
        return []
    out: list[SignalSpec] = []
    for i, item in enumerate(x for x in raw.split(",") if x.strip()):
        item = item.strip()
        metric, at, rest = item.partition("@")
        if not at or not metric or not rest:
            raise InvalidSignal(f"signal {i + 1} {item!r}: expected metric@host or metric@host/component")
        host, _, component = rest.partition("/")
        found = catalog.resolve(metric)
        if found is None:
            raise InvalidSignal(f"signal {i + 1} {item!r}: metric {metric!r} is not in the metric catalog")
        spec = SignalSpec(found.name, host, component)
        if spec not in out:
            out.append(spec)
    if len(out) > MAX_SIGNALS:
        raise InvalidSignal(f"s: {len(out)} signals, at most {MAX_SIGNALS}")
    return out


MIN_POINTS = 50
MAX_POINTS = 2000  # the case page's script reads both from the overlay element's data attributes


def parse_points(raw: str | None, default: int = 600) -> int:
    """``n`` (points per series, from the chart's width), clamped to MIN_POINTS..MAX_POINTS."""
    if raw is None:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise InvalidSignal(f"n={raw!r}: expected a whole number of points") from None
    return max(MIN_POINTS, min(n, MAX_POINTS))


def signal_param(spec: SignalSpec) -> str:
    return f"{spec.metric}@{spec.host}/{spec.component}" if spec.component else f"{spec.metric}@{spec.host}"


def check_hosts(hosts, signals: list[SignalSpec], peers=()) -> None:
    """Every signal's host is one of the job's ``hosts`` or its healthy ``peers``."""
    allowed = set(hosts) | set(peers)
    for i, s in enumerate(signals):
        if s.host not in allowed:
            raise InvalidSignal(f"signal {i + 1} {signal_param(s)!r}: host {s.host!r} is not one of the job's "
                                f"{len(hosts)} hosts or its healthy peers")


def view_query(w: tuple[int, int], signals: list[SignalSpec]) -> str:
    """The query string (with its ``?``, or empty) that reopens this view of a case."""
    params = {}
    if w != DEFAULT_WINDOW:
        params["w"] = f"{w[0]},{w[1]}"
    if signals:
        params["s"] = ",".join(signal_param(s) for s in signals)
    return "?" + urllib.parse.urlencode(params, safe=",@/") if params else ""
