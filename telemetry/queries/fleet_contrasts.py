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

Where the failures are over-represented on a rack, driver, firmware or GPU model
(``contrasts.concentration``), the 2×2 table is also split by stratum — windows on that group's
hosts, windows off them — (``collect_groups``): a rule that fires more often in the controls on the
group's hosts (Fisher one-sided, p < 0.01) marks the group, whose hosts may fail more for their
own reasons; it must then still fire more before the outcome than in controls of the same stratum
(Cochran–Mantel–Haenszel, p < 0.05) or the result is flagged (``summarize_groups``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import fisher_exact, norm

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


# --- over-represented on a rack, driver or firmware -------------------------------------------

GROUP_TRACKS_P = 0.01  # the rule fires more on the group's hosts at healthy times


def _stand_in(w, fail, chosen) -> str | None:
    """The host a window stands for where the outcome names the failing part: the failing host in
    its lead window and at its other times, the peer that takes its place among healthy peers (as
    the scan picks); None where the outcome names no part (the window's hosts then decide)."""
    if fail is None:
        return None
    if w.kind != "peers":
        return fail[0]
    job_hosts = chosen[w.index].hosts
    pos = job_hosts.index(fail[0]) if fail[0] in job_hosts else 0
    return w.hosts[min(pos, len(w.hosts) - 1)]


def collect_groups(into: dict, cluster: str, found, chosen, failing, by_unit: dict, *, timeout_s: int) -> None:
    """Per group the cluster's failures concentrate on (``contrasts.concentration``), the 2×2
    tables of the fleet test split by stratum (windows on the group's hosts / off them), added to
    ``into``: ``{(cluster, dimension, value): {"group", "t"}}``, ``t[in_group][before][fired]``.
    Where the outcome names the failing part, a window is judged on the host it stands for
    (``_stand_in``: did the rule fire on any part of that host), so a window is in the group
    when that host is; elsewhere on the window's hosts, in the group when most of them are."""
    if not chosen:
        return
    groups = contrasts.concentration(cluster, [u[0] if u else it.hosts for u, it in zip(failing, chosen)],
                                     timeout_s=timeout_s)
    if not groups:
        return
    per_host: dict[str, list[np.ndarray]] = {}
    for (h, _), times in by_unit.items():
        per_host.setdefault(h, []).append(times)
    judged = []
    for w in found:
        if not w.has_data:
            continue
        fail = failing[w.index] if w.index < len(failing) else None
        host = _stand_in(w, fail, chosen)
        if host is None:
            judged.append((tuple(w.hosts), w.kind == "before", w.fired_at is not None))
        else:
            fired = any(_fired(t, w.start, w.end) for t in per_host.get(host, ()))
            judged.append(((host,), w.kind == "before", fired))
    for g in groups:
        entry = into.setdefault((cluster, g.dimension, g.value), {"group": g, "t": np.zeros((2, 2, 2), dtype=int)})
        for hosts, before, fired in judged:
            entry["t"][int(contrasts.in_group(hosts, g)), int(before), int(fired)] += 1


def mantel_haenszel_p(tables) -> float | None:
    """One-sided Cochran–Mantel–Haenszel test over 2×2 strata ``[[a, b], [c, d]]`` (a: before and
    fired, b: control and fired, c: before and quiet, d: control and quiet): does the rule fire
    more before the outcome than in controls of the same stratum? Normal approximation; None where
    no stratum has both kinds of window and both outcomes."""
    num = var = 0.0
    for (a, b), (c, d) in tables:
        n = a + b + c + d
        n_before, n_fired = a + c, a + b
        if n < 2 or not n_before or n_before == n or not n_fired or n_fired == n:
            continue
        num += a - n_before * n_fired / n
        var += n_before * (n - n_before) * n_fired * (n - n_fired) / (n * n * (n - 1))
    if var <= 0:
        return None
    return float(norm.sf(num / np.sqrt(var)))


def summarize_groups(into: dict) -> list[dict]:
    """Per group: how often the rule fired in the controls on the group's hosts and off them (a
    rule that fires more there at healthy times marks the group: Fisher one-sided, p < 0.01), and
    whether the rule still beats the controls within the strata (Cochran–Mantel–Haenszel, holds at
    p < 0.05). ``flagged`` when it marks the group and does not hold within it."""
    out = []
    for entry in into.values():
        g, t = entry["group"], entry["t"]
        b_in, d_in, b_out, d_out = int(t[1, 0, 1]), int(t[1, 0, 0]), int(t[0, 0, 1]), int(t[0, 0, 0])
        worse_p = (float(fisher_exact([[b_in, b_out], [d_in, d_out]], alternative="greater").pvalue)
                   if (b_in + d_in) and (b_out + d_out) else None)
        strata = [[[int(t[s, 1, 1]), int(t[s, 0, 1])], [int(t[s, 1, 0]), int(t[s, 0, 0])]] for s in (1, 0)]
        p = mantel_haenszel_p(strata)
        marks = worse_p is not None and worse_p < GROUP_TRACKS_P
        holds = p is not None and p < HOLDS_P

        def share(k: int, n: int) -> dict:
            rate, lo, hi = jeffreys_interval(k, n - k) if n else (None, None, None)
            return {"fired": k, "windows": n, "rate": rate, "ci": [lo, hi]}

        out.append({"dimension": g.dimension, "value": g.value, "failures": g.failures, "of": g.of,
                    "fleet_share": g.fleet_share,
                    "before_in_group": share(int(t[1, 1, 1]), int(t[1, 1].sum())),
                    "controls_in_group": share(b_in, b_in + d_in),
                    "controls_elsewhere": share(b_out, b_out + d_out),
                    "fires_more_there_p": worse_p, "within_p": p, "holds_within": holds,
                    "flagged": bool(marks and not holds)})
    return out
