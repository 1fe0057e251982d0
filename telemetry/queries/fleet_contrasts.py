"""Component contrasts of a fleet test: where the outcome names the failing part (the GPU of an
XID, the NIC of a link-down), did the rule fire on that part, and not on the rest?

The fleet test's 2×2 table compares the windows before the outcome with healthy controls — the
**healthy** contrast. Two more, per failure whose part has series of the metric:
- **siblings**: the other parts of the same family (``gpu0`` … ``gpu7``) on the job's hosts, in
  the same lead window. The job's workload is the same for all of them: a rule that fires on
  the siblings as often as on the failing part is tracking the workload, not the failure;
- **own history**: the failing part's own earlier windows of the same length (back to back before
  the lead window, none touched by an interruption of its host, only those where the metric has
  data — telemetry.queries.contrasts.own_history_windows): a part that always fires predicts nothing.
Each is a 2×2 of its own (fired / quiet, the failing part's lead windows against the reference
windows) with a one-sided Fisher p; a contrast **holds** at p < 0.05. A failure whose part fired
while at least half of its siblings fired too counts as job-wide; when that is most of the fired
failures with siblings, the result is flagged: the workload may explain the rule.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import fisher_exact

from telemetry import store
from telemetry.queries import contrasts, windows
from telemetry.stats import jeffreys_interval

HOLDS_P = 0.05
JOB_WIDE_SHARE = 0.5

_UNITS_SQL = ("SELECT DISTINCT host, splitByChar('/', component)[1] AS unit FROM samples_1m "
              "WHERE cluster = {cluster:String} AND metric = {metric:String} "
              "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64})")


@dataclass
class PartCounts:
    failures: int = 0  # failures whose outcome names a part that has series of the metric
    fired: int = 0  # ... whose part fired in its lead window
    sibling_windows: int = 0  # (sibling part, failure) pairs
    sibling_fired: int = 0
    own_windows: int = 0
    own_fired: int = 0
    fired_with_siblings: int = 0  # fired failures that had sibling parts
    job_wide: int = 0  # ... where at least half the siblings fired too

    def as_dict(self) -> dict | None:
        if not self.failures:
            return None

        def share(k: int, n: int) -> dict:
            rate, lo, hi = jeffreys_interval(k, n - k) if n else (None, None, None)
            return {"fired": k, "windows": n, "rate": rate, "ci": [lo, hi]}

        def versus(k: int, n: int) -> dict:
            out = share(k, n)
            p = (float(fisher_exact([[self.fired, k], [self.failures - self.fired, n - k]],
                                    alternative="greater").pvalue) if n else None)
            return {**out, "p": p, "holds": p is not None and p < HOLDS_P}

        flagged = bool(self.fired_with_siblings) and self.job_wide * 2 > self.fired_with_siblings
        return {"failures": self.failures, "failing_part": share(self.fired, self.failures),
                "siblings": versus(self.sibling_fired, self.sibling_windows),
                "own_history": versus(self.own_fired, self.own_windows),
                "job_wide": {"failures": self.job_wide, "of": self.fired_with_siblings, "flagged": flagged}}


def _fired(times: np.ndarray | None, start: float, end: float) -> bool:
    if times is None or not len(times):
        return False
    i = int(np.searchsorted(times, start, side="left"))
    return bool(i < len(times) and times[i] < end)


def collect(counts: PartCounts, cluster: str, metric: str, by_unit: dict, chosen, failing, host_t0s: dict,
            coverage: dict, W: int, lo_s: int, hi_s: int, *, timeout_s: int) -> None:
    """Add one cluster's failures to ``counts``; ``by_unit[(host, unit)]`` = sorted firing times,
    ``failing[i]`` = the (host, unit) failure i names, or None."""
    if not any(failing):
        return
    units_by_host: dict[str, list[str]] = {}
    for host, unit in store.query_rows(_UNITS_SQL, {"cluster": cluster, "metric": metric, "lo_s": lo_s, "hi_s": hi_s},
                                       tag="fleet_test:units", timeout_s=timeout_s):
        units_by_host.setdefault(host, []).append(unit)
    known = {(h, u) for h, us in units_by_host.items() for u in us}
    for it, part in zip(chosen, failing):
        if part is None or part not in known:
            continue
        start, end = it.t0 - W, it.t0
        counts.failures += 1
        fired = _fired(by_unit.get(part), start, end)
        counts.fired += fired
        kin = contrasts.family(part[1])
        siblings = [(h, u) for h in it.hosts for u in units_by_host.get(h, ())
                    if contrasts.family(u) == kin and (h, u) != part]
        sib_fired = sum(_fired(by_unit.get(s), start, end) for s in siblings)
        counts.sibling_windows += len(siblings)
        counts.sibling_fired += sib_fired
        if fired and siblings:
            counts.fired_with_siblings += 1
            counts.job_wide += int(sib_fired >= JOB_WIDE_SHARE * len(siblings))
    named = [p if p in known else None for p in failing]
    for w in contrasts.own_history_windows(chosen, named, host_t0s, W, lo_s):
        if not windows.covered(coverage, w.hosts, w.start, w.end):
            continue
        counts.own_windows += 1
        counts.own_fired += _fired(by_unit.get(named[w.index]), w.start, w.end)
