"""Contrasts that tell a cause from the workload: where the outcome names a component, its lead
window is that component's, compared three ways; and a flag for findings that moved on every host
of the job.

Units
-----
A unit is a host's component up to its first ``/`` (``gpu3/nvlink2`` -> ``gpu3``; ``mlx5_0/1``
-> ``mlx5_0``; '' for host-level series), its family the unit without digits (``gpu``). Per
window, the engine gives each unit's worst minute value (the scan's statistic, from the minutes
wholly inside the window). The failing unit of an interruption is the component of the outcome's
event near t0 (the GPU of the XID, the NIC of the link-down), through the inventory's PCI map
when the event itself carries none. When the metric has no series on that family (a host-level
or fan metric before an XID), the contrasts are between hosts, the failing host's worst value
against the others'.

The three contrasts (per failure, then combined over failures)
--------------------------------------------------------------
- **siblings**: the failing unit against the other units of its family in the same job at the
  same time. The job's workload is the same for all of them, so what the job did cancels out;
- **own history**: against the same unit's values in the earlier windows of the same length (up
  to ``OWN_WINDOWS`` of them, back to back before the lead window, none touching an
  interruption of that host): a part that was always noisy is no precursor of anything;
- **healthy**: against the units of the family in the failure's control windows (the same hosts
  at healthy times, healthy peers at the same time).
Each failure's p is the upper-tail mid-rank of its value among the reference values, in the
direction the finding went: ``(#{ref > v} + ½ (#{ref = v} + 1)) / (1 + n)`` (Lancaster's mid-p:
the chance that a value drawn at random from the n + 1 is above v, ties counted half). A failure
whose value ties with every reference value (a counter at 0 like all its siblings: most failures
of a class whose precursor some of them carry) says nothing about the order and is left out of
that contrast; the conventional p, ``(1 + #{ref >= v}) / (1 + n)``, gave it 1, and a few dozen
such 1s drowned the failures that did stand out in the Fisher combination (the 256-host bench
fleet, the contrasts read on levels: net.symbol_errors before a link-down, siblings p 0.26 over
107 failures; sram_sbe before XID 48, p 1 over 27). Beside Fisher's combination, which credits
every failure a little further out, the count of failures that are the single highest of their
own set (``at_top``) against chance (each is with chance 1 / (n + 1) where one value is highest:
a sum of independent draws, exact): a precursor before a few of the failures only puts those on
top and leaves the rest as chance has them, and with 7 siblings a failure on top has a mid-rank p
of 1/16 at best, which Fisher's combination over a hundred others drowns. The contrast's p is the
smaller of the two, doubled (``p_fisher`` and ``p_at_top`` beside it). A contrast holds
(``survives``) when that p is below 0.05.

Over-represented on a rack, driver or firmware
----------------------------------------------
``concentration`` finds the values of rack, driver, host firmware and GPU model (the inventory,
kept from every ingest path) the failures are over-represented on: a one-sided binomial test of the
failures there against the group's share of the cluster's hosts, p < 0.01, two failures at least. Where a
metric also runs worse on that group's hosts at healthy times (Mann–Whitney over the control
windows' hosts, p < 0.01: ``GroupTrack``), the group is a rival explanation — its hosts fail more
for their own reasons and the metric may only mark them. The finding must then also hold within
the group (``within_group``: before-failure windows against controls of the same stratum, on the
group against on the group, off it against off it — van Elteren's stratified rank-sum test); one
that does not is flagged, one that does (a precursor that rises before failures on the group's
hosts as elsewhere) is not.

Job-wide flag
-------------
Per failure of a job with two or more hosts, the share of the job's other hosts whose worst
value exceeds the 90th percentile of the healthy control hosts (for a finding *lower* before the
outcome — a metric without a bad direction — the share below their 10th percentile). When that
share is at least one half in the median failure, the finding is flagged "moved on every host of
the job": the workload (a heavy phase, a checkpoint write, the job's own temperature) explains it
better than a failing part, unless the failing unit still stands out among its siblings.

Where the outcome names no part (a Slurm NODE_FAIL: which host failed is not known), there are no
siblings of a failing part to compare with; the within-job contrast is then **job spread**: how
far the job's most extreme host stands out from its other hosts (its distance from the median of
theirs — below it, for a finding lower before the outcome — over their own spread, ``_spread``) in
the window before the outcome, ranked among the same figure in that failure's control windows of
three or more hosts. A failing host that heats up stands out from its job peers more than any host does at
healthy times; a checkpoint write or a heavy phase moves every host together, and the spread
stays as it was: the workload cancels here as it does among a failing part's siblings.
"""
from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, chi2, mannwhitneyu, norm, rankdata

from telemetry import store

OWN_WINDOWS = 24
JOB_WIDE_SHARE = 0.5
SURVIVES_P = 0.05
CONCENTRATED_P = 0.01  # failures over-represented on a rack/driver/firmware
TRACKS_P = 0.01  # a metric worse on that group's hosts at healthy times
EVENT_WINDOW_S = 600

_DIGITS = re.compile(r"[0-9]+")


def family(unit: str) -> str:
    return _DIGITS.sub("", unit)


def read_host(window, job_hosts, failing_host: str) -> str:
    """The host a matched window reads where the outcome names the failing part: the failing host
    itself in the window before the outcome and at the same hosts' other times; in a healthy-peer
    window, the peer that takes the failing host's place (the same position among the job's
    hosts), so its namesake part stands in for the failing part."""
    if window.kind != "peers":
        return failing_host
    pos = job_hosts.index(failing_host) if failing_host in job_hosts else 0
    return window.hosts[min(pos, len(window.hosts) - 1)]


def window_reads(found, chosen, failing, families) -> list[tuple[str, str | None] | None]:
    """Per matched window, what a component-level reading of it reads (the signal scan's value,
    the pin's readings, the fleet test's firing): ``None`` where its interruption names no part
    (every part of every host of the window); else ``(host, unit)`` — the failing unit on the
    failing host, or its namesake on the peer standing in for it (``read_host``) — or
    ``(host, None)`` (every part of that one host) where the metric has no series of the failing
    unit's family (``families``: the unit families the metric has; a fan before an XID)."""
    out: list[tuple[str, str | None] | None] = []
    for w in found:
        fail = failing[w.index] if w.index < len(failing) else None
        if fail is None:
            out.append(None)
            continue
        host = read_host(w, chosen[w.index].hosts, fail[0])
        out.append((host, fail[1] if family(fail[1]) in families else None))
    return out


def read_parts(values: dict[tuple[str, str], float], read: tuple[str, str | None] | None) -> dict:
    """The parts of ``values`` ({(host, unit): value}) that a window reading ``read``
    (``window_reads``) reads."""
    if read is None:
        return values
    host, unit = read
    if unit is not None:
        return {read: values[read]} if read in values else {}
    return {k: v for k, v in values.items() if k[0] == host}


# The component named by the outcome's events near each t0 (the inventory's PCI map fills in an
# event logged before the GPU was known).
_FAILING_SQL = (
    "SELECT ev.host AS host, ev.t AS t, if(ev.component != '', ev.component, inv.component) AS component "
    "FROM (SELECT host, toUnixTimestamp(ts) AS t, component, attributes['pci_bus_id'] AS pci FROM events "
    "      WHERE cluster = {cluster:String} AND host IN {hosts:Array(String)} "
    "      AND ((kind = 'xid' AND code IN {codes:Array(Int32)}) OR kind IN {kinds:Array(String)}) "
    "      AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')) AS ev "
    "LEFT JOIN (SELECT host, pci_bus_id, component FROM components FINAL "
    "           WHERE cluster = {cluster:String} AND pci_bus_id != '') AS inv "
    "ON inv.host = ev.host AND inv.pci_bus_id = ev.pci "
    "ORDER BY t")


# The events that name a failing part of their own: a link going down (the port), a power supply
# failing (the PSU); with the hardware XIDs (hardware_xids) they name the part of an interruption
# whose outcome does not (failing_units)
PART_EVENT_KINDS = ("link_down", "psu_failure")


def hardware_xids() -> list[int]:
    """The XIDs that name a failing GPU: not a software error or notice (13, 31, 43, 45 ... name a
    GPU the job used, not a failing one), and not an informational one."""
    from telemetry.xid import XIDS

    return sorted(c for c, x in XIDS.items() if x.category != "software" and x.severity != "info")


def failing_units(cluster: str, chosen, outcome, *, timeout_s: int) -> list[tuple[str, str] | None]:
    """Per chosen interruption, (host, unit) of the component that failed, or None where nothing
    near t0 names one.

    An outcome by XID or event names the part of its own event (the GPU of the XID, the port of
    the link-down). An outcome that names no event — a root cause from verdicts (``cause: PSU``),
    a Slurm state (``NODE_FAIL``), any interruption — names the part its interruption's own
    hardware event does near t0, where it has one: a hardware XID (``hardware_xids``), a link-down,
    a power-supply failure (PART_EVENT_KINDS). An HBM cause is then judged on the GPU of its XID 94,
    as the XID outcome judges it, and a NODE_FAIL whose host logged a PSU failure on that PSU's
    host, not on any part of any host of the job; a NODE_FAIL with no such event keeps the job's
    hosts (None)."""
    xids, kinds = list(getattr(outcome, "xids", ()) or ()), list(getattr(outcome, "events", ()) or ())
    if not xids and not kinds:
        xids, kinds = hardware_xids(), list(PART_EVENT_KINDS)
    if not chosen or not (xids or kinds):
        return [None] * len(chosen)
    hosts = sorted({h for it in chosen for h in it.hosts})
    rows = store.query_rows(_FAILING_SQL, {
        "cluster": cluster, "hosts": hosts, "codes": xids, "kinds": kinds,
        "lo_s": min(it.t0 for it in chosen) - EVENT_WINDOW_S, "hi_s": max(it.t0 for it in chosen) + EVENT_WINDOW_S + 1,
    }, tag="contrasts:failing_units", timeout_s=timeout_s)
    out: list[tuple[str, str] | None] = []
    for it in chosen:
        job_hosts = set(it.hosts)
        near = [(abs(int(t) - it.t0), h, c) for h, t, c in rows
                if h in job_hosts and c and abs(int(t) - it.t0) <= EVENT_WINDOW_S]
        if near:
            _, h, c = min(near)
            out.append((h, c.split("/", 1)[0]))
        else:
            out.append(None)
    return out


@dataclass
class OwnWindow:
    kind: str
    index: int
    hosts: tuple[str, ...]
    start: int
    end: int


def own_history_windows(chosen, units, host_t0s: dict[str, np.ndarray], W: int, lo_s: int) -> list[OwnWindow]:
    """Back-to-back windows of the lead window's length before each failure with a known failing
    host, on that host only, skipping any that an interruption of the host touches."""
    out = []
    for i, (it, unit) in enumerate(zip(chosen, units)):
        if unit is None:
            continue
        host = unit[0]
        t0s = host_t0s.get(host, np.empty(0, dtype=np.int64))
        for j in range(1, OWN_WINDOWS + 1):
            s, e = it.t0 - (j + 1) * W, it.t0 - j * W
            if s < lo_s:
                break
            k = int(np.searchsorted(t0s, s, side="left"))
            if k < len(t0s) and t0s[k] < e + W:
                continue
            out.append(OwnWindow("own", i, (host,), s, e))
    return out


def _rank_p(v: float, ref: np.ndarray) -> float | None:
    """The upper-tail mid-rank p of ``v`` among ``ref`` (see the module's docstring); None where
    there is nothing to rank against, or where ``v`` ties with every reference value (no order)."""
    ref = ref[np.isfinite(ref)]
    if not np.isfinite(v) or not len(ref):
        return None
    ties = int(np.count_nonzero(ref == v))
    if ties == len(ref):
        return None
    return float((np.count_nonzero(ref > v) + 0.5 * (ties + 1)) / (1 + len(ref)))


def _top(v: float, ref: np.ndarray) -> tuple[float, bool] | None:
    """(the chance, under no difference, that the failure's value is the single highest of the
    n + 1, whether it is): the failure is one of the n + 1 values at random, so it is the single
    highest with chance 1 / (n + 1) where one value is, 0 where the highest is tied. None as
    ``_rank_p`` (nothing to rank against, or ``v`` ties with every reference value)."""
    ref = ref[np.isfinite(ref)]
    if not np.isfinite(v) or not len(ref) or np.all(ref == v):
        return None
    top = float(ref.max())
    if v > top:
        return 1.0 / (1 + len(ref)), True
    if v == top or np.count_nonzero(ref == top) > 1:
        return 0.0, False
    return 1.0 / (1 + len(ref)), False


def _at_top_p(tops: list[tuple[float, bool]]) -> float | None:
    """P(at least as many failures the single highest of their own set as seen) under no
    difference: a sum of independent Bernoulli draws (tail._poisson_binomial_sf), exact given the
    values. A precursor before some of the failures only puts those on top of their siblings (or
    of their own past) and leaves the rest as chance has them; Fisher's combination of mid-ranks
    barely moves for them (with 7 siblings the lowest mid-rank p is 1/16)."""
    from telemetry.queries.tail import _poisson_binomial_sf

    if not tops:
        return None
    probs = np.array([q for q, _ in tops])
    return _poisson_binomial_sf(probs, sum(hit for _, hit in tops))


def _fisher(ps: list[float]) -> float | None:
    ps = [p for p in ps if p is not None]
    if not ps:
        return None
    stat = -2.0 * sum(math.log(max(p, 1e-300)) for p in ps)
    return float(chi2.sf(stat, 2 * len(ps)))


# the readings a within-job contrast can be of: (statistic, side) — see ``collect``
READINGS = (("score", "high"), ("score", "low"), ("level", "high"), ("level", "low"))


def _three(ps: dict, source: dict, before_wi: int, control_wins: list[int], own_wins: list[int],
           fail, s: float) -> str | None:
    """One failure's three contrast p-values (siblings, own history, healthy) on one reading:
    ``source`` the windows' values per (host, unit), ``s`` the orientation (+1: higher counts as
    worse, −1: lower does). Appended to ``ps``; returns the level compared ("component" / "host")
    or None where the failing part or host has no value."""
    vals = source.get(before_wi, {})
    if not fail or not vals:
        return None
    fam = family(fail[1])
    if fail in vals:
        v = s * vals[fail]
        sib = np.array([s * x for (h, u), x in vals.items() if (h, u) != fail and family(u) == fam])
        healthy = np.array([s * x for wi in control_wins for (h, u), x in source.get(wi, {}).items()
                            if family(u) == fam])
        own = np.array([s * source.get(wi, {}).get(fail, np.nan) for wi in own_wins])
        kind = "component"
    else:
        hosts_v = _worst_by_host(vals, s)
        if fail[0] not in hosts_v:
            return None
        v = hosts_v[fail[0]]
        sib = np.array([x for h, x in hosts_v.items() if h != fail[0]])
        healthy = np.array([x for wi in control_wins for x in _hosts_worst(source.get(wi, {}), s)])
        own = np.array([_host_worst(source.get(wi, {}), s) for wi in own_wins])
        kind = "host"
    for name, ref in (("siblings", sib), ("own_history", own), ("healthy", healthy)):
        ps[name].append(_rank_p(v, ref))
        top = _top(v, ref)
        if top is not None:
            ps["top:" + name].append(top)
    return kind


def collect(unit_values: dict[int, dict[tuple[str, str], float]], windows, units, highest: bool,
            into: dict | None = None, *, levels: dict | None = None, highest_level: bool | None = None,
            groups: "list[Concentration] | None" = None) -> dict:
    """Each failure's contrast p-values and job-wide share for one metric in one cluster, added to
    ``into`` (``summarize`` turns the pooled parts into the result).

    ``unit_values[window index][(host, unit)]`` = the unit's worst value in that window;
    ``windows`` the scan's windows (kinds before / same_hosts / peers / own, ``index`` = failure);
    ``units[i]`` the failing (host, unit) of failure i or None; ``levels`` (same shape, optional)
    the units' raw values, which the group test (``summarize``'s tracks_group) compares instead:
    a group that runs hotter at any time shows in its level, not in a self-normalised score.
    The three contrasts are kept for each reading a row may test (``READINGS``: the scores or the
    levels, each on the metric's bad side — ``highest`` / ``highest_level`` — and on the other),
    and ``summarize`` gives the one the row tested.
    ``groups``: the groups the failures concentrate on (``concentration``, every cluster's, known
    before any metric is read); only for them are the control hosts' levels kept, inside and outside
    each group, as flat float arrays — a fleet's control windows × hosts × metrics as Python pairs
    grew the scan's memory with the fleet (~86 bytes a pair; 8 here, and none without a group)."""
    level_values = unit_values if levels is None else levels
    sign_level = (1.0 if highest else -1.0) if highest_level is None else (1.0 if highest_level else -1.0)
    sign = 1.0 if highest else -1.0
    by_failure: dict[int, dict[str, list[int]]] = {}
    for wi, w in enumerate(windows):
        by_failure.setdefault(w.index, {}).setdefault(w.kind, []).append(wi)
    groups = list(groups or ())
    into = into if into is not None else {"ps": {key: {"siblings": [], "own_history": [], "healthy": [],
                                                       "top:siblings": [], "top:own_history": [], "top:healthy": []}
                                                 for key in READINGS},
                                          "shares": [], "levels": set(), "failing_hosts": [], "shares_low": [],
                                          "spread": {"up": [], "down": []}, "spread_top": {"up": [], "down": []},
                                          "group_levels": [(array("d"), array("d")) for _ in groups]}
    shares = into["shares"]
    # the statistic a row may test (scores, or the failing part's level) on either side (the
    # metric's bad direction, "high"; the other, "low": a finding lower before the outcome)
    read = {("score", "high"): (unit_values, sign), ("score", "low"): (unit_values, -sign),
            ("level", "high"): (level_values, sign_level), ("level", "low"): (level_values, -sign_level)}
    for i, kinds in sorted(by_failure.items()):
        before = kinds.get("before", [])
        if not before:
            continue
        vals = unit_values.get(before[0], {})
        if not vals:
            continue
        hosts_v: dict[str, float] = {}
        for (h, u), v in vals.items():
            hosts_v[h] = max(hosts_v.get(h, -np.inf), sign * v)
        control_wins = kinds.get("same_hosts", []) + kinds.get("peers", [])
        fail = units[i] if i < len(units) else None
        into["failing_hosts"].append(fail[0] if fail else tuple(windows[before[0]].hosts))
        for wi in control_wins if groups else ():
            by_h: dict[str, float] = {}
            for (h, _), x in level_values.get(wi, {}).items():
                by_h[h] = max(by_h.get(h, -np.inf), sign_level * x)
            for g, (inside, outside) in zip(groups, into["group_levels"]):
                for h, x in by_h.items():
                    if math.isfinite(x):
                        (inside if h in g.hosts else outside).append(x)
        for key, (source, s) in read.items():
            kind = _three(into["ps"][key], source, before[0], control_wins, kinds.get("own", []), fail, s)
            if kind:
                into["levels"].add(kind)
        # job-wide: the job's other hosts against the healthy control hosts
        others = [x for h, x in hosts_v.items() if not fail or h != fail[0]]
        by_control = [_hosts_worst(unit_values.get(wi, {}), sign) for wi in control_wins]
        ref = np.array([x for xs in by_control for x in xs])
        ref = ref[np.isfinite(ref)]
        if len(hosts_v) >= 2 and len(others) and len(ref):
            shares.append(float(np.mean(np.asarray(others) > np.quantile(ref, 0.9))))
            into["shares_low"].append(float(np.mean(np.asarray(others) < np.quantile(ref, 0.1))))
        if fail is None and len(hosts_v) >= 2:
            # no failing part named: the job's most extreme host against its others (job spread)
            # (a host apart from identical others — quiet counters at 0 — is infinitely far: ranked
            # as the farthest, tied with any control as far, not dropped as a non-finite value)
            for way in ("up", "down"):
                ref_spread = np.nan_to_num([_spread(xs, way) for xs in by_control], nan=np.nan, posinf=np.finfo(float).max)
                v = float(np.nan_to_num(_spread(list(hosts_v.values()), way), nan=np.nan, posinf=np.finfo(float).max))
                into["spread"][way].append(_rank_p(v, np.asarray(ref_spread, dtype=float)))
                top = _top(v, np.asarray(ref_spread, dtype=float))
                if top is not None:
                    into["spread_top"][way].append(top)
    return into


def _spread(host_values: list[float], way: str) -> float:
    """How far the job's most extreme host (highest for ``up``, lowest for ``down``) stands out
    from its other hosts, in their own spread: its distance from their median over their scaled
    median absolute deviation (infinite from identical others, 0 at them). Scale-free on purpose:
    scores are in units of each part's own past, so a job-wide move of 20 of them comes with hosts
    a few tenths apart (each host's past has its own width) where quiet hosts sit a few hundredths
    apart, and a raw gap would read that as a host standing out. NaN with fewer than three hosts
    with a value (no spread among the others)."""
    xs = np.sort(np.asarray([x for x in host_values if np.isfinite(x)], dtype=float))
    if len(xs) < 3:
        return np.nan
    extreme, others = (xs[-1], xs[:-1]) if way == "up" else (xs[0], xs[1:])
    mid = float(np.median(others))
    gap = float(extreme - mid) if way == "up" else float(mid - extreme)
    scale = 1.4826 * float(np.median(np.abs(others - mid)))
    if scale == 0:
        return np.inf if gap > 0 else 0.0
    return gap / scale


def summarize(parts: dict | None, groups: "list[Concentration] | None" = None, *, low: bool = False,
              statistic: str = "score") -> dict:
    """The three contrasts (combined p, failures behind it, whether it holds) — with ``job_spread``
    where failures name no part —, the job-wide flag, and, for each group the failures concentrate
    on (``concentration``), a flag when the metric also runs worse on that group's hosts at healthy
    times: the group, not the coming failure, explains it. ``low``: the finding is lower before the
    outcome (a metric without a bad direction), so the contrasts, job-wide and spread read the low
    side. ``statistic``: what the row tested ("score" or "level", signal_scan), which the three
    contrasts then compare — a gate on another reading than the finding's tests something else (the
    256-host bench fleet: a PCIe rate's level lower before NODE_FAIL, its failing parts' *scores*
    higher than their siblings' at p 0.00014, so the within-job gate passed a workload finding)."""
    if not parts:
        return {"level": None, "contrasts": {}, "job_wide_share": None, "job_wide": None, "tracks_group": []}
    ps, levels = parts["ps"][(statistic, "low" if low else "high")], parts["levels"]
    shares = parts["shares_low"] if low else parts["shares"]
    multi = len(shares)
    out = {}
    way = "down" if low else "up"
    for name, plist, tops in [*((n, pl, ps.get("top:" + n, [])) for n, pl in ps.items() if not n.startswith("top:")),
                              ("job_spread", parts["spread"][way], parts.get("spread_top", {}).get(way, []))]:
        got = [p for p in plist if p is not None]
        if name == "job_spread" and not got:
            continue
        # Fisher's combination (every failure a little further out) and the count of failures on
        # top of their own set (a few failures far out), each fixed in advance: the smaller p,
        # doubled (Bonferroni over the two)
        p_fisher, p_top = _fisher(got), _at_top_p(tops)
        p = p_fisher if p_top is None or p_fisher is None else min(1.0, 2.0 * min(p_fisher, p_top))
        out[name] = {"p": p, "failures": len(got), "survives": p is not None and p < SURVIVES_P,
                     "p_fisher": p_fisher, "p_at_top": p_top, "at_top": sum(hit for _, hit in tops),
                     "expected_at_top": float(sum(q for q, _ in tops))}
    share = float(np.median(shares)) if shares else None
    flag = None
    if share is not None and multi >= 2 and share >= JOB_WIDE_SHARE:
        flag = (f"moved on every host of the job: {'below' if low else 'above'} the healthy hosts' "
                f"{10 if low else 90}th percentile on {share:.0%} of the job's other hosts (median over {multi} failures)")
    tracks = []
    for g, (inside, outside) in zip(groups or (), parts["group_levels"]):
        inside, outside = np.asarray(inside, dtype=float), np.asarray(outside, dtype=float)
        if len(inside) >= 3 and len(outside) >= 3:
            res = mannwhitneyu(inside, outside, alternative="greater")
            auc = float(res.statistic) / (len(inside) * len(outside))
            if res.pvalue < TRACKS_P:
                tracks.append(GroupTrack(g, auc, float(res.pvalue)))
    return {"level": "component" if "component" in levels else ("host" if levels else None),
            "contrasts": out, "job_wide_share": share, "job_wide": flag, "tracks_group": tracks}


@dataclass
class GroupTrack:
    """A group the failures concentrate on where the metric also runs worse at healthy times: a
    rival explanation of a finding, to be tested within the group (``within_groups``)."""
    group: "Concentration"
    auc: float  # the group's hosts against the others, at healthy times (control windows)
    p: float

    def text(self) -> str:
        g = self.group
        return (f"over-represented on {g.dimension} {g.value}: {g.failures} of {g.of} failures on "
                f"{g.fleet_share:.0%} of the hosts, and it runs worse there at healthy times too "
                f"(AUC {self.auc:.2f} against the other hosts)")


@dataclass
class Concentration:
    dimension: str  # rack | driver | firmware | gpu model
    value: str
    failures: int  # failures on hosts of this value
    of: int  # failures with a known host
    fleet_share: float  # share of the cluster's hosts with this value
    p: float  # binomial test, one-sided: more failures there than its share of the hosts gives
    hosts: frozenset

    def as_dict(self) -> dict:
        return {"dimension": self.dimension, "value": self.value, "failures": self.failures, "of": self.of,
                "fleet_share": self.fleet_share, "p": self.p}


_INVENTORY_SQL = ("SELECT host, rack, driver_version, firmware_version, gpu_model FROM hosts FINAL "
                  "WHERE cluster = {cluster:String}")


def concentration(cluster: str, failing_hosts: list, *, timeout_s: int) -> list[Concentration]:
    """Racks, drivers, firmware and GPU models the failures are over-represented on (binomial test
    against the group's share of the cluster's hosts, p < CONCENTRATED_P, at least two failures). A failure whose
    failing host is unknown counts on the value most of its job's hosts share."""
    rows = store.query_rows(_INVENTORY_SQL, {"cluster": cluster}, tag="contrasts:inventory", timeout_s=timeout_s)
    if not rows or not failing_hosts:
        return []
    dims = ("rack", "driver", "firmware", "gpu model")
    value = {dim: {r[0]: r[i + 1] for r in rows if r[i + 1]} for i, dim in enumerate(dims)}
    out = []
    for dim in dims:
        by_host = value[dim]
        if len(set(by_host.values())) < 2:
            continue  # one value everywhere: nothing to be over-represented on
        seen = []
        for f in failing_hosts:
            vals = [by_host.get(h) for h in ((f,) if isinstance(f, str) else f)]
            vals = [v for v in vals if v]
            if vals:  # ties go to the first value in sorted order (a set's order changes from run to run)
                seen.append(max(sorted(set(vals)), key=vals.count))
        n_hosts = len(by_host)
        for v in sorted(set(seen)):
            a = seen.count(v)
            members = frozenset(h for h, x in by_host.items() if x == v)
            if a < 2:
                continue
            p = float(binomtest(a, len(seen), len(members) / n_hosts, alternative="greater").pvalue)
            if p < CONCENTRATED_P:
                out.append(Concentration(dim, v, a, len(seen), len(members) / n_hosts, p, members))
    return out


def in_group(hosts, group: "Concentration") -> bool:
    """Does a window belong to the group: its host (one host), or most of its hosts (a job's
    window, as ``concentration`` counts a failure whose failing host is unknown)."""
    return 2 * sum(h in group.hosts for h in hosts) > len(hosts)


def stratified_p(before: list[tuple[float, bool]], control: list[tuple[float, bool]],
                 alternative: str = "greater") -> float | None:
    """The van Elteren test: Wilcoxon rank sums of ``before`` against ``control`` within each
    stratum (the bool, or any label: phase strata have three), combined with weights 1/(N_s + 1) —
    is ``before`` worse than ``control`` when only windows of the same stratum are compared? Normal
    approximation with the tie correction; None where no stratum has windows on both sides."""
    num = var = 0.0
    for stratum in dict.fromkeys([s for _, s in before] + [s for _, s in control]):
        b = np.array([v for v, s in before if s == stratum and np.isfinite(v)])
        c = np.array([v for v, s in control if s == stratum and np.isfinite(v)])
        n1, n2 = len(b), len(c)
        if not n1 or not n2:
            continue
        n = n1 + n2
        ranks = rankdata(np.r_[b, c])
        _, ties = np.unique(np.r_[b, c], return_counts=True)
        v = n1 * n2 / 12.0 * ((n + 1) - float(np.sum(ties ** 3 - ties)) / (n * (n - 1)))
        w = 1.0 / (n + 1)
        num += w * (float(ranks[:n1].sum()) - n1 * (n + 1) / 2.0)
        var += w * w * v
    if var <= 0:
        return None
    z = num / math.sqrt(var)
    return float(2 * norm.sf(abs(z)) if alternative == "two-sided" else norm.sf(z))


def stratified_gate_p(before: list[tuple[float, object]], control: list[tuple[float, object]],
                      alternative: str = "greater") -> float | None:
    """A gate's test within strata, the scan's two tests as the scan runs them: the van Elteren
    rank test (``stratified_p``) and, one-sided, the tail test within the same strata
    (``tail.tail_test``: a finding carried by a few windows far out is judged on them within the
    strata too, not only on the ranks, which it barely moves); the smaller p, doubled."""
    from telemetry.queries import tail

    p = stratified_p(before, control, alternative)
    if alternative != "greater" or p is None:
        return p
    got = tail.tail_test([v for v, _ in before], [v for v, _ in control],
                         b_strata=[s for _, s in before], c_strata=[s for _, s in control])
    return p if got["p"] is None else min(1.0, 2.0 * min(p, got["p"]))


def within_group(track: GroupTrack, before: list[tuple[float, tuple]], control: list[tuple[float, tuple]],
                 alternative: str = "greater") -> dict:
    """Does a finding hold within a group it tracks? ``before`` / ``control``: the scan's window
    values with the hosts each was read on. The windows before the outcome are compared with the
    controls of the same stratum only — on the group against on the group, off it against off it
    (``stratified_p``) — so a metric that only marks the group (worse there at any time, and most
    failures there) has nothing left, and a precursor that rises before failures inside the group
    as outside it holds (``stratified_gate_p``: the rank test and the tail test within the strata).
    With the evidence: the within-group AUC and window counts."""
    g = track.group
    b = [(v, in_group(h, g)) for v, h in before]
    c = [(v, in_group(h, g)) for v, h in control]
    p = stratified_gate_p(b, c, alternative)
    bi = [v for v, s in b if s]
    ci = [v for v, s in c if s]
    auc = None
    if bi and ci:
        res = mannwhitneyu(bi, ci, alternative="two-sided")
        auc = float(res.statistic) / (len(bi) * len(ci))
    return {"dimension": g.dimension, "value": g.value, "failures": g.failures, "of": g.of,
            "fleet_share": g.fleet_share, "runs_worse_auc": track.auc, "runs_worse_p": track.p,
            "p": p, "auc_within": auc, "before_within": len(bi), "controls_within": len(ci),
            "holds": p is not None and p < SURVIVES_P}


def _worst_by_host(vals: dict[tuple[str, str], float], sign: float) -> dict[str, float]:
    by: dict[str, float] = {}
    for (h, _), v in vals.items():
        by[h] = max(by.get(h, -np.inf), sign * v)
    return by


def _hosts_worst(vals: dict[tuple[str, str], float], sign: float) -> list[float]:
    return list(_worst_by_host(vals, sign).values())


def _host_worst(vals: dict[tuple[str, str], float], sign: float) -> float:
    got = _hosts_worst(vals, sign)
    return max(got) if got else np.nan
