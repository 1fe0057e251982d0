"""The tail test: do windows before the outcome land in the far tail more often than chance?

A rank test (Mann–Whitney, or its stratified form) asks whether windows before the outcome are
worse *on the whole*. A class whose precursor shows before some of its failures only — a thermal
fault among every NODE_FAIL of a fleet, a failing NIC among the link-downs a flaky cable also
causes — moves a few windows far out and leaves the rest where they were: the shift of the
ranks is small (10 windows of 199 at the top move the AUC by ~0.025, within its noise), yet ten
windows past the controls' 99th percentile where two are expected is plain. This test counts
them.

The tail is the top ``share`` of every value the test compares (the windows before the outcome
and their controls together, ``threshold`` = the value below which 1 − ``share`` of them lie;
with ties at it, only values strictly above count). Its p is exact under no difference, given
the values as they are: where every window before the outcome is compared with its own
interruption's controls (``strata``), each window before is equally likely to be any of its
set's values, so it lands in the tail with chance a_i / n_i (a_i of its set's n_i values there)
and the count is a sum of independent draws (one hypergeometric count per set, their
distribution summed exactly); pooled, one hypergeometric count. The same test runs within any
strata (a phase of the job, a rack: ``phase.judge``, ``contrasts.within_group``). The tail is
set from all values at once, which the permutations leave as they are, so setting it costs no
extra test. One-sided: the bad tail.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import hypergeom

# The share of all values that makes the tail. One tail, fixed in advance: trying several and
# keeping the best would be several tests. 2 %: about one in fifty healthy windows, so a class
# whose precursor shows before ~5 % of its outcome's failures still doubles the count.
TAIL_SHARE = 0.02
MIN_IN_TAIL = 2  # fewer values in the tail and there is nothing to count


def _poisson_binomial_sf(probs: np.ndarray, k: int) -> float:
    """P(X >= k) for X the sum of independent Bernoulli(probs)."""
    dist = np.zeros(len(probs) + 1)
    dist[0] = 1.0
    for i, q in enumerate(probs):
        dist[1:i + 2] = dist[1:i + 2] * (1 - q) + dist[:i + 1] * q
        dist[0] *= 1 - q
    return float(min(1.0, dist[k:].sum()))


def _hypergeometric_sum_sf(groups: list[tuple[int, int, int]], k: int) -> float:
    """P(X >= k) for X the sum over groups (n values, a of them in the tail, m drawn "before") of
    independent hypergeometric counts: under no difference, which m of a group's n values are the
    windows before the outcome is any m of them alike."""
    dist = np.ones(1)
    for n, a, m in groups:
        if a == 0 or m == 0:
            continue  # nothing of the group can be in the tail: a count of 0 for sure
        lo, hi = max(0, m - (n - a)), min(a, m)
        pmf = np.zeros(hi + 1)
        pmf[lo:] = hypergeom.pmf(np.arange(lo, hi + 1), n, a, m)
        dist = np.convolve(dist, pmf)
    return float(min(1.0, dist[k:].sum())) if k < len(dist) else 0.0


def tail_test(before, control, *, b_strata=None, c_strata=None, share: float = TAIL_SHARE) -> dict:
    """How many windows before the outcome are in the top ``share`` of all values (higher is
    worse: values are oriented), against chance. With ``b_strata``/``c_strata`` (each value's
    stratum: its interruption's matched set, a phase, a group), the windows before are compared
    only within their stratum: under no difference, which of a stratum's values are the windows
    before is any alike (a hypergeometric count per stratum, summed exactly); strata without a
    control are left out. Returns ``{"p", "threshold", "before_in_tail", "expected", "n_before",
    "in_tail", "n", "share"}``; ``p`` None where fewer than ``MIN_IN_TAIL`` values are strictly
    above the threshold (everything tied at the top)."""
    b = np.asarray(before, float)
    c = np.asarray(control, float)
    b_strata = [0] * len(b) if b_strata is None else list(b_strata)
    c_strata = [0] * len(c) if c_strata is None else list(c_strata)
    sets: dict = {}
    for side, (vals, strata) in enumerate(((b, b_strata), (c, c_strata))):
        for v, s in zip(vals.tolist(), strata):
            if np.isfinite(v):
                sets.setdefault(s, [[], []])[side].append(v)
    kept = [(np.asarray(bs), np.asarray(cs)) for bs, cs in sets.values() if bs and cs]
    n_before = sum(len(bs) for bs, _ in kept)
    out = {"p": None, "threshold": None, "before_in_tail": 0, "expected": None, "n_before": n_before,
           "in_tail": 0, "n": n_before + sum(len(cs) for _, cs in kept), "share": share}
    if not kept:
        return out
    pooled = np.concatenate([np.r_[bs, cs] for bs, cs in kept])
    threshold = float(np.quantile(pooled, 1.0 - share, method="lower"))
    in_tail = int(np.count_nonzero(pooled > threshold))
    if in_tail < MIN_IN_TAIL:
        return out
    groups, k, expected = [], 0, 0.0
    for bs, cs in kept:
        n, m = len(bs) + len(cs), len(bs)
        a = int(np.count_nonzero(bs > threshold) + np.count_nonzero(cs > threshold))
        k += int(np.count_nonzero(bs > threshold))
        expected += m * a / n
        groups.append((n, a, m))
    out.update(threshold=threshold, before_in_tail=k, in_tail=in_tail, expected=expected,
               p=_hypergeometric_sum_sf(groups, k))
    return out
