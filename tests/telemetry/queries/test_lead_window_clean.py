"""A window before the outcome whose read host failed inside it already (an earlier interruption at
which that host logged a hardware XID, a link-down or a PSU failure) is left out, as a control
touched by an interruption is. Otherwise whatever follows a failure — its XIDs, a cleanup XID 45,
the reboot — sits in the lead window of a repeat failure hours later (a lemon GPU failing again),
never in a control, and reads as a precursor. Hosts that only lost their job stay."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import contrasts, fleet_test, signal_scan, windows

from . import BASE, event_row, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow  # see ./precursor test --fast

CLUSTER = "repeatfail"
HOSTS = [f"r{i:02d}" for i in range(12)]
DAYS = 8
STEP = 60
W = 4 * 3600
# (host, hours after BASE of its first failure): each fails again 2 h after the first, on the same GPU
LEMONS = [("r00", 4 * 24 + 5), ("r03", 4 * 24 + 20), ("r06", 5 * 24 + 9), ("r09", 6 * 24 + 2)]
AGAIN_H = 2
# a three-host job fails (m1's InfiniBand link goes down) and its requeued run on m1, m2 and a fresh m3
# fails 2 h later
REQUEUE_H = 3 * 24 + 4
MULTI = ["m0", "m1", "m2", "m3"]


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    n = DAYS * 86400 // STEP
    ts = every(BASE, STEP, n)
    t_s = np.array([(t - BASE).total_seconds() for t in ts])
    jobs, alloc, events = [], [], []
    for k, host in enumerate(HOSTS):
        xids = np.zeros(n)
        failures = [h for fh, h in LEMONS if fh == host]
        if failures:
            t1 = failures[0] * 3600.0
            t2 = t1 + AGAIN_H * 3600.0
            runs = [(BASE, t1, "NODE_FAIL"), (BASE + timedelta(seconds=t1 + 600), t2, "NODE_FAIL"),
                    (BASE + timedelta(seconds=t2 + 600), DAYS * 86400.0, "COMPLETED")]
            for t0 in (t1, t2):
                # XID 79 a minute before t0 (the outcome), and the failure's aftermath on the same GPU:
                # a cleanup XID (45) half a minute after t0, counted by the GPU's XID counter
                events.append(event_row(CLUSTER, host, BASE + timedelta(seconds=t0 - 60), "xid", 79, "gpu0", "critical"))
                xids += (t_s >= t0 + 30)
        else:
            runs = [(BASE, DAYS * 86400.0, "COMPLETED")]
        for r, (start, end_s, state) in enumerate(runs):
            j, a = job_rows(f"{k}{r}", host, BASE + timedelta(seconds=end_s), state, CLUSTER, start=start)
            jobs.append(j), alloc.append(a)
        write_samples(CLUSTER, host, "gpu0", "gpu.xid_count", ts, xids)
        write_samples(CLUSTER, host, "gpu1", "gpu.xid_count", ts, np.zeros(n))
    t1 = BASE + timedelta(hours=REQUEUE_H)
    t2 = t1 + timedelta(hours=AGAIN_H)
    for job_id, hosts, start, end, state in (("m-1", MULTI[:3], BASE, t1, "NODE_FAIL"),
                                             ("m-2", MULTI[1:], t1 + timedelta(minutes=10), t2, "NODE_FAIL"),
                                             ("m-3", MULTI, t2 + timedelta(minutes=10), BASE + timedelta(days=DAYS),
                                              "COMPLETED")):
        for i, h in enumerate(hosts):
            j, a = job_rows(job_id, h, end, state, CLUSTER, start=start)
            if i == 0:
                j["n_hosts"] = len(hosts)
                jobs.append(j)
            alloc.append(a)
    events.append(event_row(CLUSTER, "m1", t1 - timedelta(seconds=20), "link_down", 0, "mlx5_0", "error"))
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    write_rows("events", events)
    for h in MULTI:
        write_samples(CLUSTER, h, "gpu0", "gpu.xid_count", ts, np.zeros(n))
    return CLUSTER


def test_a_lead_window_holding_an_earlier_interruption_is_left_out_and_counted(fleet):
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    chosen, t0s = windows.outcome_interruptions(fleet, windows.parse_outcome("XID 79"), W, lo, hi, timeout_s=60)
    assert len(chosen) == 2 * len(LEMONS)
    allocations = windows.Allocations.load(fleet, lo, hi, timeout_s=60)
    failed = windows.failed_t0s(fleet, t0s, timeout_s=60)
    # each lemon failed itself at both of its interruptions (XID 79); m1 at the three-host job's first
    assert {h: len(v) for h, v in failed.items()} == {**{h: 2 for h, _ in LEMONS}, "m1": 1}
    excluded = windows.Exclusions()
    found = windows.matched_windows(fleet, chosen, t0s, W, lo, hi, HOSTS, allocations, excluded=excluded,
                                    failing=contrasts.failing_units(fleet, chosen, windows.parse_outcome("XID 79"),
                                                                    timeout_s=60), failed=failed)
    before = [w for w in found if w.kind == "before"]
    # the repeat failures (2 h after the first, inside their 4 h lead window) are left out, with their controls
    assert excluded.before_interrupted == len(LEMONS)
    assert sorted((w.hosts[0], w.end - lo) for w in before) == sorted((h, hours * 3600) for h, hours in LEMONS)
    assert {w.index for w in found} == {w.index for w in before}
    # without ``failed`` (a dataset export) every window before the outcome is kept
    whole = windows.matched_windows(fleet, chosen, t0s, W, lo, hi, HOSTS, allocations)
    assert len([w for w in whole if w.kind == "before"]) == len(chosen)
    # and whatever is read per failure beside the windows skips them too
    marked = windows.with_lead_window(found, list(range(len(chosen))))
    assert sorted(x for x in marked if x is not None) == sorted(w.index for w in before)


def test_an_outcome_naming_no_part_leaves_out_the_hosts_that_failed_inside_the_window(fleet):
    """NODE_FAIL names no part: its window is read on every host of the job. The requeued run's
    window leaves out m1 (its link went down at the first run's end) and keeps m2, which only lost
    its job then (a restart is no failure's aftermath), and m3; a one-host repeat failure's window
    has no host left and goes."""
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    chosen, t0s = windows.outcome_interruptions(fleet, windows.parse_outcome("NODE_FAIL"), W, lo, hi, timeout_s=60)
    assert len(chosen) == 2 * len(LEMONS) + 2
    excluded = windows.Exclusions()
    found = windows.matched_windows(fleet, chosen, t0s, W, lo, hi, HOSTS + MULTI,
                                    windows.Allocations.load(fleet, lo, hi, timeout_s=60), excluded=excluded,
                                    failing=[None] * len(chosen), failed=windows.failed_t0s(fleet, t0s, timeout_s=60))
    before = {chosen[w.index].job_id: w.hosts for w in found if w.kind == "before"}
    assert before["m-1"] == ("m0", "m1", "m2") and before["m-2"] == ("m2", "m3")
    assert excluded.before_interrupted == len(LEMONS)  # one host each, and it failed at the first failure
    assert excluded.before_hosts_interrupted == 1 + len(LEMONS)


def test_the_aftermath_of_a_failure_is_no_precursor_of_the_next(fleet):
    """The GPU's XID counter steps only after each failure. With the repeat failures' lead windows
    read, it rose before 4 of 8 failures and in no control: AUC 0.75 and a 'finding'. Left out, it
    is flat before every failure kept, as in the controls."""
    r = signal_scan.scan(windows.parse_outcome("XID 79"), W, clusters=[fleet], metrics=["gpu.xid_count"])
    assert r["outcome_interruptions"] == 2 * len(LEMONS)
    assert r["controls_excluded"]["before_interrupted"] == len(LEMONS)
    row = r["rows"][0]
    assert row["metric"] == "gpu.xid_count"
    assert row["n_before"] == len(LEMONS)
    assert row["q"] is None or row["q"] > 0.05
    assert row["auc"] is None or row["auc"] <= 0.5 + 1e-9
    test = fleet_test.run(fleet_test.Signal("gpu.xid_count", "rate", ">", 0.0, W), windows.parse_outcome("XID 79"),
                          clusters=[fleet])
    assert test.excluded.before_interrupted == len(LEMONS)
    assert test.a == 0 and test.a + test.c + test.no_data_before == len(LEMONS)
