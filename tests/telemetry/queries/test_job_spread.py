"""Before an outcome that names no part (Slurm NODE_FAIL with no hardware event logged near t0:
which host failed is not known), a
metric that moved on every host of the job is the workload, and one host that stood out from its
job peers is a candidate cause.

Reproduces what the 256-host bench fleet showed: before NODE_FAIL, GPU power, FP32 activity and
NVSwitch traffic read *lower* on every host of the failing jobs (a checkpoint write or a stall
idles them all; AUC 0.22-0.28) and came out as findings at q < 0.05, unflagged — the job-wide
flag only looked at the high side — while storage writes higher on every host were flagged but
kept their q (the within-job test needed a named failing part). Here, six NODE_FAILs of 4-host
jobs: every GPU of every host of the job idles for the last three hours (the workload, lower
before), storage writes rise on every host (the workload, higher before), and the one host that
fails heats up (the cause)."""
from __future__ import annotations

import numpy as np
import pytest

from telemetry.queries import contrasts, signal_scan, windows

from . import BASE, every, write_samples, write_xid_job_failures

CLUSTER = "spread"
STEP = 120
N = 6 * 86400 // STEP
HOSTS = [f"s{i:02d}" for i in range(24)]
GPUS = 4
# (job hosts, failing host, failing gpu, hours after BASE)
FAILURES = [(HOSTS[0:4], "s01", 0, 4 * 24 + 3), (HOSTS[4:8], "s06", 0, 4 * 24 + 15),
            (HOSTS[8:12], "s08", 0, 5 * 24 + 1), (HOSTS[12:16], "s15", 0, 5 * 24 + 13),
            (HOSTS[16:20], "s17", 0, 4 * 24 + 20), (HOSTS[20:24], "s22", 0, 5 * 24 + 6)]
RAMP = 3 * 3600 // STEP


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(21)
    ts = every(BASE, STEP, N)
    for host in HOSTS:
        writes = rng.poisson(2e8, N).astype(float)
        for job_hosts, fh, _, hours in FAILURES:
            t0 = hours * 3600 // STEP
            if host in job_hosts:
                writes[t0 - RAMP:t0] *= 3  # the job's checkpoint traffic: every host
        write_samples(CLUSTER, host, "", "storage.write_bytes", ts, np.cumsum(writes))
        for g in range(GPUS):
            power = 600 + rng.normal(0, 12, N)
            temp = 60 + rng.normal(0, 1.5, N)
            for job_hosts, fh, _, hours in FAILURES:
                t0 = hours * 3600 // STEP
                if host in job_hosts:
                    power[t0 - RAMP:t0] -= 250  # the job idles: every GPU of every host
                if host == fh:
                    temp[t0 - RAMP:t0] += 12  # the cause: the failing host heats up
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.power", ts, power)
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.temp", ts, temp)
    # jobs end in NODE_FAIL with no event: nothing names the failing host (an XID would: the scan
    # would then read that host alone, contrasts.failing_units)
    write_xid_job_failures(CLUSTER, FAILURES, HOSTS, first_id=500, busy_first_id=900, xid=None)
    return CLUSTER


def test_a_job_wide_move_either_way_is_flagged_and_one_host_standing_out_is_the_finding(fleet):
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3 * 3600, clusters=[fleet],
                         metrics=["gpu.power", "gpu.temp", "storage.write_bytes"])
    assert r["outcome_interruptions"] == 6 and r["components_named"] == 0
    rows = {row["metric"]: row for row in r["rows"]}
    order = [row["metric"] for row in r["rows"]]
    cause, idle, writes = rows["gpu.temp"], rows["gpu.power"], rows["storage.write_bytes"]
    # the host that heats stands out from its job peers: holds within the job, not flagged
    assert cause["q"] < 0.05 and not cause["flags"] and cause["within_job"] is True
    assert cause["contrasts"]["job_spread"]["survives"] and cause["contrasts"]["job_spread"]["failures"] == 6
    # every host idles: lower before the outcome, flagged on its low side, and it does not hold
    # within the job (the spread between hosts is as at healthy times): no finding
    assert idle["auc"] < 0.2 and idle["p_fleet"] < 0.01
    assert idle["flags"] and "below the healthy hosts' 10th percentile" in idle["flags"][0]
    assert idle["within_job"] is False and idle["q"] >= 0.05
    # every host writes more: flagged, and now also held to the within-job test
    assert writes["p_fleet"] < 0.01 and writes["flags"] and "every host of the job" in writes["flags"][0]
    assert writes["within_job"] is False and writes["q"] >= 0.05
    assert order[0] == "gpu.temp"


def test_the_spread_reads_the_side_of_the_finding_in_the_others_own_spread():
    assert contrasts._spread([1.0, 2.0, 3.0, 9.0], "up") == (9.0 - 2.0) / 1.4826
    assert contrasts._spread([1.0, 8.0, 9.0, 10.0], "down") == (9.0 - 1.0) / 1.4826
    # in the others' own spread: a job that moved 20 score units, its hosts ten times as far apart
    # as a quiet job's, reads as the quiet one
    quiet = contrasts._spread([0.02, 0.1, 0.12, 0.15, 0.19], "down")
    assert abs(contrasts._spread([-20.8, -20.0, -19.8, -19.5, -19.1], "down") - quiet) < 1e-9
    # identical others (quiet counters at 0): one host off them stands out without bound
    assert contrasts._spread([0.0, 0.0, 0.0, 2.3], "up") == np.inf and contrasts._spread([0.0] * 4, "up") == 0.0
    assert np.isnan(contrasts._spread([3.0, 4.0, float("nan")], "up"))  # two hosts: no spread among the others


def test_a_host_apart_from_identical_quiet_others_counts_as_the_farthest():
    """Quiet counters score 0 on every host: one host logging errors before the outcome is
    infinitely far from its others, ranked above every control, not dropped."""
    from types import SimpleNamespace as W

    hosts = ("a", "b", "c", "d")
    wins = [W(index=0, kind="before", hosts=hosts)] + [W(index=0, kind="same_hosts", hosts=hosts)] * 9
    vals = {0: {("a", "gpu0"): 0.0, ("b", "gpu0"): 0.0, ("c", "gpu0"): 0.0, ("d", "gpu0"): 2.3}}
    vals.update({wi: {(h, "gpu0"): 0.0 for h in hosts} for wi in range(1, 10)})
    vals[9] = {**vals[9], ("b", "gpu0"): 0.7}  # one control with a host apart too
    got = contrasts.collect(vals, wins, [None], True)
    # tied with that one control, above the other eight: the mid-rank p (the tie and itself count half)
    assert got["spread"]["up"] == [(0 + 0.5 * (1 + 1)) / 10]
