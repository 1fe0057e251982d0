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
and the count is a sum of independent Bernoulli draws (Poisson-binomial, summed exactly);
pooled, the count is hypergeometric. The tail is set from all values at once, which the
permutations leave as they are, so setting it costs no extra test. One-sided: the bad tail.
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


def tail_test(before, control, *, b_strata=None, c_strata=None, share: float = TAIL_SHARE) -> dict:
    """How many windows before the outcome are in the top ``share`` of all values (higher is
    worse: values are oriented), against chance. With ``b_strata``/``c_strata`` (each value's
    interruption), each window before only against its own set, as ``signal_scan.stratified_test``;
    windows before without a control of their own are left out. Returns ``{"p", "threshold",
    "before_in_tail", "expected", "n_before", "in_tail", "n"}``; ``p`` None where fewer than
    ``MIN_IN_TAIL`` values are strictly above the threshold (everything tied at the top)."""
    b = np.asarray(before, float)
    c = np.asarray(control, float)
    if b_strata is not None:
        sets: dict[int, list] = {}
        for v, s in zip(b.tolist(), b_strata):
            sets.setdefault(int(s), [[], []])[0].append(v)
        for v, s in zip(c.tolist(), c_strata):
            sets.setdefault(int(s), [[], []])[1].append(v)
        # one window before per set (the stratified test's rule); several each count against its controls
        kept = [(bs, cs) for bs, cs in sets.values() if bs and cs]
        pairs = [(bv, cs) for bs, cs in kept for bv in bs]
        b = np.array([bv for bv, _ in pairs], float)
        c = np.array([x for _, cs in kept for x in cs], float)
    out = {"p": None, "threshold": None, "before_in_tail": 0, "expected": None, "n_before": int(len(b)),
           "in_tail": 0, "n": int(len(b) + len(c)), "share": share}
    if not len(b) or not len(c):
        return out
    pooled = np.r_[b, c]
    threshold = float(np.quantile(pooled, 1.0 - share, method="lower"))
    above = pooled > threshold
    if above.sum() < MIN_IN_TAIL:
        return out
    k = int(above[:len(b)].sum())
    out.update(threshold=threshold, before_in_tail=k, in_tail=int(above.sum()))
    if b_strata is None:
        n, a, m = len(pooled), int(above.sum()), len(b)
        out["expected"] = m * a / n
        out["p"] = float(hypergeom.sf(k - 1, n, a, m))
        return out
    probs = np.array([(int(bv > threshold) + int(np.count_nonzero(np.asarray(cs) > threshold))) / (1 + len(cs))
                      for bv, cs in pairs])
    out["expected"] = float(probs.sum())
    out["p"] = _poisson_binomial_sf(probs, k)
    return out
