"""The ``rise`` condition (a part against its own preceding baseline) on a fleet whose truth we
wrote: on each of three hosts, gpu1 is a chronically noisy healthy part (PCIe replays trickling
at ~0.05/s with bursts, for the whole history, never failing) and gpu0 a quiet part that, on each
host once, replays at ~0.04/s for the 3 h before an XID 94 on it. A ``rate`` rule fires on the
noisy part all the time: judged on whole hosts (a NODE_FAIL that logged no event: nothing names the
part) it fires in every window — before failures and in controls alike: lift ~1; judged on the
failing part (the XID names gpu0, and so it does for the same interruptions as NODE_FAIL) its
windows show the climb, but deployed it raises alarms on the noisy part everywhere. A ``rise``
rule scores the noisy part ~0 against its own past and the quiet part's climb high: lift >= 3, and
its only alarms are the three climbs."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import fleet_test as st
from telemetry.queries import scores

from . import BASE, event_row, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow  # see ./precursor test --fast

CLUSTER = "risetest"
HOSTS = ["r0", "r1", "r2"]
DAYS = 5
N = DAYS * 1440  # one sample a minute
FAILURES = {"r0": 2 * 24 + 5, "r1": 3 * 24 + 2, "r2": 3 * 24 + 20}  # hours after BASE, XID 94 on gpu0
W = 3 * 3600


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return _write(CLUSTER, xid=True)


@pytest.fixture(scope="module")
def unnamed_fleet(telemetry_store):
    """The same fleet with no XID logged: its NODE_FAILs name no part."""
    return _write(CLUSTER + "-unnamed", xid=False)


def _write(cluster: str, *, xid: bool) -> str:
    rng = np.random.default_rng(11)
    ts = every(BASE, 60, N)
    minutes = np.arange(N)
    jobs, alloc, events = [], [], []
    for k, host in enumerate(HOSTS):
        # the noisy healthy part: ~3 a minute, heavy-tailed (an hour in ten at 2-4x)
        burst = np.repeat(rng.random(N // 60 + 1) < 0.1, 60)[:N] * rng.choice([1.0, 2.0, 3.0], N)
        write_samples(cluster, host, "gpu1", "gpu.pcie.replay", ts, np.cumsum(rng.poisson(3.0 * (1 + burst))))
        # the quiet part: a replay every few hours, then ~2.5 a minute for the 3 h before its XID
        t0_min = FAILURES[host] * 60
        lam = np.where((minutes >= t0_min - 180) & (minutes < t0_min), 2.5, 0.005)
        write_samples(cluster, host, "gpu0", "gpu.pcie.replay", ts, np.cumsum(rng.poisson(lam)))
        t0 = BASE + timedelta(hours=FAILURES[host])
        for job, (start, end, state) in enumerate([(BASE, t0, "NODE_FAIL"),
                                                   (t0 + timedelta(minutes=10), BASE + timedelta(days=DAYS),
                                                    "COMPLETED")]):
            j, a = job_rows(str(100 * k + job), host, end, state, cluster, start=start)
            jobs.append(j)
            alloc.append(a)
        if xid:
            events.append(event_row(cluster, host, t0 - timedelta(minutes=1), "xid", 94, "gpu0", "critical"))
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    if events:
        write_rows("events", events)
    return cluster


def _run(condition, threshold, outcome="XID 94", cluster=CLUSTER):
    return st.run(st.Signal("gpu.pcie.replay", condition, ">", threshold, W), st.parse_outcome(outcome),
                  clusters=[cluster]).as_dict()


def test_a_rate_rule_fires_on_the_noisy_part_everywhere_and_a_rise_rule_only_before_failures(fleet, unnamed_fleet):
    # nothing names the part: every part of the window's hosts
    hosts = _run("rate", 0.02, "NODE_FAIL", unnamed_fleet)
    assert hosts["outcome_interruptions"] == 3 and hosts["table"]["a"] == 3 and hosts["component_windows"] == 0
    assert hosts["lift"] < 1.2 and hosts["p"] > 0.3  # the noisy gpu1 fires in every control too
    # the same NODE_FAILs with their XID 94 logged: the XID names gpu0, the state's window is gpu0's
    named = _run("rate", 0.02, "NODE_FAIL")
    assert named["component_windows"] == 3 and named["table"] == _run("rate", 0.02)["table"], named["table"]
    # The XID names gpu0: each window is gpu0's (the same GPU at other times, its namesake on the
    # peers), and only the failing GPUs' climbs fire them — but the rule, deployed, fires on the
    # noisy gpu1s all the time: the alarms say so
    rate = _run("rate", 0.02)
    assert rate["outcome_interruptions"] == 3 and rate["component_windows"] == 3
    t = rate["table"]
    assert t["a"] == 3 and t["b"] <= 1 and rate["p"] < 0.01, (t, rate["p"])

    rise = _run("rise", 2.0)
    t = rise["table"]
    assert t["a"] == 3 and t["b"] + t["d"] >= 20, t
    assert rise["lift"] >= 3 and rise["p"] < 0.01, (rise["lift"], rise["p"], t)
    # alarms per part: the three quiet parts' climbs, each true; the noisy parts raise none
    assert (rise["alarms"], rise["true_alarms"]) == (3, 3)
    assert rate["alarms"] > 20 and rate["precision"] < 0.3
    # each firing is timed at a sample inside the climb, so leads are at most the 3 h lead window
    assert all(0 < lead <= W for lead in rise["lead_times_s"])
    assert "score vs own baseline > 2" in rise["signal"]


def test_the_rolling_score_is_the_scans_statistic(fleet):
    """The score a rise rule reads at the end of a lead window is the one the signal scan
    computes for that window (one statistic, scores.py) — up to the baseline's first minute,
    whose increase the scan's segments leave out (one minute of 720: a few hundredths here)."""
    t0 = int((BASE + timedelta(hours=FAILURES["r0"])).timestamp())

    class Span:
        hosts, start, end = ("r0",), t0 - W, t0

    got = scores.window_scores(CLUSTER, [Span()], ["gpu.pcie.replay"], host_t0s={}).score["gpu.pcie.replay"][0]
    lo = int(BASE.timestamp())
    for unit in ("gpu0", "gpu1"):
        x = got[("r0", unit)]
        above = scores.rolling_fires(CLUSTER, "gpu.pcie.replay", W, ">", x - 0.05, lo, t0, ["r0"], host_t0s={})
        below = scores.rolling_fires(CLUSTER, "gpu.pcie.replay", W, ">", x + 0.05, lo, t0, ["r0"], host_t0s={})
        # the window ending with the last minute before t0 scores x, timed at that minute's sample
        assert t0 - 60 <= above[("r0", unit)][-1] < t0, unit
        assert not len(below.get(("r0", unit), [])) or below[("r0", unit)][-1] < t0 - 60, unit
    assert got[("r0", "gpu0")] > 4 and abs(got[("r0", "gpu1")]) < 1


def test_hosts_queried_a_few_at_a_time_fire_the_same(fleet, monkeypatch):
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    together = scores.rolling_fires(CLUSTER, "gpu.pcie.replay", W, ">", 2.0, lo, hi, HOSTS)
    monkeypatch.setattr(scores, "HOSTS_PER_ROLLING_QUERY", 1)
    one_by_one = scores.rolling_fires(CLUSTER, "gpu.pcie.replay", W, ">", 2.0, lo, hi, HOSTS)
    assert sorted(together) == sorted(one_by_one) == [(h, "gpu0") for h in HOSTS]
    assert all(np.array_equal(together[k], one_by_one[k]) for k in together)
