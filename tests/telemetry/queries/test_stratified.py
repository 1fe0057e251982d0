"""The scan's test where a window's value is the highest score over its hosts' parts: each window
before the outcome against its own matched controls only (``signal_scan.stratified_test``).

Reproduces what the 96-host bench fleet showed before NODE_FAIL: interruptions pick big jobs (more
hosts, more to fail) and a big job's window reads higher by chance alone (the highest of more
parts), while the pooled controls come mostly from small jobs (a big job has fewer quiet stretches
and no group of as many healthy peers). Pooled, pure noise then reads as a finding — every error
counter came out at AUC 0.6-0.7 there, sbe_volatile at p 0.0018; within strata it is 0.55, p 0.18."""
from __future__ import annotations

import numpy as np
from scipy.stats import mannwhitneyu

from telemetry.queries.signal_scan import stratified_test


def _noise(rng, parts: int, n: int) -> np.ndarray:
    """The highest of ``parts`` heavy-tailed part scores, ``n`` times."""
    return rng.pareto(2.0, (n, parts)).max(axis=1)


def test_noise_over_big_jobs_is_a_finding_pooled_and_none_within_strata():
    rng = np.random.default_rng(5)
    before, b_strata, control, c_strata = [], [], [], []
    # 20 interruptions of 16-host jobs (128 parts) with 4 controls each, 20 of 1-host jobs (8 parts)
    # with 24 each: no window before an outcome differs from its own controls
    for i in range(40):
        parts, k = (128, 4) if i < 20 else (8, 24)
        values = _noise(rng, parts, k + 1)
        before.append(values[0])
        b_strata.append(i)
        control.extend(values[1:])
        c_strata.extend([i] * k)
    pooled = mannwhitneyu(before, control, alternative="greater")
    assert pooled.pvalue < 0.01  # the jobs' size, read as a precursor
    got = stratified_test(before, b_strata, control, c_strata, "greater", seed="noise")
    assert got["strata"] == 40 and 0.3 < got["auc"] < 0.7 and got["p"] > 0.05, got
    # a re-run draws the same
    assert stratified_test(before, b_strata, control, c_strata, "greater", seed="noise") == got


def test_three_failures_with_a_real_precursor_reach_p_below_0_01():
    rng = np.random.default_rng(6)
    before, b_strata, control, c_strata = [], [], [], []
    for i in range(3):  # each window before the outcome above all 24 of its own controls
        c = rng.normal(0, 1, 24)
        before.append(c.max() + 1)
        b_strata.append(i)
        control.extend(c)
        c_strata.extend([i] * 24)
    got = stratified_test(before, b_strata, control, c_strata, "greater", seed="three")
    # exactly (1/25)^3 = 6.4e-5 by enumeration; the draws' estimate has a floor of 1/200,001
    assert got["auc"] == 1.0 and got["p"] < 0.01, got
    assert stratified_test(before, b_strata, control, c_strata, "less", seed="three")["p"] > 0.99


def test_ties_and_strata_without_controls():
    # quiet counters: most scores 0. A window equal to all its controls counts half
    got = stratified_test([0.0, 0.0, 2.0, 5.0], [0, 1, 2, 3], [0.0] * 10 + [0.0] * 10 + [0.0, 1.0], [0] * 10 + [1] * 10 + [2, 2],
                          "greater", seed="ties")
    assert got["strata"] == 3  # the fourth window has no control of its own: left out
    assert abs(got["auc"] - (0.5 + 0.5 + 1.0) / 3) < 1e-12
    # with no stratum on both sides there is nothing to test
    assert stratified_test([1.0], [0], [0.0], [1], "greater") == {"auc": None, "p": None, "strata": 0}


def _windows_of(rng, strata: int, parts_before: int, parts_control: int, controls: int):
    """Matched windows of an outcome that names no part, every part score pure noise."""
    from telemetry.queries.windows import Window

    found, unit_scores = [], {}
    for i in range(strata):
        for kind, parts, k in (("before", parts_before, 1), ("same_hosts", parts_control, controls)):
            for _ in range(k):
                unit_scores[len(found)] = {(f"h{i}", f"gpu{p}"): float(x) for p, x in enumerate(rng.pareto(2.0, parts))}
                found.append(Window(kind, i, (f"h{i}",), 0, 3600))
    picked = [(max(unit_scores[wi].values()), float("nan"), w.hosts) for wi, w in enumerate(found)]
    return found, [None] * strata, picked, unit_scores


def _test(found, values):
    b = [(v, w.index) for v, w in zip(values, found) if w.kind == "before"]
    c = [(v, w.index) for v, w in zip(values, found) if w.kind != "before"]
    return stratified_test([v for v, _ in b], [s for _, s in b], [v for v, _ in c], [s for _, s in c], "greater",
                           seed="size")


def test_a_window_over_more_parts_than_its_own_controls_is_no_finding_once_adjusted():
    from telemetry.queries.signal_scan import size_adjusted

    # each window before the outcome scored 128 parts, its own controls 64 (hosts without data or
    # without enough past far from the job): the highest of more noise is higher
    found, failing, picked, unit_scores = _windows_of(np.random.default_rng(9), 30, 128, 64, 10)
    raw = _test(found, [v for v, _, _ in picked])
    assert raw["p"] < 0.01 and raw["auc"] > 0.6, raw
    adjusted = size_adjusted(found, failing, picked, unit_scores)
    assert all(0.0 <= v <= 1.0 for v in adjusted)
    got = _test(found, adjusted)
    assert got["p"] > 0.05 and 0.35 < got["auc"] < 0.65, got
    # a window whose outcome names the part keeps its value (the part's level)
    named = size_adjusted(found, [("h0", "gpu0")] * 30, picked, unit_scores)
    assert named == [v for v, _, _ in picked]
