"""A level row compares levels with levels.

Before an outcome that names the failing part in some interruptions only (NODE_FAIL: an XID 79
near t0 names the GPU in some, nothing in others), a row tests the failing part's level where most
windows name it, and the other windows hold a score — another scale. Pooled, the two scales made a
difference of their mix alone: on the 256-host bench fleet three constant metrics (the enforced
power limit, the host's GPU count and memory) came out before NODE_FAIL at AUC 0.56, q 0.0013.
Here a constant power limit on every GPU, four NODE_FAILs that name a GPU and two that name none:
the row reads the four levels against their controls' levels, AUC 0.5, and says how many windows it
left out."""
from __future__ import annotations

import numpy as np
import pytest

from telemetry.queries import signal_scan, windows

from . import BASE, every, write_samples, write_xid_job_failures

CLUSTER = "levelscale"
STEP = 300
N = 6 * 86400 // STEP
HOSTS = [f"l{i:02d}" for i in range(24)]
NAMED = [(HOSTS[0:4], "l01", 2, 4 * 24 + 3), (HOSTS[4:8], "l06", 0, 4 * 24 + 15),
         (HOSTS[8:12], "l08", 3, 5 * 24 + 1), (HOSTS[12:16], "l15", 1, 5 * 24 + 13)]
UNNAMED = [(HOSTS[16:20], "l17", 0, 4 * 24 + 20), (HOSTS[20:24], "l22", 0, 5 * 24 + 6)]


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    ts = every(BASE, STEP, N)
    rng = np.random.default_rng(7)
    for host in HOSTS:
        for g in range(4):
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.power_limit_enforced", ts, np.full(N, 700.0))
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.temp", ts, 60 + rng.normal(0, 1.5, N))
    write_xid_job_failures(CLUSTER, NAMED, HOSTS, first_id=800, busy_first_id=1800, xid=79)
    write_xid_job_failures(CLUSTER, UNNAMED, [], first_id=900, busy_first_id=1900, xid=None)
    return CLUSTER


def test_a_constant_level_does_not_differ_for_the_mix_of_scales(fleet):
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3 * 3600, clusters=[fleet])
    assert r["outcome_interruptions"] == 6 and r["components_named"] == 4
    row = next(x for x in r["rows"] if x["metric"] == "gpu.power_limit_enforced")
    assert row["statistic"] == "level"
    assert row["n_before"] == 4 and row["windows_off_scale"] >= 2
    # (oriented: the catalog's bad direction for the limit is down)
    assert row["median_score_before"] == row["median_score_control"] and abs(row["median_score_before"]) == 700.0
    assert row["auc"] == 0.5 and (row["q"] is None or row["q"] >= 0.05)
