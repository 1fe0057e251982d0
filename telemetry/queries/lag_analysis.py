"""What a lag analysis job asks, parsed once, and the analysis that fits it (telemetry.queries.lag).

Each side is typed the way a person names it: a catalog metric (canonical name or alias,
optionally kept to one component such as ``gpu3`` or ``mlx5_0``), an event kind (``XID 79``,
``XID 48/94``, ``link down``, ``link up``, ``sxid``, ``port module``) or, as the later side only,
the interruptions of an outcome (``NODE_FAIL``, ``any interruption``). Two metrics give the
cross-correlation over lags; two event kinds (or events before interruptions) give the
lead-time histograms in both directions, so the page can say which comes first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from telemetry import catalog
from telemetry.queries import lag, windows
from telemetry.queries.events import KINDS_OF_INTEREST
from telemetry.queries.lag import EventSpec, LagError

MAX_LAG_S = 24 * 3600  # series: at most 1440 one-minute steps either side
MIN_LAG_S = 60


@dataclass(frozen=True)
class SeriesSide:
    metric: str  # canonical catalog name
    component: str = ""

    @property
    def label(self) -> str:
        return self.metric + (f" on {self.component}" if self.component else "")


@dataclass(frozen=True)
class InterruptionsSide:
    outcome: windows.Outcome

    @property
    def label(self) -> str:
        return f"interruptions ({self.outcome.label})"


Side = Union[SeriesSide, EventSpec, InterruptionsSide]


def parse_side(text: str, component: str = "", *, name: str = "a") -> Side:
    """One side of the analysis; LagError naming the field (``name``) and what it accepts."""
    raw = " ".join((text or "").split())
    component = (component or "").strip()
    if not raw:
        raise LagError(f"{name}: required — a catalog metric, an event kind (XID 79, link down) or, "
                       "as b, an interruption state")
    if len(raw) > 200 or len(component) > 100:
        raise LagError(f"{name}: at most 200 characters, its component at most 100")
    metric = catalog.resolve(raw)
    if metric is not None:
        return SeriesSide(metric.name, component)
    side: Side | None = None
    kind = raw.lower().replace(" ", "_").replace("-", "_")
    if kind in KINDS_OF_INTEREST:
        side = EventSpec(kind)
    else:
        try:
            outcome = windows.parse_outcome(raw)
        except windows.NotTestable:
            outcome = None
        if outcome is not None:
            side = (EventSpec("xid", outcome.xids) if outcome.xids else
                    EventSpec(outcome.events[0]) if outcome.events else InterruptionsSide(outcome))
    if side is None:
        raise LagError(f"{name}: {raw!r} is neither a catalog metric nor an event kind ({', '.join(KINDS_OF_INTEREST)}, "
                       "'XID 79', 'XID 48/94', 'link down') nor an interruption state")
    if component:
        raise LagError(f"{name}: a component ({component!r}) keeps one part of a metric; {side.label} is an event "
                       "kind, matched on its host")
    return side


def check_pair(a: Side, b: Side) -> str:
    """'series' or 'events', or LagError saying why the two sides cannot be compared."""
    if isinstance(a, InterruptionsSide):
        raise LagError("a: interruptions can only be the later signal (b); put the event you suspect first as a")
    if isinstance(a, SeriesSide) and isinstance(b, SeriesSide):
        if a == b:
            raise LagError("b: the same metric on the same component as a; a signal always leads itself by 0")
        return "series"
    if isinstance(a, SeriesSide) or isinstance(b, SeriesSide):
        metric, other = (a, b) if isinstance(a, SeriesSide) else (b, a)
        raise LagError(f"{metric.label} is a metric and {other.label} an event: a lag analysis compares two metrics "
                       "(cross-correlation) or two kinds of events (lead times); whether a metric's rise precedes "
                       "an event is a hypothesis's fleet test")
    return "events"


def check_lag(max_lag_s, step_s) -> tuple[int, int]:
    for field, v in (("max_lag_s", max_lag_s), ("step_s", step_s)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise LagError(f"{field}: {v!r} is not a whole number of seconds")
    if step_s < 60 or step_s % 60 or step_s > 86400:
        raise LagError(f"step_s: {step_s} must be a whole number of minutes (the rollup's resolution), at most a day")
    if not MIN_LAG_S <= max_lag_s <= MAX_LAG_S:
        raise LagError(f"max_lag_s: {max_lag_s} must be between {MIN_LAG_S} s and {MAX_LAG_S} s (24 h)")
    if max_lag_s < step_s or max_lag_s // step_s > 1440:
        raise LagError(f"max_lag_s: {max_lag_s} s with a step of {step_s} s gives {max_lag_s // step_s} lags "
                       "either side; between 1 and 1440")
    return max_lag_s, step_s


def run(cluster: str, a: Side, b: Side, *, lo_s: int, hi_s: int, host: str = "", step_s: int = 60,
        max_lag_s: int = 3600, bins: int = 24, progress: Callable[[int, int, str], None] | None = None,
        timeout_s: int = lag.QUERY_TIMEOUT_S) -> dict:
    """The analysis of a against b in ``cluster`` over [lo_s, hi_s), on one host or all."""
    say = progress or (lambda done, total, stage: None)
    how = check_pair(a, b)
    check_lag(max_lag_s, step_s)
    hosts = [host] if host else None
    common = {"cluster": cluster, "host": host or None, "a": a.label, "b": b.label, "lo_s": lo_s, "hi_s": hi_s}
    if how == "series":
        r = lag.series_lag(cluster, a.metric, b.metric, lo_s=lo_s, hi_s=hi_s, step_s=step_s,
                           max_lag_steps=max_lag_s // step_s, hosts=hosts, component_a=a.component,
                           component_b=b.component, progress=progress, timeout_s=timeout_s)
        return {**r.as_dict(), **common}
    say(0, 3, f"{a.label} before {b.label}")
    if isinstance(b, InterruptionsSide):
        chosen, _ = windows.outcome_interruptions(cluster, b.outcome, 0, lo_s, hi_s, timeout_s=timeout_s)
        later: dict = {}
        for it in chosen:
            for h in it.hosts:
                later.setdefault(h, []).append(float(it.t0))
        later = {h: sorted(v) for h, v in later.items()}
    else:
        later = b
    forward = lag.event_lead_times(cluster, a, later, lo_s=lo_s, hi_s=hi_s, max_lag_s=max_lag_s, bins=bins,
                                   hosts=hosts, timeout_s=timeout_s)
    forward["later"] = b.label
    say(1, 3, f"{b.label} before {a.label}")
    reverse = None
    if isinstance(b, EventSpec) and b != a:
        reverse = lag.event_lead_times(cluster, b, a, lo_s=lo_s, hi_s=hi_s, max_lag_s=max_lag_s, bins=bins,
                                       hosts=hosts, timeout_s=timeout_s)
    say(3, 3, "done")
    return {"kind": "events", **common, "max_lag_s": max_lag_s, "forward": forward, "reverse": reverse,
            "verdict": _event_verdict(a.label, b.label, forward, reverse, max_lag_s)}


def _event_verdict(a: str, b: str, forward: dict, reverse: dict | None, max_lag_s: int) -> str:
    within = f"{max_lag_s / 3600:g} h" if max_lag_s >= 3600 else f"{max_lag_s // 60} min"
    if not forward["n_later"]:
        return f"no {b} in the range"

    def strength(r):
        return r["lift"] if r and r.get("lift") is not None and r["n_preceded"] else 0.0

    if strength(forward) <= 1 and strength(reverse) <= 1:
        return f"no lead: neither comes before the other within {within} more often than chance"
    if strength(forward) >= strength(reverse):
        first, second, r = a, b, forward
    else:
        first, second, r = b, a, reverse
    return (f"{first} precedes {second}: {r['n_preceded']} of {r['n_later']} {second} had {first} within "
            f"{within} before (median {r['median_lead_s'] / 60:.0f} min; {r['lift']:.1f}× chance)")
