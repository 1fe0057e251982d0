"""The within-job contrasts compare what the scan row tested, on the side it found.

Reproduces what the 256-host bench fleet showed (session 34): ``gpu.pcie.rx_rate`` before
NODE_FAIL tested the failing parts' *levels* and found them lower before the outcome (AUC 0.41:
a checkpoint write idles every GPU of the job), but its sibling contrast compared the parts'
*scores* on the high side (p 0.00014, "survives"), so the within-job gate let a workload finding
through. Here, in memory: twelve failures, each on one GPU of a 2-host job. Before the outcome every
GPU of the job reads low (the workload); the failing GPU's self-normalised score happens to be the
highest of its job. A gate on the scores' high side says the part stands out; on the levels' low
side — what the row tested — it does not. And a real low-side precursor (the failing GPU alone
reads low) holds there."""
from __future__ import annotations

from types import SimpleNamespace as W

import numpy as np

from telemetry.queries import contrasts

UNITS = [(h, f"gpu{g}") for h in ("a", "b") for g in range(4)]
FAILING = ("a", "gpu0")
N_FAILURES = 12


def _fleet(failing_low: bool):
    """Windows and values: per failure, the window before it (the job's two hosts) and four
    healthy control windows of the same hosts. Levels around 100 at healthy times (varying by
    window), 40–47 before the outcome on every GPU (a job-wide idle) — or, with ``failing_low``, 100
    on the siblings and 40 on the failing GPU only (a precursor lower before the outcome)."""
    wins, scores, levels = [], {}, {}
    for i in range(N_FAILURES):
        wi = len(wins)
        wins.append(W(index=i, kind="before", hosts=("a", "b")))
        # (the job-wide idle: every GPU between 40 and 47, the failing one in the middle)
        levels[wi] = {u: (40.0 + (k + 4) % 8 if not failing_low else 40.0 if u == FAILING else 100.0 + k)
                      for k, u in enumerate(UNITS)}
        # the scores: the failing part's the highest of its job (its own past was quiet)
        scores[wi] = {u: (5.0 if u == FAILING else 1.0 + 0.1 * k) for k, u in enumerate(UNITS)}
        for j in range(4):
            wi = len(wins)
            wins.append(W(index=i, kind="same_hosts", hosts=("a", "b")))
            levels[wi] = {u: 95.0 + 3 * j + 0.5 * k for k, u in enumerate(UNITS)}
            scores[wi] = {u: 0.5 + 0.2 * j + 0.05 * k for k, u in enumerate(UNITS)}
    return wins, scores, levels


def _summary(failing_low: bool, statistic: str, low: bool):
    wins, scores, levels = _fleet(failing_low)
    parts = contrasts.collect(scores, wins, [FAILING] * N_FAILURES, True, levels=levels, highest_level=True)
    return contrasts.summarize(parts, low=low, statistic=statistic)["contrasts"]


def test_a_job_wide_low_level_does_not_hold_among_the_siblings_though_the_scores_stand_out():
    # the old reading (scores, high side) passes the workload finding: the part stands out
    assert _summary(False, "score", low=False)["siblings"]["survives"]
    # what the row tested (levels, low side): the part's siblings read as low
    sib = _summary(False, "level", low=True)["siblings"]
    assert sib["failures"] == N_FAILURES and not sib["survives"] and sib["p"] > 0.5


def test_a_low_level_on_the_failing_part_alone_holds_among_its_siblings():
    sib = _summary(True, "level", low=True)["siblings"]
    # each failure's p is its rank among seven siblings, 1/8 at best: Fisher's over twelve, 0.0015
    assert sib["failures"] == N_FAILURES and sib["survives"] and sib["p"] < 0.01
    # and against its controls (the same part at healthy times): lower than all of them
    assert _summary(True, "level", low=True)["healthy"]["p"] < 1e-6


def test_the_high_side_of_the_levels_reads_the_other_way():
    # the failing part alone low: on the high side of the levels it is the least worrying part
    sib = _summary(True, "level", low=False)["siblings"]
    assert not sib["survives"] and sib["p"] > 0.99


def test_failures_whose_counter_ties_with_every_sibling_do_not_drown_those_that_stand_out():
    """Error counters read as levels are mostly 0: in most failures of a class whose precursor
    only some carry, the failing part's rate is 0 like every sibling's. Such a failure says nothing
    about the order; ranked as p = 1 (the conventional rank p), 14 of them drowned 6 failures whose
    part stood above all its siblings (Fisher p 0.97). Left out, the six hold."""
    wins, levels = [], {}
    for i in range(20):
        wins.append(W(index=i, kind="before", hosts=("a", "b")))
        levels[len(wins) - 1] = {u: (0.05 if (i < 6 and u == FAILING) else 0.0) for u in UNITS}
        wins.append(W(index=i, kind="same_hosts", hosts=("a", "b")))
        levels[len(wins) - 1] = {u: 0.0 for u in UNITS}
    parts = contrasts.collect(levels, wins, [FAILING] * 20, True, levels=levels, highest_level=True)
    sib = contrasts.summarize(parts, statistic="level")["contrasts"]["siblings"]
    assert sib["failures"] == 6 and sib["survives"] and sib["p"] < 0.01
    # a value tied with only part of its reference ranks in the middle of the ties, not at the bottom
    assert contrasts._rank_p(0.0, np.array([0.0, 0.0, 0.0, 1e-4])) == (1 + 0.5 * 4) / 5
    assert contrasts._rank_p(0.0, np.array([0.0, 0.0])) is None
    assert contrasts._rank_p(2.0, np.array([0.0, 1.0, 3.0])) == 1.5 / 4


def _found(sib_p, sib_n, own_p, own_n):
    c = {"siblings": {"p": sib_p, "failures": sib_n, "survives": sib_p < contrasts.SURVIVES_P},
         "own_history": {"p": own_p, "failures": own_n, "survives": own_p < contrasts.SURVIVES_P}}
    return {"contrasts": c, "job_wide": None}


def test_a_part_as_far_out_in_its_own_past_is_gated_where_enough_failures_stand_behind_it():
    """The 256-host bench fleet: gpu.pcie.rx_rate read lower before NODE_FAIL (a level finding,
    q 0.0039), its failing parts as low in their own earlier windows (p 0.84 over 93 failures):
    flagged, the larger p. A true precursor that holds against its own past keeps its p; below
    SIBLINGS_GATE failures the contrast is shown, not required."""
    from telemetry.queries.signal_scan import SIBLINGS_GATE, gate_contrasts

    row = {"p": 3.5e-5, "statistic": "level", "flags": [], "within_job": None}
    gate_contrasts(row, _found(0.022, 116, 0.84, 93), low=True)
    assert row["within_job"] and row["p"] == 0.84
    assert row["flags"] == ["does not hold against the part's own past: its earlier windows read as low "
                            "(p 0.84 over 93 failures)"]
    held = {"p": 5e-5, "statistic": "level", "flags": [], "within_job": None}
    gate_contrasts(held, _found(3e-18, 97, 4.7e-6, 31), low=False)
    assert held == {"p": 5e-5, "statistic": "level", "flags": [], "within_job": True}
    few = {"p": 5e-5, "statistic": "level", "flags": [], "within_job": None}
    gate_contrasts(few, _found(0.01, 40, 0.9, SIBLINGS_GATE - 1), low=False)
    assert few["p"] == 5e-5 and few["flags"] == []
    # the siblings' gate says which side it read
    sib = {"p": 0.0018, "statistic": "level", "flags": [], "within_job": None}
    gate_contrasts(sib, _found(0.63, 26, 0.8, 9), low=True)
    assert sib["p"] == 0.63 and sib["flags"] == ["does not hold within the job: the part's siblings of the same "
                                                 "job read as low (p 0.63 over 26 failures)"]
