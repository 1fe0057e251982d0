"""What a case's view shows around t0: the overlay of chosen signals, "what's different here"
(components that differ most from healthy peers) and which signals a case opens with. Pages and
API call the same functions; they raise InvalidSignal for a bad request (HTTP 400) and let the
telemetry store's exceptions through (HTTP 503 / an error fragment).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from investigations.models import Case
from investigations.permalinks import check_hosts, signal_param
from telemetry import catalog, rules
from telemetry.queries.overlay import InvalidSignal, OverlayQuery, SignalSpec

DEFAULT_SIGNALS = 4  # a case opened without s= charts this many of the top "what's different" rows
DIFFERENCES_TOP_N = 15
DEFAULT_LEAD_S = 6 * 3600


def peers(case: Case, signals: list[SignalSpec]) -> list[str]:
    """Healthy peers of the case's hosts at t0 (hosts with the signals' metrics, when given)."""
    from telemetry.queries import topology

    metrics = sorted({s.metric for s in signals}) or None
    return topology.peers_of(case.cluster, list(case.hosts), case.t0, metrics=metrics)


def peers_if_needed(case: Case, signals: list[SignalSpec]) -> list[str]:
    """Peers, only looked up when a signal names a host outside the job; [] when the store is down
    (then only the job's own hosts can be checked)."""
    if all(s.host in case.hosts for s in signals):
        return []
    try:
        return peers(case, signals)
    except Exception:
        return []


def check_view(case: Case, signals: list[SignalSpec]) -> None:
    """InvalidSignal unless every signal's host is the job's or a healthy peer's."""
    check_hosts(case.hosts, signals, peers_if_needed(case, signals))


@dataclass
class Overlay:
    figure_json: str
    meta: dict

    def as_json(self) -> str:
        """{"figure": <plotly JSON>, "meta": {...}} without parsing the figure again."""
        return '{"figure": ' + self.figure_json + ', "meta": ' + json.dumps(self.meta) + "}"


def validate_overlay(case: Case, w: tuple[int, int], signals: list[SignalSpec], n: int) -> None:
    """Metric and name checks before any query (InvalidSignal)."""
    from telemetry.queries import overlay

    overlay.validate(OverlayQuery(case.cluster, case.t0, w[0], w[1], signals, max_points=n), allowed_hosts=None)


def case_overlay(case: Case, w: tuple[int, int], signals: list[SignalSpec], n: int) -> Overlay:
    """The overlay figure of ``signals`` over window ``w`` with about ``n`` points per series."""
    from investigations import charts
    from telemetry.queries import overlay

    validate_overlay(case, w, signals, n)
    found_peers = peers(case, signals)
    check_hosts(case.hosts, signals, found_peers)
    q = OverlayQuery(case.cluster, case.t0, w[0], w[1], signals, peers=found_peers, max_points=n)
    result = overlay.run_overlay(q, allowed_hosts=set(case.hosts) | set(found_peers))
    meta = {
        "source": result.source, "bucket_s": result.bucket_s, "peers": len(result.peers),
        "band_source": result.band_source,
        "points": int(sum(len(s.x) for s in result.series)), "events": len(result.events),
        "window": list(w), "signals": [signal_param(s) for s in signals],
        "empty": [signal_param(s.signal) for s in result.series if len(s.x) == 0],
    }
    return Overlay(charts.overlay_figure(result).to_json(), meta)


def lead_for_window(w: tuple[int, int]) -> int:
    """The lead window "what's different" compares: the part of the view before t0, bounded."""
    from telemetry.queries.differences import MAX_LEAD_S

    return max(rules.LEAD_WINDOW_MIN_S, min(-w[0], MAX_LEAD_S)) if w[0] < 0 else DEFAULT_LEAD_S


@dataclass
class Differences:
    rows: list  # telemetry.queries.differences.Difference, best first
    lead_s: int
    n_peers: int


class NoPeers(LookupError):
    pass


def case_differences(case: Case, w: tuple[int, int]) -> Differences:
    """Lead-window components of the case's hosts that differ most from healthy peers;
    NoPeers when no healthy peer reported data around t0."""
    from telemetry.queries import differences

    lead_s = lead_for_window(w)
    found_peers = peers(case, [])
    if not found_peers:
        raise NoPeers("No healthy peers reported data around t0, so there is nothing to compare against.")
    rows = differences.whats_different(differences.DifferenceQuery(
        cluster=case.cluster, t0=case.t0, lead_s=lead_s, affected_hosts=list(case.hosts), peers=found_peers,
        top_n=DIFFERENCES_TOP_N))
    return Differences(rows=rows, lead_s=lead_s, n_peers=len(found_peers))


def scope_of_metric(metric: str) -> str:
    return rules.scope_of_component(catalog.CATALOG[metric].component)


def default_signals(found, n: int = DEFAULT_SIGNALS) -> list[str]:
    """What a case opened without ``s=`` charts: the top rows of "what's different", one per metric
    while there are enough distinct metrics (four GPUs with the same runaway counter say less than
    four different counters), topped up with the next rows in rank order down to three."""
    picked = []
    seen = set()
    for d in found:
        if len(picked) == n:
            break
        if d.metric not in seen:
            picked.append(d)
            seen.add(d.metric)
    for d in found:
        if len(picked) >= min(3, n):
            break
        if d not in picked:
            picked.append(d)
    picked.sort(key=found.index)
    return [signal_param(SignalSpec(d.metric, d.host, d.component)) for d in picked]


__all__ = ["InvalidSignal", "Overlay", "Differences", "NoPeers", "case_overlay", "case_differences",
           "default_signals", "peers", "peers_if_needed", "check_view", "lead_for_window"]
