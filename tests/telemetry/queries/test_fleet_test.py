"""Fleet test of a signal hypothesis, on a store whose truth we wrote: PCIe replays ramp for
three hours before each NODE_FAIL on the failing host and nowhere else; inlet temperature
spikes at random on every host (noise). The test must find the first and not the second."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import fleet_test as st
from telemetry.queries import windows

from . import BASE, event_row, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow  # see ./precursor test --fast

CLUSTER = "sigtest"
HOSTS = [f"h{i:02d}" for i in range(12)]
DAYS = 8
STEP = 60
N = DAYS * 86400 // STEP
# (host, hours after BASE): six failures on days 4–7, each on one host.
FAILURES = [("h00", 4 * 24 + 5), ("h03", 4 * 24 + 20), ("h05", 5 * 24 + 9), ("h07", 6 * 24 + 2),
            ("h09", 6 * 24 + 15), ("h11", 7 * 24 + 7)]
XID79 = {"h00", "h05", "h09"}  # the failures that also logged XID 79 near t0
RAMP_H = 3


def _job(job_id, host, end, state="NODE_FAIL", cluster=CLUSTER):
    return job_rows(job_id, host, end, state, cluster)


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return write_fleet(CLUSTER)


def write_fleet(cluster: str, seed: int = 7) -> str:
    """The known fleet under ``cluster`` (other test modules write it under their own name)."""
    rng = np.random.default_rng(seed)
    ts = every(BASE, STEP, N)
    minutes = np.arange(N)
    for host in HOSTS:
        replay = np.cumsum(rng.poisson(0.01, N)).astype(float)  # ~0.0002/s background
        for fh, hours in FAILURES:
            if fh == host:
                t0 = hours * 60
                ramp = (minutes >= t0 - RAMP_H * 60) & (minutes < t0)
                replay += np.cumsum(ramp * 30.0)  # 0.5/s for three hours
        write_samples(cluster, host, "gpu0", "gpu.pcie.replay", ts, replay)
        inlet = 24 + rng.normal(0, 0.2, N)
        spikes = rng.random(N // 60) < 0.08  # an hour in twelve, anywhere
        inlet += np.repeat(spikes, 60)[:N] * 8.0
        write_samples(cluster, host, "", "cooling.inlet_temp", ts, inlet)
    jobs, alloc, events = [], [], []
    for i, (host, hours) in enumerate(FAILURES):
        end = BASE + timedelta(hours=hours)
        j, a = _job(str(500 + i), host, end, cluster=cluster)
        jobs.append(j)
        alloc.append(a)
        if host in XID79:
            events.append(event_row(cluster, host, end - timedelta(minutes=2), "xid", 79, "gpu0", "critical"))
    # Every host runs long healthy jobs the whole time (controls are matched on activity).
    for k, host in enumerate(HOSTS):
        j, a = _job(str(800 + k), host, BASE + timedelta(days=DAYS), "COMPLETED", cluster=cluster)
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j)
        alloc.append(a)
    # A finished job and a cancelled one are no interruptions.
    for k, (state, host) in enumerate([("COMPLETED", "h01"), ("CANCELLED", "h02")]):
        j, a = _job(str(900 + k), host, BASE + timedelta(days=5, hours=3), state, cluster=cluster)
        jobs.append(j)
        alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    write_rows("events", events)
    return cluster


def test_the_injected_precursor_is_found_with_its_lead_time(fleet):
    r = st.run(st.Signal("gpu.pcie.replay", "rate", ">", 0.1, 6 * 3600), st.parse_outcome("NODE_FAIL"),
               clusters=[fleet]).as_dict()
    assert r["outcome_interruptions"] == 6
    assert (r["table"]["a"], r["table"]["c"]) == (6, 0)
    assert r["table"]["b"] == 0 and r["table"]["d"] >= 12  # quiet controls: same hosts on other days, peers
    # k controls per failure drawn from every healthy window: the same hosts at other times, and
    # healthy peers at the same time (11 other hosts: disjoint one-host groups)
    assert r["controls"]["same_hosts"] > 0 and r["controls"]["peers"] >= 6
    assert r["controls"]["same_hosts"] + r["controls"]["peers"] == 6 * windows.CONTROLS_PER_POSITIVE
    assert r["lift"] > 5 and r["p"] < 1e-3 and r["lift_ci"][0] > 1
    assert r["recall"] == 1.0 and r["recall_ci"][0] > 0.6
    # The ramp starts 3 h before t0: the first firing minute is within a few minutes of that.
    assert all(abs(lead - RAMP_H * 3600) <= 180 for lead in r["lead_times_s"]), r["lead_times_s"]
    # A rule on this signal raises one alarm per failure, each followed by it.
    assert (r["alarms"], r["true_alarms"], r["precision"]) == (6, 6, 1.0)
    assert r["false_alarms_per_1000_node_days"] == 0.0 and r["node_days"] == pytest.approx(12 * DAYS, rel=0.02)
    assert len(r["examples"]) == 6 and all(e["fired"] for e in r["examples"])


def test_noise_that_fires_everywhere_shows_no_lift(fleet):
    r = st.run(st.Signal("cooling.inlet_temp", "threshold", ">", 28, 6 * 3600), st.parse_outcome("NODE_FAIL"),
               clusters=[fleet]).as_dict()
    t = r["table"]
    assert t["a"] + t["c"] == 6 and t["b"] + t["d"] >= 12
    assert r["p"] > 0.05 and r["lift_ci"][0] < 1 < r["lift_ci"][1]
    assert r["precision"] < 0.2 and r["false_alarms_per_1000_node_days"] > 100


def test_an_xid_outcome_keeps_only_the_interruptions_with_that_xid(fleet):
    r = st.run(st.Signal("gpu.pcie.replay", "rate", ">", 0.1, 6 * 3600), st.parse_outcome("XID 79"),
               clusters=[fleet]).as_dict()
    assert r["outcome"] == "XID 79" and r["outcome_interruptions"] == 3
    assert r["table"]["a"] == 3
    # Only the three XID 79 failures make an alarm true now.
    assert (r["alarms"], r["true_alarms"]) == (6, 3)


def test_a_lead_window_shorter_than_the_ramp_still_fires_but_a_high_threshold_does_not(fleet):
    short = st.run(st.Signal("gpu.pcie.replay", "rate", ">", 0.1, 3600), st.parse_outcome("NODE_FAIL"),
                   clusters=[fleet]).as_dict()
    assert short["table"]["a"] == 6 and max(short["lead_times_s"]) <= 3600
    high = st.run(st.Signal("gpu.pcie.replay", "rate", ">", 5.0, 6 * 3600), st.parse_outcome("NODE_FAIL"),
                  clusters=[fleet]).as_dict()
    assert high["table"]["a"] == 0 and high["alarms"] == 0 and high["precision"] is None


def test_trend_and_threshold_conditions_read_the_rollup(fleet):
    # The counter climbs ~1,800 an hour during a ramp: the hourly average rises by far more than 500/h.
    trend = st.run(st.Signal("gpu.pcie.replay", "trend", ">", 500, 6 * 3600), st.parse_outcome("NODE_FAIL"),
                   clusters=[fleet]).as_dict()
    assert trend["table"]["a"] == 6 and trend["table"]["b"] == 0
    below = st.run(st.Signal("cooling.inlet_temp", "threshold", "<", 10, 6 * 3600), st.parse_outcome("any interruption"),
                   clusters=[fleet]).as_dict()
    assert below["alarms"] == 0 and below["table"]["a"] == 0


def test_counter_resets_are_not_rates(clean_store):
    ts = every(BASE, STEP, 600)
    values = np.concatenate([np.arange(300) * 2.0, np.arange(300) * 2.0])  # a reset to zero at minute 300
    write_samples("reset", "r1", "gpu0", "gpu.pcie.replay", ts, values)
    j, a = _job("1", "r1", BASE + timedelta(minutes=590))
    j["cluster"] = a["cluster"] = "reset"
    write_rows("jobs", [j])
    write_rows("job_hosts", [a])
    r = st.run(st.Signal("gpu.pcie.replay", "rate", "<", -0.001, 3600), st.parse_outcome("NODE_FAIL"),
               clusters=["reset"]).as_dict()
    assert r["alarms"] == 0  # the drop at the reset is not a negative rate
    r = st.run(st.Signal("gpu.pcie.replay", "rate", ">", 0.02, 3600), st.parse_outcome("NODE_FAIL"),
               clusters=["reset"]).as_dict()
    assert r["table"]["a"] == 1 and r["alarms"] >= 1


@pytest.mark.parametrize("text, label, states, xids", [
    ("NODE_FAIL", "NODE_FAIL", ("NODE_FAIL",), ()),
    ("node fail", "NODE_FAIL", ("NODE_FAIL",), ()),
    ("XID 79", "XID 79", (), (79,)),
    ("xid 48/94", "XID 48/94", (), (48, 94)),
    ("XIDs 94, 48", "XID 48/94", (), (48, 94)),
    ("any interruption", "any interruption", (), ()),
])
def test_outcomes_it_understands(text, label, states, xids):
    o = st.parse_outcome(text)
    assert (o.label, o.states, o.xids) == (label, states, xids)


@pytest.mark.parametrize("text", ["the GPU dies", "", "XID", "COMPLETED"])
def test_outcomes_it_refuses_say_what_would_do(text):
    with pytest.raises(st.NotTestable, match="use an interruption state"):
        st.parse_outcome(text)


def test_signals_it_refuses():
    with pytest.raises(st.NotTestable, match="not in the catalog"):
        st.Signal("gpu.nope", "rate", ">", 1, 3600)
    with pytest.raises(st.NotTestable, match="1 min to 30 days"):
        st.Signal("gpu.temp", "threshold", ">", 80, 30)
    with pytest.raises(st.NotTestable, match="condition"):
        st.Signal("gpu.temp", "spike", ">", 80, 3600)


def test_controls_are_matched_on_activity(clean_store):
    """Peers and same-host controls only where the hosts were running a job: idle hosts are left
    out, and a cluster without allocations on record is not matched at all."""
    end = BASE + timedelta(days=2)
    jobs, alloc = [], []
    for k, host in enumerate(["b1", "b2", "b3"]):  # busy: a long healthy job each
        j, a = _job(str(10 + k), host, BASE + timedelta(days=4), "COMPLETED", cluster="act")
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j)
        alloc.append(a)
    j, a = _job("1", "f1", end, "NODE_FAIL", cluster="act")
    jobs.append(j)
    alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    chosen, t0s = windows.outcome_interruptions("act", st.parse_outcome("NODE_FAIL"), 3600, int(BASE.timestamp()),
                                           int((BASE + timedelta(days=4)).timestamp()), timeout_s=30)
    assert [c.job_id for c in chosen] == ["1"]
    reporting = ["b1", "b2", "b3", "i1", "i2", "i3", "f1"]  # i*: reporting, never in a job
    allocations = windows.Allocations.load("act", int(BASE.timestamp()), int((BASE + timedelta(days=4)).timestamp()),
                                      timeout_s=30)
    assert allocations.busy("b1", int(end.timestamp())) and not allocations.busy("i1", int(end.timestamp()))
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=4)).timestamp())
    excluded = windows.Exclusions()
    found = windows.matched_windows("act", chosen, t0s, 3600, lo, hi, reporting, allocations, excluded=excluded)
    again = windows.matched_windows("act", chosen, t0s, 3600, lo, hi, reporting, allocations)
    assert [(w.kind, w.hosts, w.start) for w in found] == [(w.kind, w.hosts, w.start) for w in again]  # reproducible
    peers = [w for w in found if w.kind == "peers"]
    # never an idle host: the three busy hosts, one group each (the job had one host)
    assert sorted(p.hosts for p in peers) == [("b1",), ("b2",), ("b3",)]
    # f1 ran its failing job only from 30 h before t0: only the hours it was busy count, then k of them
    same = sorted(w.end - int(end.timestamp()) for w in found if w.kind == "same_hosts")
    assert all(-29 * 3600 <= e <= -3600 and e % 3600 == 0 for e in same)
    assert len(found) == 1 + windows.CONTROLS_PER_POSITIVE
    assert excluded.idle >= 3 + 40 and excluded.beyond_k == 29 + 3 - windows.CONTROLS_PER_POSITIVE
    unmatched = windows.matched_windows("act", chosen, t0s, 3600, lo, hi, reporting, None)
    assert len(unmatched) == 1 + windows.CONTROLS_PER_POSITIVE  # every hour of the 4 days is a candidate


def test_link_down_is_an_outcome_the_interruptions_with_a_link_down_near_t0(clean_store):
    assert st.parse_outcome("link down") == st.parse_outcome("LINK_DOWN") == st.Outcome(
        label="link down", events=("link_down",))
    end = BASE + timedelta(days=2)
    rows = [_job("71", "h01", end), _job("72", "h02", end + timedelta(hours=1))]
    write_rows("jobs", [j for j, _ in rows])
    write_rows("job_hosts", [a for _, a in rows])
    # job 71's link went down 3 min before its end; job 72's an hour before its window (not near t0)
    write_rows("events", [event_row(CLUSTER, "h01", end - timedelta(minutes=3), "link_down", 0, "mlx5_0", "error"),
                          event_row(CLUSTER, "h02", end - timedelta(hours=1), "link_down", 0, "mlx5_0", "error")])
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=4)).timestamp())
    chosen, _ = windows.outcome_interruptions(CLUSTER, st.parse_outcome("link down"), 3600, lo, hi, timeout_s=60)
    assert [c.job_id for c in chosen] == ["71"]


def test_an_alarm_starts_at_the_sample_that_raised_it_and_lead_times_are_exact(clean_store):
    """A rise at 03:46:30 before a failure at 04:46:30, 1 h lead: the window fires at 03:46:30
    (not at the minute boundary below it), the lead is exactly 3600 s and the alarm is true."""
    t_rise = BASE + timedelta(days=1, hours=3, minutes=46, seconds=30)
    t0 = t_rise + timedelta(hours=1)
    ts = every(BASE, 10, 2 * 8640)
    temp = np.where([(t >= t_rise) and (t < t0) for t in ts], 90.0, 60.0)
    write_samples("exact", "x1", "gpu0", "gpu.temp", ts, temp)
    write_samples("exact", "x2", "gpu0", "gpu.temp", ts, np.full(len(ts), 60.0))
    j, a = _job("1", "x1", t0, cluster="exact")
    write_rows("jobs", [j])
    write_rows("job_hosts", [a])
    r = st.run(st.Signal("gpu.temp", "threshold", ">", 85, 3600), st.parse_outcome("NODE_FAIL"),
               clusters=["exact"]).as_dict()
    assert r["lead_times_s"] == [3600.0]
    assert (r["alarms"], r["true_alarms"]) == (1, 1)


def test_alarms_count_per_part_and_a_job_wide_rise_is_not_a_true_alarm_on_every_gpu(clean_store):
    """An XID 94 on gpu1 of x1; every GPU of the job's two hosts ran hot for the hour before.
    Per host this was 2 alarms, both "true"; per part it is 4 alarms, and only gpu1's is true."""
    t0 = BASE + timedelta(days=1, hours=5)
    ts = every(BASE, 60, 2 * 1440)
    hot = np.where([(t >= t0 - timedelta(hours=1)) and (t < t0) for t in ts], 90.0, 60.0)
    for h in ("x1", "x2"):
        for g in ("gpu0", "gpu1"):
            write_samples("parts", h, g, "gpu.temp", ts, hot)
    jobs, alloc = [], []
    for h in ("x1", "x2"):
        j, a = _job("1", h, t0, cluster="parts")
        jobs.append(j), alloc.append(a)
    write_rows("jobs", jobs[:1])
    write_rows("job_hosts", alloc)
    write_rows("events", [event_row("parts", "x1", t0 - timedelta(minutes=1), "xid", 94, "gpu1", "critical")])
    r = st.run(st.Signal("gpu.temp", "threshold", ">", 85, 3 * 3600), st.parse_outcome("XID 94"),
               clusters=["parts"]).as_dict()
    assert (r["alarms"], r["true_alarms"]) == (4, 1)


@pytest.mark.parametrize("condition,threshold", [("rate", 0.1), ("threshold", 30.0)])
def test_firing_minutes_read_in_host_slices_are_the_same(telemetry_store, monkeypatch, condition, threshold):
    """The firing query orders a slice of hosts' rows at a time (its memory bounded on any fleet);
    sliced into single hosts it finds every firing the one query finds. (Its own fleet: a test
    above cleans the store the module's fleet is in.)"""
    fleet = write_fleet(f"sliced-{condition}", seed=9)
    metric = "gpu.pcie.replay" if condition == "rate" else "cooling.inlet_temp"
    signal = st.Signal(metric, condition, ">", threshold, 6 * 3600)
    lo_s, hi_s = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    monkeypatch.setattr(st, "FIRES_ROWS_PER_QUERY", 10**12)  # one query over every host
    whole = st._firing_minutes(fleet, signal, lo_s, hi_s, 60)
    monkeypatch.setattr(st, "FIRES_ROWS_PER_QUERY", 1)
    sliced = st._firing_minutes(fleet, signal, lo_s, hi_s, 60)
    assert whole[1] and sorted(whole[1]) == sorted(sliced[1])
    assert all(np.array_equal(whole[1][k], sliced[1][k]) for k in whole[1])
    assert all(np.array_equal(whole[0][h], sliced[0][h]) for h in whole[0]) and whole[0].keys() == sliced[0].keys()
