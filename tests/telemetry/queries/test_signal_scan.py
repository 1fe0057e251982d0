"""Signal scan on the fleet whose truth we wrote (see test_fleet_test): the injected precursor
(PCIe replays ramping before each NODE_FAIL) ranks first with a small q; the noise metric (inlet
temperature spiking anywhere) does not stand out."""
from __future__ import annotations

import numpy as np
import pytest

from telemetry.queries import signal_scan, windows

from .test_fleet_test import write_fleet

pytestmark = pytest.mark.slow  # see ./precursor test --fast


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return write_fleet("scan", seed=3)


def test_the_precursor_ranks_first_and_the_noise_does_not_stand_out(fleet):
    stages = []
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 6 * 3600, clusters=[fleet],
                         progress=lambda done, total, stage: stages.append((done, total, stage)))
    assert r["outcome_interruptions"] == 6 and r["metrics_tested"] == 2 and r["matched_on_activity"]
    first, second = r["rows"]
    assert first["metric"] == "gpu.pcie.replay" and first["auc"] == 1.0 and first["q"] < 0.01
    assert first["n_before"] == 6 and first["n_control"] >= 12
    assert first["median_before"] > 0.4 > first["median_control"]  # ~0.5/s during a ramp
    assert second["metric"] == "cooling.inlet_temp" and second["q"] > 0.05
    # a batch a kind (a counter, a gauge): a step each
    assert [s for _, _, s in stages if "scores:" in s] == ["scores: metric 1 of 2", "scores: metric 2 of 2"]
    assert stages[-1][0] == stages[-1][1]


def test_a_scan_limited_to_some_metrics_and_an_outcome_with_none_in_range(fleet):
    r = signal_scan.scan(windows.parse_outcome("XID 79"), 3600, clusters=[fleet], metrics=["gpu.pcie.replay"])
    assert r["outcome_interruptions"] == 3 and [row["metric"] for row in r["rows"]] == ["gpu.pcie.replay"]
    none = signal_scan.scan(windows.parse_outcome("TIMEOUT"), 3600, clusters=[fleet])
    assert none["outcome_interruptions"] == 0 and none["rows"] == [] and none["metrics_tested"] == 0


def test_what_the_scan_refuses():
    with pytest.raises(windows.NotTestable, match="1 min to 30 days"):
        signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 30)
    with pytest.raises(windows.NotTestable, match="not in the catalog: gpu.nope"):
        signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3600, metrics=["gpu.nope"])


def test_a_signal_that_changes_only_after_failures_scores_auc_one_half(telemetry_store):
    """Fans spin down once the job has died: a value after t0 must never enter a lead window, even
    when t0 falls mid-hour (whole clock hours used to pull in up to 59 minutes after it)."""
    from datetime import timedelta

    import numpy as np

    from . import BASE, every, write_rows, write_samples
    from .test_fleet_test import _job

    cluster, hosts, n = "afterwards", [f"a{i}" for i in range(6)], 4 * 1440
    ts = every(BASE, 60, n)
    fails = {"a0": 2 * 1440 + 5 * 60 + 20, "a2": 2 * 1440 + 17 * 60 + 20, "a4": 3 * 1440 + 9 * 60 + 20}  # HH:20
    jobs, alloc = [], []
    for i, h in enumerate(hosts):
        fan = np.full(n, 9000.0)
        if h in fails:
            t0 = fails[h]
            fan[t0:t0 + 40] = 2000.0  # spun down for the 40 minutes after t0, up to the next hour
            j, a = _job(str(60 + i), h, BASE + timedelta(minutes=t0), cluster=cluster)
            jobs.append(j), alloc.append(a)
        write_samples(cluster, h, "fan0", "cooling.fan_rpm", ts, fan)
        j, a = _job(str(90 + i), h, BASE + timedelta(days=4), "COMPLETED", cluster=cluster)
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j), alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3600, clusters=[cluster])
    row = next(x for x in r["rows"] if x["metric"] == "cooling.fan_rpm")
    assert row["n_before"] == 3 and row["auc"] == 0.5 and row["median_before"] == row["median_control"] == 9000.0


def test_the_classes_present_are_offered_with_their_interruptions(fleet):
    classes = signal_scan.outcome_classes([fleet])
    assert classes == [{"outcome": "NODE_FAIL", "interruptions": 6}, {"outcome": "XID 79", "interruptions": 3},
                       {"outcome": "any interruption", "interruptions": 6}]
    both = signal_scan.scan_classes([windows.parse_outcome(c["outcome"]) for c in classes[:2]], 3600,
                                    clusters=[fleet], metrics=["gpu.pcie.replay"])
    assert [(r["outcome"], r["outcome_interruptions"]) for r in both["classes"]] == [("NODE_FAIL", 6), ("XID 79", 3)]


def test_three_failures_with_a_real_precursor_and_36_hours_of_history_reach_p_below_0_01(telemetry_store):
    """Controls come from every matched healthy window the data has: the same hosts at every other
    time of a short history and healthy peers at the same time, not only 1-3 days away."""
    from datetime import timedelta

    import numpy as np

    from telemetry.queries import fleet_test

    from . import BASE, every, write_rows, write_samples
    from .test_fleet_test import _job

    cluster, hosts, n = "short", [f"s{i:02d}" for i in range(12)], 36 * 60
    rng = np.random.default_rng(2)
    ts = every(BASE, 60, n)
    fails = {"s01": 14 * 60, "s05": 22 * 60, "s09": 30 * 60}  # minutes after BASE
    jobs, alloc = [], []
    for i, h in enumerate(hosts):
        sbe = rng.poisson(0.05, n).astype(float)
        if h in fails:
            t0 = fails[h]
            sbe[t0 - 120:t0] += 3  # three corrected errors a minute for two hours before
            j, a = _job(str(40 + i), h, BASE + timedelta(minutes=t0), cluster=cluster)
            j["start_ts"] = a["start_ts"] = BASE
            jobs.append(j), alloc.append(a)
        write_samples(cluster, h, "gpu0", "gpu.ecc.dram_sbe_volatile", ts, np.cumsum(sbe))
        j, a = _job(str(70 + i), h, BASE + timedelta(hours=36), "COMPLETED", cluster=cluster)
        j["start_ts"] = a["start_ts"] = BASE + timedelta(minutes=fails.get(h, -1) + 1)
        jobs.append(j), alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 8 * 3600, clusters=[cluster])
    row = r["rows"][0]
    assert r["outcome_interruptions"] == 3 and row["metric"] == "gpu.ecc.dram_sbe_volatile"
    assert row["n_before"] == 3 and row["n_control"] >= 20 and row["p"] < 0.01 and row["auc"] == 1.0
    test = fleet_test.run(fleet_test.Signal("gpu.ecc.dram_sbe_volatile", "rate", ">", 0.04, 8 * 3600),
                          windows.parse_outcome("NODE_FAIL"), clusters=[cluster]).as_dict()
    assert (test["table"]["a"], test["table"]["c"]) == (3, 0) and test["p"] < 0.01


def test_a_metric_that_cannot_be_tested_says_why(fleet):
    # a 5-day lead over 8 days of history: only two of the three XID 79 failures have a whole window
    r = signal_scan.scan(windows.parse_outcome("XID 79"), 5 * 86400, clusters=[fleet])
    assert r["outcome_interruptions"] == 2 and r["metrics_tested"] == 0
    for row in r["rows"]:
        assert row["not_tested"].startswith("2 windows before the outcome with data (0 without: no data, or no "
                                            "baseline where parts are scored against their own past), 3 needed")
    assert "candidate controls left out" in r["rows"][0]["not_tested"]
    assert sum(r["controls_excluded"].values()) > 0


def test_one_odd_window_among_quiet_ones_is_no_proof():
    from math import comb

    from scipy.stats import mannwhitneyu

    # one status flap in 1 of 7 windows before the outcome, 160 quiet controls: the normal
    # approximation (tie-corrected) claims p ~1e-6; the chance the one odd window falls among the
    # seven is 7/167 — exactly what the permutation test says
    before, control = [0.0] * 6 + [3.0], [0.0] * 160
    normal = mannwhitneyu(before, control, alternative="greater").pvalue
    assert normal < 1e-5
    p = signal_scan.rank_sum_p(before, control, "greater", normal, seed="psu")
    assert p == 7 / 167
    # three of seven windows odd, none of the controls: real evidence, below the old sampler's
    # floor of 1 / 20,001 — the three odd windows all among the seven, in the one order they have
    before = [0.0] * 4 + [3.0, 2.0, 5.0]
    p = signal_scan.rank_sum_p(before, control, "greater", mannwhitneyu(before, control, alternative="greater").pvalue)
    assert p == comb(164, 4) / comb(167, 7) and p < 5e-5
    # no heavy ties: the normal approximation stands
    rng = np.random.default_rng(4)
    b, c = rng.normal(1, 1, 7), rng.normal(0, 1, 160)
    normal = mannwhitneyu(b, c, alternative="greater").pvalue
    assert signal_scan.rank_sum_p(b, c, "greater", normal) == normal


def _enumerated(pooled, n1, alternative):
    """Every way to label n1 of ``pooled`` "before" (the first n1 are the observed labels): the
    doubled rank sums' counts, and the share at least as extreme as the observed sum."""
    import itertools

    from scipy.stats import rankdata

    r2 = np.rint(2 * rankdata(pooled)).astype(int)
    n = len(pooled)
    obs, centre = int(r2[:n1].sum()), n1 * (n + 1)
    counts: dict[int, int] = {}
    hits = total = 0
    for sub in itertools.combinations(range(n), n1):
        s = int(r2[list(sub)].sum())
        counts[s] = counts.get(s, 0) + 1
        total += 1
        hits += (abs(s - centre) >= abs(obs - centre) if alternative == "two-sided"
                 else s <= obs if alternative == "less" else s >= obs)
    return counts, hits / total


def test_exact_rank_sum_distribution_equals_enumeration():
    # the DP over tie groups counts exactly the subsets that enumeration finds, with ties (one big
    # group, several groups, all equal) and without, either side the smaller
    rng = np.random.default_rng(7)
    cases = [([0.0] * 6 + [3.0], [0.0] * 9), ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0]),
             ([5.0, 5.0, 5.0], [5.0, 5.0]), ([0.0, 1.0, 1.0, 2.0, 7.0], [1.0, 0.0, 2.0])]
    for _ in range(60):
        n1, n2 = int(rng.integers(1, 8)), int(rng.integers(1, 9))
        levels = int(rng.choice([2, 3, 5, 1000]))
        cases.append((rng.integers(0, levels, n1).astype(float).tolist(),
                      rng.integers(0, levels, n2).astype(float).tolist()))
    for before, control in cases:
        pooled = np.r_[before, control]
        for m in {len(before), len(control)}:
            want, _ = _enumerated(pooled, m, "greater")
            got = signal_scan.rank_sum_distribution(pooled, m)
            assert {s: int(v) for s, v in enumerate(got) if v} == want
        tied = np.unique(pooled, return_counts=True)[1].max() >= signal_scan.TIED_SHARE * len(pooled)
        for alternative in ("greater", "less", "two-sided"):
            p = signal_scan.rank_sum_p(before, control, alternative, 0.0)  # p_normal 0: past the gate
            assert p == (_enumerated(pooled, len(before), alternative)[1] if tied else 0.0)


def test_exact_p_within_reach_of_scan_sizes_and_sampler_beyond(monkeypatch):
    # a hundred windows before against 1,500 controls, heavy ties: still exact, and the sampler
    # (forced by a zero work bound; it stops at 200 hits: known to ~7 %) agrees
    before = [0.0] * 99 + [3.0]
    control = [0.0] * 1495 + [0.5, 1.0, 2.0, 4.0, 6.0]
    assert signal_scan.rank_sum_distribution(np.r_[before, control], 100) is not None
    p = signal_scan.rank_sum_p(before, control, "greater", 0.0)
    with monkeypatch.context() as mp:
        mp.setattr(signal_scan, "EXACT_MAX_CELLS", 0)
        sampled = signal_scan.rank_sum_p(before, control, "greater", 0.0, seed="y")
    assert abs(p - sampled) < 0.25 * p
    # past EXACT_MAX_CELLS the seeded sampler stands in (p at least 1 / (PERMUTATIONS + 1))
    before = [0.0] * 299 + [3.0]
    control = [0.0] * 2900 + list(np.linspace(0.1, 9.0, 100))
    assert signal_scan.rank_sum_distribution(np.r_[before, control], 300) is None
    p = signal_scan.rank_sum_p(before, control, "greater", 0.0, seed="x")
    assert p == signal_scan.rank_sum_p(before, control, "greater", 0.0, seed="x") and p >= 1 / 20_001


def test_exact_rank_sum_table_holds_only_the_values_outside_the_largest_tie(monkeypatch):
    # 199 windows before against 286 controls, most at 0 (a quiet counter before NODE_FAIL on a big
    # fleet): the table before the largest tie group counts subsets of the 25 other values only —
    # 26 rows, not 200 — and gives the distribution enumeration would (checked on a small case
    # above); its total is every one of the C(485, 199) subsets
    from math import comb

    rng = np.random.default_rng(11)
    before = [0.0] * 189 + rng.uniform(1, 9, 10).tolist()
    control = [0.0] * 271 + rng.uniform(0.5, 9, 15).tolist()
    pooled = np.r_[before, control]
    with monkeypatch.context() as mp:
        mp.setattr(signal_scan, "EXACT_MAX_TABLE", 26 * 2 * 485 * 25)  # 26 rows of the 25 others' sums, no more
        got = signal_scan.rank_sum_distribution(pooled, 199)
    assert got is not None and got.sum() == pytest.approx(float(comb(485, 199)), rel=1e-9)
    # past the table's bound the seeded sampler stands in, as past the work bound
    with monkeypatch.context() as mp:
        mp.setattr(signal_scan, "EXACT_MAX_TABLE", 10)
        assert signal_scan.rank_sum_distribution(pooled, 199) is None
        p = signal_scan.rank_sum_p(before, control, "greater", 0.0, seed="t")
    assert 1 / 20_001 <= p <= 1
