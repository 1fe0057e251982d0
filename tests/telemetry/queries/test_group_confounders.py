"""Confounders by firmware on a fleet whose truth we wrote. Four XID 94 failures, each on one GPU of
a 4-host job, all four on the hosts of an old firmware (4 of 16 hosts: over-represented, binomial
p 0.004). Those hosts' GPUs log more PCIe replays at every time (the group runs worse), and before
each failure the failing GPU's replays climb far above that (the precursor: it holds within the
group, before-failure windows against controls on the same firmware). Their GPUs also draw more
power at every time and nothing more before a failure (a metric that marks the firmware, not the
coming failure). Only the precursor may come out as a finding; the power is flagged and ranks below."""
from __future__ import annotations


import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from telemetry.queries import contrasts, fleet_contrasts, fleet_test, signal_scan, windows

from . import BASE, every, host_row, write_rows, write_samples, write_xid_job_failures

CLUSTER = "groupconf"
STEP = 120
N = 6 * 86400 // STEP
HOSTS = [f"g{i:02d}" for i in range(16)]
GPUS = 4
# (job hosts, failing host, failing gpu, hours after BASE)
FAILURES = [(HOSTS[0:4], "g00", 2, 4 * 24 + 3), (HOSTS[4:8], "g04", 0, 4 * 24 + 15),
            (HOSTS[8:12], "g08", 3, 5 * 24 + 1), (HOSTS[12:16], "g12", 1, 5 * 24 + 13)]
RAMP = 3 * 3600 // STEP
OLD_FW = {"g00", "g04", "g08", "g12"}


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(23)
    ts = every(BASE, STEP, N)
    for host in HOSTS:
        old = host in OLD_FW
        for g in range(GPUS):
            replay = rng.poisson(1.5 if old else 0.05, N).astype(float)  # the old firmware's GPUs: always more
            power = 500 + rng.normal(0, 10, N) + (60 if old else 0)  # ... and always more power
            for job_hosts, fh, fg, hours in FAILURES:
                if (host, g) == (fh, fg):
                    t0 = hours * 3600 // STEP
                    replay[t0 - RAMP:t0] += rng.poisson(12.0, RAMP)  # the precursor, on the failing GPU only
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.pcie.replay", ts, np.cumsum(replay))
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.power", ts, power)
    write_xid_job_failures(CLUSTER, FAILURES, HOSTS, first_id=400, busy_first_id=800)
    write_rows("hosts", [host_row(CLUSTER, h, rack=f"r{i // 4}", fw="96.00.99" if h in OLD_FW else "96.00.A1")
                         for i, h in enumerate(HOSTS)])
    return CLUSTER


def test_a_precursor_on_the_failing_firmware_that_holds_within_it_is_the_finding(fleet):
    r = signal_scan.scan(windows.parse_outcome("XID 94"), 3 * 3600, clusters=[fleet])
    assert r["outcome_interruptions"] == 4 and r["components_named"] == 4
    assert [(g["dimension"], g["value"], g["failures"], g["of"]) for g in r["concentrated_on"]] == [
        ("firmware", "96.00.99", 4, 4)]
    rows = {row["metric"]: row for row in r["rows"]}
    order = [row["metric"] for row in r["rows"]]
    replay, power = rows["gpu.pcie.replay"], rows["gpu.power"]
    # the group test fires for both: the old firmware's hosts run worse at healthy times
    assert [(g["value"], g["runs_worse_p"] < 0.01) for g in replay["groups"]] == [("96.00.99", True)]
    assert [(g["value"], g["runs_worse_p"] < 0.01) for g in power["groups"]] == [("96.00.99", True)]
    # the precursor holds within the firmware (before failures against controls on the same
    # firmware): not flagged, a finding, first
    fw = replay["groups"][0]
    assert fw["holds"] and fw["p"] < 0.01 and fw["auc_within"] > 0.9 and fw["before_within"] == 4
    assert not replay["flags"] and replay["q"] < 0.05 and order[0] == "gpu.pcie.replay"
    # the power marks the firmware at any time: nothing left within it, flagged, no finding, below
    pw = power["groups"][0]
    assert not pw["holds"] and pw["before_within"] == 4 and pw["controls_within"] >= 3
    assert any("over-represented on firmware 96.00.99" in f and "does not hold" in f for f in power["flags"])
    assert power["q"] >= 0.05 and order.index("gpu.power") > order.index("gpu.pcie.replay")


def test_the_fleet_test_flags_a_rule_that_marks_the_firmware_and_not_one_that_holds_within_it(fleet):
    def groups_of(metric, condition, op, thr):
        r = fleet_test.run(fleet_test.Signal(metric, condition, op, thr, 3 * 3600), windows.parse_outcome("XID 94"),
                           clusters=[fleet]).as_dict()
        assert r["outcome_interruptions"] == 4
        return r, {(g["dimension"], g["value"]): g for g in r["group_contrasts"]}

    # power above 540 W: every window on the old firmware's hosts fires, before failures and at
    # healthy times alike: within the firmware nothing is left
    r, got = groups_of("gpu.power", "threshold", ">", 540)
    fw = got[("firmware", "96.00.99")]
    assert fw["controls_in_group"]["rate"] > 0.9 and fw["fires_more_there_p"] < 0.01
    assert not fw["holds_within"] and fw["flagged"]
    # the replay rule fires before failures and not at healthy times on the same firmware: no flag
    r, got = groups_of("gpu.pcie.replay", "rate", ">", 0.08)
    fw = got[("firmware", "96.00.99")]
    assert r["table"]["a"] == 4 and fw["before_in_group"]["fired"] == 4
    assert fw["controls_in_group"]["fired"] <= 1 and not fw["flagged"]


def test_the_mantel_haenszel_test_within_strata():
    # within each stratum the rule fires as often before as in controls: no evidence, however the
    # pooled table looks (all the before windows sit in the stratum where everything fires)
    assert fleet_contrasts.mantel_haenszel_p([[[4, 40], [0, 0]], [[0, 2], [0, 38]]]) is None
    assert fleet_contrasts.mantel_haenszel_p([[[2, 20], [2, 20]], [[0, 2], [0, 38]]]) == pytest.approx(0.5)
    # fired 8 of 8 before against 2 of 40 controls in one stratum: a finding
    assert fleet_contrasts.mantel_haenszel_p([[[8, 2], [0, 38]]]) < 1e-6


def test_the_stratified_test_is_the_rank_sum_test_within_one_stratum():
    rng = np.random.default_rng(3)
    b, c = rng.normal(1, 1, 9), rng.normal(0, 1, 40)
    want = mannwhitneyu(b, c, alternative="greater", method="asymptotic", use_continuity=False).pvalue
    got = contrasts.stratified_p([(x, True) for x in b], [(x, True) for x in c])
    assert got == pytest.approx(want, rel=1e-9)
    # a difference that is all between the strata (both sides equal within each) is no difference
    before = [(10.0 + x, True) for x in rng.normal(0, 1, 8)] + [(x, False) for x in rng.normal(0, 1, 2)]
    control = [(10.0 + x, True) for x in rng.normal(0, 1, 10)] + [(x, False) for x in rng.normal(0, 1, 40)]
    pooled = mannwhitneyu([v for v, _ in before], [v for v, _ in control], alternative="greater").pvalue
    assert pooled < 0.01 and contrasts.stratified_p(before, control) > 0.05
    assert contrasts.stratified_p([(1.0, True)], [(2.0, False)]) is None  # no stratum with both sides
