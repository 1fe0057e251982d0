"""Component-level contrasts on a fleet whose truth we wrote. Four XID 94 failures, each on one
GPU of a 4-host job: DRAM ECC errors climb on the failing GPU only for three hours before (the
cause); the whole job runs hot for those hours (the workload: every GPU of every host of the
job); and the failing GPUs had always logged PCIe replays (parts noisy for weeks). Only the cause
may come out as a finding; the job-wide rise is flagged and ranks below it."""
from __future__ import annotations


import numpy as np
import pytest

from telemetry.queries import contrasts, signal_scan, windows

from . import BASE, every, host_row, write_rows, write_samples, write_xid_job_failures

CLUSTER = "contrast"
STEP = 120
N = 6 * 86400 // STEP
HOSTS = [f"c{i:02d}" for i in range(16)]
GPUS = 4
# (job hosts, failing host, failing gpu, hours after BASE)
FAILURES = [(HOSTS[0:4], "c01", 2, 4 * 24 + 3), (HOSTS[4:8], "c06", 0, 4 * 24 + 15),
            (HOSTS[8:12], "c08", 3, 5 * 24 + 1), (HOSTS[12:16], "c15", 1, 5 * 24 + 13)]
RAMP = 3 * 3600 // STEP
OLD_DRIVER = {"c01", "c06", "c08", "c15"}


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(11)
    ts = every(BASE, STEP, N)
    for host in HOSTS:
        for g in range(GPUS):
            sbe = rng.poisson(0.02, N).astype(float)
            temp = 60 + rng.normal(0, 1.5, N)
            replay = rng.poisson(0.05, N).astype(float)
            for job_hosts, fh, fg, hours in FAILURES:
                t0 = hours * 3600 // STEP
                if host in job_hosts:
                    temp[t0 - RAMP:t0] += 15  # the job's heavy phase: every GPU of every host
                if (host, g) == (fh, fg):
                    sbe[t0 - RAMP:t0] += 20  # the cause, on the failing GPU only
                    replay += rng.poisson(6.0, N)  # this GPU was always noisy
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.ecc.dram_sbe_volatile", ts, np.cumsum(sbe))
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.temp", ts, temp)
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.pcie.replay", ts, np.cumsum(replay))
            # the failing hosts run an older driver whose power draw is always higher
            power = 500 + rng.normal(0, 10, N) + (60 if host in OLD_DRIVER else 0)
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.power", ts, power)
    write_xid_job_failures(CLUSTER, FAILURES, HOSTS, first_id=300, busy_first_id=700)
    write_rows("hosts", [host_row(CLUSTER, h, rack=f"r{i // 8}", driver="535.104" if h in OLD_DRIVER else "550.54")
                         for i, h in enumerate(HOSTS)])
    return CLUSTER


def test_the_cause_on_the_failing_gpu_is_the_finding_and_the_workload_is_flagged_below_it(fleet):
    r = signal_scan.scan(windows.parse_outcome("XID 94"), 3 * 3600, clusters=[fleet])
    assert r["outcome_interruptions"] == 4 and r["components_named"] == 4
    rows = {row["metric"]: row for row in r["rows"]}
    order = [row["metric"] for row in r["rows"]]
    cause, heat, noisy = rows["gpu.ecc.dram_sbe_volatile"], rows["gpu.temp"], rows["gpu.pcie.replay"]
    assert order[0] == "gpu.ecc.dram_sbe_volatile" and cause["level"] == "component"
    assert cause["q"] < 0.05 and cause["within_job"] and not cause["flags"]
    assert all(cause["contrasts"][c]["survives"] for c in ("siblings", "own_history", "healthy"))
    # the job-wide rise: different from healthy times, but not within the job -> flagged, no finding
    assert heat["p_fleet"] < 0.05 and heat["contrasts"]["healthy"]["survives"]
    assert not heat["within_job"] and heat["q"] >= 0.05
    assert heat["flags"] and "every host of the job" in heat["flags"][0]
    assert order.index("gpu.temp") > order.index("gpu.ecc.dram_sbe_volatile")
    # the always-noisy part: the row tested its level (the XID names it), which stands out among
    # its siblings at any time (the sibling contrast reads what the row tested), but measured
    # against its own past it does not move, and it is no finding
    assert noisy["statistic"] == "level" and noisy["contrasts"]["siblings"]["survives"]
    assert not noisy["contrasts"]["own_history"]["survives"]
    assert noisy["q"] >= 0.05 and noisy["median_score_before"] < 1
    # the failures sit on the hosts of one driver; power runs higher there at any time: flagged
    assert [(g["dimension"], g["value"], g["failures"], g["of"]) for g in r["concentrated_on"]] == [
        ("driver", "535.104", 4, 4)]
    power = rows["gpu.power"]
    assert any("over-represented on driver 535.104" in f for f in power["flags"]) and power["q"] >= 0.05
    assert not cause["flags"] and order.index("gpu.power") > order.index("gpu.ecc.dram_sbe_volatile")


def test_a_job_split_evenly_between_racks_counts_on_the_same_rack_every_run(clean_store):
    """A failure whose failing host is unknown counts on the value most of its job's hosts share;
    a tie went to whichever value a Python set happened to yield first, which changes with the
    process's hash seed, so the same scan of the same store found a rack concentration in one run
    and not the next. Ties now go to the first value in sorted order."""
    hosts = [host_row("tie", f"t{i:02d}", rack=f"rack-{'abc'[i % 3]}") for i in range(60)]
    write_rows("hosts", hosts)
    # 8 two-host jobs, one host on rack-a and one on rack-b: every one a tie
    jobs = [(f"t{3 * k:02d}", f"t{3 * k + 1:02d}") for k in range(8)]
    got = contrasts.concentration("tie", jobs, timeout_s=30)
    racks = [g for g in got if g.dimension == "rack"]
    assert [(g.value, g.failures, g.of) for g in racks] == [("rack-a", 8, 8)]
    # the rule itself, whatever order the values come in
    assert contrasts.concentration("tie", [tuple(reversed(j)) for j in jobs], timeout_s=30)[0].value == "rack-a"


def test_control_levels_are_kept_only_for_the_groups_the_failures_concentrate_on():
    """The scan holds every metric's pooled parts until it ranks them: the control hosts' levels
    are kept only where a group needs them (inside and outside it), never per host pair."""
    from types import SimpleNamespace as W

    wins = [W(index=0, kind="before", hosts=("a", "b")), W(index=0, kind="same_hosts", hosts=("a", "b")),
            W(index=0, kind="peers", hosts=("c", "d"))]
    vals = {0: {("a", "gpu0"): 5.0, ("b", "gpu0"): 1.0}, 1: {("a", "gpu0"): 1.0, ("b", "gpu1"): 2.0},
            2: {("c", "gpu0"): 3.0, ("d", "gpu0"): float("nan"), ("d", "gpu1"): 4.0}}
    none = contrasts.collect(vals, wins, [("a", "gpu0")], True)
    assert none["group_levels"] == [] and "control_hosts" not in none
    g = contrasts.Concentration("driver", "535.104", 1, 1, 0.5, 0.5, frozenset({"a", "c"}))
    got = contrasts.collect(vals, wins, [("a", "gpu0")], True, groups=[g])
    inside, outside = got["group_levels"][0]
    assert sorted(inside) == [1.0, 3.0] and sorted(outside) == [2.0, 4.0]  # each host's worst; NaN left out
    again = contrasts.collect(vals, wins, [("a", "gpu0")], True, got, groups=[g])  # a second cluster adds
    assert len(again["group_levels"][0][0]) == 4
