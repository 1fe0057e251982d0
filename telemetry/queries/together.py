"""Signals together: a hypothesis whose condition is two signals, often from different layers
("PCIe replays climb, then InfiniBand symbol errors within 30 min").

The one home of the combination's text (``parse``): ``and|then METRIC [threshold|rate|trend|rise] >|< NUMBER
within N min|h|s``, added to the hypothesis's own signal (A):
- ``A and B within N min``: both fire within N min of each other, in either order; the pair fires
  when its second signal does;
- ``A then B within N min``: B fires at most N min after A (or at the same sample); the pair
  fires when B does.

The fleet test of a combination (``run``) answers "does the pair beat each signal alone?": the
same windows before the outcome and the same matched controls (those where both metrics have
data) judged three times — A alone, B alone, the pair — each with its 2×2 table, lift, p, recall
and alarm precision, side by side. Signals of different layers sit on different parts (a GPU, a
NIC), so in a combination every alarm is counted per host: true when an interruption of the
outcome on that host follows within the lead window. A ``rise`` signal judges a window as its own
fleet test does (fleet_test._rise_at_end: the part's score of the window's own data, the signal
scan's reading), alone and in the pair: the pair fires in a window where it forms inside it and
each of its ``rise`` signals passes on that reading.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from telemetry import catalog, rules
from telemetry.queries import contrasts, phase
from telemetry.queries import fleet_test as ft
from telemetry.queries import windows

MODES = ("and", "then")
WITHIN_MIN_S = 60
WITHIN_MAX_S = 24 * 3600
_CONDITION_WORDS = {"threshold": "threshold", "value": "threshold", "rate": "rate", "trend": "trend", "rise": "rise"}
_WITHIN_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?)$", re.I)
FIELD = "combined_with"


class CombinationError(ft.NotTestable):
    """The combination's text cannot be read; the message names the part and what is expected."""


@dataclass(frozen=True)
class Together:
    mode: str  # and | then
    metric: str
    condition: str
    operator: str
    threshold: float
    within_s: int

    @property
    def text(self) -> str:
        """The normalised text a hypothesis stores (parse(text) gives this back)."""
        return (f"{self.mode} {self.metric} {self.condition} {self.operator} {self.threshold:g} "
                f"within {_duration(self.within_s)}")

    def signal(self, lead_s: int) -> ft.Signal:
        return ft.Signal(self.metric, self.condition, self.operator, self.threshold, lead_s)


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def parse(text: str) -> Together:
    """The combination in ``text``; CombinationError naming what is wrong otherwise."""
    words = " ".join((text or "").split())
    usage = "write it as 'and|then METRIC [threshold|rate|trend|rise] >|< NUMBER within N min'"
    if not words:
        raise CombinationError(f"{FIELD}: empty — {usage}")
    if len(words) > 300:
        raise CombinationError(f"{FIELD}: at most 300 characters (got {len(words)})")
    tokens = words.split(" ")
    mode = tokens[0].lower()
    if mode not in MODES:
        raise CombinationError(f"{FIELD}: starts with 'and' (both within N min of each other) or 'then' (the "
                               f"second within N min after the first), not {tokens[0]!r}; {usage}")
    lowered = [t.lower() for t in tokens]
    if "within" not in lowered:
        raise CombinationError(f"{FIELD}: ends with 'within N min' (or h, s): how close the two signals must fire")
    w = len(lowered) - 1 - lowered[::-1].index("within")
    within_s = _within(" ".join(tokens[w + 1:]))
    part = tokens[1:w]
    if not part:
        raise CombinationError(f"{FIELD}: no second signal between {mode!r} and 'within'; {usage}")
    found = catalog.resolve(part[0])
    if found is None:
        raise CombinationError(f"{FIELD}: unknown metric {part[0]!r} — not a canonical name or alias in the "
                               "metric catalog")
    rest = part[1:]
    condition = "threshold"
    if rest and rest[0].lower() in _CONDITION_WORDS:
        condition = _CONDITION_WORDS[rest[0].lower()]
        rest = rest[1:]
    elif rest and rest[0].lower() not in rules.OPERATORS and not rest[0][:1] in "<>":
        raise CombinationError(f"{FIELD}: {rest[0]!r} after {found.name} is not a condition "
                               f"({', '.join(rules.CONDITIONS)}) or an operator (> <)")
    if len(rest) == 1 and rest[0][:1] in "<>":  # ">5" written without a space
        rest = [rest[0][0], rest[0][1:]]
    if len(rest) != 2 or rest[0] not in rules.OPERATORS:
        raise CombinationError(f"{FIELD}: after {found.name} comes an operator (> or <) and a threshold, "
                               f"got {' '.join(rest)!r}")
    try:
        threshold = float(rest[1])
    except ValueError:
        raise CombinationError(f"{FIELD}: threshold {rest[1]!r} is not a number") from None
    if not np.isfinite(threshold):
        raise CombinationError(f"{FIELD}: threshold must be a finite number")
    return Together(mode, found.name, condition, rest[0], threshold, within_s)


def _within(text: str) -> int:
    m = _WITHIN_RE.match(text.strip())
    if not m:
        raise CombinationError(f"{FIELD}: 'within {text}' is not a duration such as '30 min', '2 h' or '90 s'")
    unit = m.group(2).lower()
    seconds = float(m.group(1)) * (1 if unit.startswith("s") else 3600 if unit.startswith("h") else 60)
    if not WITHIN_MIN_S <= seconds <= WITHIN_MAX_S or seconds != int(seconds):
        raise CombinationError(f"{FIELD}: within {text}: a whole number of seconds from 1 min to 24 h")
    return int(seconds)


def check(metric: str, condition: str, operator: str, threshold: float, together: Together) -> None:
    """A pair of one signal with itself says nothing the signal does not."""
    if (metric, condition, operator, float(threshold)) == (
            together.metric, together.condition, together.operator, together.threshold):
        raise CombinationError(f"{FIELD}: the second signal is the first one again ({together.metric}); "
                               "combine two different signals")


def pair_times(a: np.ndarray | None, b: np.ndarray | None, mode: str, within_s: int) -> np.ndarray:
    """Sorted times the pair fires on one host, from the sorted firing times of each signal."""
    if a is None or b is None or not len(a) or not len(b):
        return np.empty(0)

    def preceded(later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
        # later events with an earlier one in [t - within, t]
        i = np.searchsorted(earlier, later, side="right") - 1
        ok = i >= 0
        hit = np.zeros(len(later), dtype=bool)
        hit[ok] = later[ok] - earlier[i[ok]] <= within_s
        return later[hit]

    if mode == "then":
        return preceded(b, a)
    return np.unique(np.concatenate((preceded(b, a), preceded(a, b))))


# --- the fleet test of a pair ----------------------------------------------------------------

def _joint(cov_a: dict, cov_b: dict) -> dict:
    return {h: np.intersect1d(cov_a[h], cov_b[h]) for h in set(cov_a) & set(cov_b)}


def _per_host(fires: dict) -> dict:
    return {(h, ""): t for h, t in fires.items() if len(t)}


def run(first: ft.Signal, together: Together, outcome: windows.Outcome, *, clusters: list[str] | None = None,
        start: datetime | None = None, end: datetime | None = None,
        progress: Callable[[int, int, str], None] | None = None,
        timeout_s: int = ft.QUERY_TIMEOUT_S) -> dict:
    """The fleet test of ``first`` combined with ``together`` (module docstring): the pair's
    result, with ``alone`` (each signal's on the same windows) and ``side_by_side`` rows."""
    progress = progress or (lambda done, total, stage: None)
    check(first.metric, first.condition, first.operator, first.threshold, together)
    second = together.signal(first.lead_s)
    W = int(first.lead_s)
    clusters = clusters or windows.clusters_with_jobs(timeout_s=timeout_s)
    pair_text = (f"{first.text.rsplit(' within ', 1)[0]} {together.mode} {second.text.rsplit(' within ', 1)[0]} "
                 f"within {_duration(together.within_s)}, {W / 3600:g} h before")
    results = [ft.FleetTestResult(signal=s, outcome=outcome.label, clusters=list(clusters), range=None, n_outcome=0,
                                  controls={"same_hosts": 0, "peers": 0}) for s in (pair_text, first.text, second.text)]
    steps = 5 * max(1, len(clusters))
    lo_all = hi_all = None
    for ci, cluster in enumerate(clusters):
        def say(k: int, stage: str, _ci=ci) -> None:
            progress(5 * _ci + k, steps, f"cluster {cluster} ({_ci + 1}/{len(clusters)}): {stage}")

        say(0, "finding both metrics' history")
        ra = ft._tested_range(cluster, first.metric, start, end, timeout_s)
        rb = ft._tested_range(cluster, second.metric, start, end, timeout_s)
        if ra is None or rb is None or min(ra[1], rb[1]) <= max(ra[0], rb[0]):
            continue
        lo_s, hi_s = max(ra[0], rb[0]), min(ra[1], rb[1])
        lo_all = lo_s if lo_all is None else min(lo_all, lo_s)
        hi_all = hi_s if hi_all is None else max(hi_all, hi_s)
        say(1, "interruptions and their hosts")
        chosen, host_t0s = windows.outcome_interruptions(cluster, outcome, W, lo_s, hi_s, timeout_s=timeout_s)
        say(2, f"minutes where {first.metric} fires")
        fires_a, units_a, cov_a = ft._firing_minutes(cluster, first, lo_s, hi_s, timeout_s, host_t0s)
        say(3, f"minutes where {second.metric} fires")
        fires_b, units_b, cov_b = ft._firing_minutes(cluster, second, lo_s, hi_s, timeout_s, host_t0s)
        fires_pair = {h: pair_times(fires_a.get(h), fires_b.get(h), together.mode, together.within_s)
                      for h in set(fires_a) & set(fires_b)}
        coverage = _joint(cov_a, cov_b)
        say(4, f"{len(chosen)} interruptions of {outcome.label} against their controls, three ways")
        allocations = windows.Allocations.load(cluster, *windows.allocation_range(lo_s, hi_s, W), timeout_s=timeout_s)
        failing = contrasts.failing_units(cluster, chosen, outcome, timeout_s=timeout_s)
        excluded = windows.Exclusions()
        found = windows.matched_windows(cluster, chosen, host_t0s, W, lo_s, hi_s,
                                        sorted(h for h, v in coverage.items() if len(v)), allocations,
                                        excluded=excluded, failing=failing,
                                        failed=windows.failed_t0s(cluster, host_t0s, timeout_s=timeout_s))
        # a ``rise`` signal judges a window by the scan's reading (its own score at the window's
        # end), as the single-signal fleet test does; the pair fires in a window only where it
        # forms inside it and each of its ``rise`` signals passes there
        # Where the outcome names the failing part, each signal alone judges that part's window
        # (as its single-signal fleet test does) and the pair, whose signals sit on different
        # parts, the failing host's (its stand-in on the peers): a pair formed on another host of
        # the job is no lead of this failure.
        reads: list = [None, None, None]
        if any(u is not None for u in failing):
            host_only = contrasts.window_reads(found, chosen, failing, set())
            reads = [host_only] + [contrasts.window_reads(found, chosen, failing, ft.unit_families(
                cluster, sig.metric, lo_s, hi_s, timeout_s=timeout_s)) for sig in (first, second)]
        # a host idle for most of its past is not scored by a ``rise`` signal (ft.rise_left_out)
        left_out = [ft.rise_left_out(cluster, found, r, lo_s, hi_s, timeout_s=timeout_s)
                    if sig.condition == "rise" and found else {} for sig, r in zip((first, second), reads[1:])]
        pair_left_out = {wi: left_out[0].get(wi, frozenset()) | left_out[1].get(wi, frozenset())
                         for wi in set(left_out[0]) | set(left_out[1])}
        for wi, hs in pair_left_out.items():
            if found[wi].kind == "before":
                excluded.before_hosts_idle_past += len(hs)
            else:
                excluded.control_hosts_idle_past += len(hs)
        at_end = [ft._rise_at_end(cluster, sig, found, host_t0s, timeout_s, r, lo) if sig.condition == "rise" and found
                  else None for sig, r, lo in zip((first, second), reads[1:], left_out)]
        no_part = [None] * len(chosen)  # alarms per host: the two signals sit on different parts
        # firings on a host running no job raise no alarm (fleet_test._count_alarms)
        fired_hosts = set(fires_pair) | set(fires_a) | set(fires_b)
        runs = phase.host_runs(cluster, fired_hosts, lo_s, hi_s, timeout_s=timeout_s)["runs"] if fired_hosts else None
        for role, (result, fires, judged) in enumerate(zip(results, (fires_pair, fires_a, fires_b), (None, *at_end))):
            for w in found:
                w.fired_at = None
            ft._judge(found, fires, coverage, judged, reads[role], (None, units_a, units_b)[role],
                      (pair_left_out, *left_out)[role])
            result.component_windows += sum(r is not None for r, w in zip(reads[role] or (), found)
                                            if w.kind == "before")
            if role == 0:  # the pair
                for wi, w in enumerate(found):
                    if w.fired_at is not None and any(e is not None and not e.get(wi) for e in at_end):
                        w.fired_at = None
            result.n_outcome += len(chosen)
            result.matched_on_activity = result.matched_on_activity or bool(allocations)
            for key, value in excluded.as_dict().items():
                setattr(result.excluded, key, getattr(result.excluded, key) + value)
            ft._tally(result, found, chosen)
            ft._add_examples(result, cluster, found, chosen)
            ft._count_alarms(result, _per_host(fires), chosen, no_part, W, runs)
            result.node_days += sum(len(v) for v in coverage.values()) * windows.COVERAGE_S / 86400
    rng = None
    if lo_all is not None:
        iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat()  # noqa: E731
        rng = (iso(lo_all), iso(hi_all))
    out = []
    for result in results:
        result.range = rng
        result.examples.sort(key=lambda e: (not e["fired"], not e["has_data"], -(e["lead_s"] or 0), e["t0"]))
        del result.examples[ft.MAX_EXAMPLES:]
        out.append(result.as_dict())
    pair, alone_a, alone_b = out
    progress(steps, steps, "done")
    rows = []
    for role, r in (("together", pair), ("A alone", alone_a), ("B alone", alone_b)):
        rows.append({"role": role, "signal": r["signal"], "table": r["table"], "precision": r["precision"],
                     "precision_ci": r["precision_ci"], "recall": r["recall"], "recall_ci": r["recall_ci"],
                     "lift": r["lift"], "lift_ci": r["lift_ci"], "p": r["p"], "alarms": r["alarms"],
                     "true_alarms": r["true_alarms"], "idle_alarms": r["idle_alarms"],
                     "control_rate": r["control_rate"]})
    return {**pair, "combination": {"mode": together.mode, "within_s": together.within_s, "text": together.text},
            "alone": {"a": _brief(alone_a), "b": _brief(alone_b)}, "side_by_side": rows,
            "beats_each_alone": _beats(pair, alone_a) and _beats(pair, alone_b)}


def _brief(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "examples"}


def _beats(pair: dict, alone: dict) -> bool:
    """The pair's lift is higher, and its precision of alarms no worse (None: no alarms)."""
    if pair["lift"] is None or alone["lift"] is None or pair["lift"] <= alone["lift"]:
        return False
    return alone["precision"] is None or (pair["precision"] is not None and pair["precision"] >= alone["precision"])


