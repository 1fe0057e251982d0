"""Where the outcome names no part (NODE_FAIL), each part is scored against its own past. A host
that sat idle for most of that past and runs a job in the window scores high on every metric that
follows the load, whatever happens next; and failures follow idle stretches (a big job started on
hosts drained for it, a host back from repair). The scan leaves such hosts out of the window —
before the outcome and in controls alike — and counts them, instead of reporting the load as a
precursor. Reproduces what the 48-host bench fleet showed once it ran busy: 45 workload metrics
(traffic, load, power, temperatures) at q < 0.05 before NODE_FAIL, no precursor among them."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import fleet_test, phase, signal_scan, windows

from . import BASE, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow  # see ./precursor test --fast

CLUSTER = "idlepast"
HOSTS = [f"i{i:02d}" for i in range(16)]
DAYS = 5
STEP = 300
W = 4 * 3600
IDLE_H, RUN_H = 20, 7  # idle this long, then a job that fails this long after its start
GAP_H = 5 / 60  # a failed host's next job starts this long after (a reboot, an epilog)
# hosts idle before the job that fails (the hour the idle stretch begins), and hosts that fail busy
IDLERS = [(HOSTS[i], 30 + 9 * i) for i in range(6)]
BUSY_FAILS = [(HOSTS[6 + i], 70 + 13 * i) for i in range(3)]


def _load(busy: np.ndarray, rng) -> np.ndarray:
    # the 5-minute load average: ~80 under a job, ~0.5 idle (no precursor anywhere)
    return np.where(busy, 80 + rng.normal(0, 3, len(busy)), 0.5 + np.abs(rng.normal(0, 0.2, len(busy))))


def write_idle_fleet(cluster: str = CLUSTER) -> str:
    """The fleet above under ``cluster`` (the job page's test writes it too)."""
    rng = np.random.default_rng(4)
    n = DAYS * 86400 // STEP
    ts = every(BASE, STEP, n)
    t_h = np.array([(t - BASE).total_seconds() / 3600 for t in ts])
    end_h = DAYS * 24.0
    jobs, alloc = [], []

    def run(job_id, host, a_h, b_h, state):
        j, a = job_rows(job_id, host, BASE + timedelta(hours=b_h), state, cluster, start=BASE + timedelta(hours=a_h))
        jobs.append(j), alloc.append(a)

    idle = dict(IDLERS)
    fails = dict(BUSY_FAILS)
    for k, host in enumerate(HOSTS):
        busy = np.ones(n, dtype=bool)
        if host in idle:
            i0 = idle[host]
            start, t0 = i0 + IDLE_H, i0 + IDLE_H + RUN_H
            run(f"{k}a", host, 0, i0, "COMPLETED")
            run(f"{k}b", host, start, t0, "NODE_FAIL")
            run(f"{k}c", host, t0 + GAP_H, end_h, "COMPLETED")
            busy &= ~((t_h >= i0) & (t_h < start)) & ~((t_h >= t0) & (t_h < t0 + GAP_H))
        elif host in fails:
            t0 = fails[host]
            run(f"{k}a", host, 0, t0, "NODE_FAIL")
            run(f"{k}b", host, t0 + GAP_H, end_h, "COMPLETED")
            busy &= ~((t_h >= t0) & (t_h < t0 + GAP_H))
        else:
            run(f"{k}a", host, 0, end_h, "COMPLETED")
        write_samples(cluster, host, "", "host.load5", ts, _load(busy, rng))
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    return cluster


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return write_idle_fleet()


def test_hosts_idle_for_most_of_their_past_are_found_from_the_job_runs(fleet):
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    minutes = phase.host_minutes(fleet, HOSTS, lo, hi, timeout_s=60)
    for host, i0 in IDLERS:
        t0 = lo + int((i0 + IDLE_H + RUN_H) * 3600)
        assert phase.idle_past_hosts(minutes, (host, "i15"), t0 - W, t0) == (host,)
        # a day later its past is busy again
        assert phase.idle_past_hosts(minutes, (host,), t0 + 86400 - W, t0 + 86400) == ()
    host, t0_h = BUSY_FAILS[0]
    t0 = lo + t0_h * 3600
    assert phase.idle_past_hosts(minutes, (host,), t0 - W, t0) == ()
    assert phase.idle_past_hosts({"runs": None}, (host,), t0 - W, t0) == ()  # no allocations on record


def test_the_load_after_an_idle_stretch_is_no_precursor(fleet, monkeypatch):
    """Scored against their idle past, the six hosts that ran a job after most of a day idle read
    far above it before they failed, and few controls did: the load was a 'finding' (the rule
    switched off below). Left out (no baseline under load), their windows go — each had one host —
    and what remains before NODE_FAIL is the three busy hosts' windows; the page says why."""
    outcome = windows.parse_outcome("NODE_FAIL")
    monkeypatch.setattr(phase, "IDLE_PAST_SHARE", 1.01)  # never: the scan as it was
    before = signal_scan.scan(outcome, W, clusters=[fleet], metrics=["host.load5"])["rows"][0]
    assert before["n_before"] == len(IDLERS) + len(BUSY_FAILS)
    assert before["auc"] > 0.8 and before["q"] < 0.01
    monkeypatch.undo()

    r = signal_scan.scan(outcome, W, clusters=[fleet], metrics=["host.load5"])
    assert r["outcome_interruptions"] == len(IDLERS) + len(BUSY_FAILS)
    assert r["controls_excluded"]["before_hosts_idle_past"] == len(IDLERS)
    row = r["rows"][0]
    assert row["metric"] == "host.load5" and row["n_before"] == len(BUSY_FAILS)
    # what remains is three windows of busy hosts against ~200 controls: no idle past in either
    assert row["auc"] < before["auc"] and (row["p"] is None or row["p"] > before["p"] * 100)


def test_a_metric_left_without_windows_says_it_was_the_idle_past():
    why = signal_scan._why_not(0, 40, [0, 0], windows.Exclusions(before_hosts_idle_past=6))
    assert "6 hosts left out of windows before the outcome: idle for half or more of the past" in why


def test_busy_past_agrees_with_idle_past_hosts_minute_by_minute(fleet):
    """The rule applied to a firing minute (a rise rule's alarms) is the one applied to a window."""
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    minutes = phase.host_runs(fleet, HOSTS, lo, hi, timeout_s=60)
    ends = np.arange(lo + 3600, hi, 1800 + 7 * 60, dtype=np.int64)  # ends off the hour, some pasts cut at lo
    for host in [h for h, _ in IDLERS[:3]] + [BUSY_FAILS[0][0], "i15"]:
        want = np.array([not phase.idle_past_hosts(minutes, (host,), int(e) - W, int(e)) for e in ends])
        got = phase.busy_past(minutes, host, ends, W)
        assert got.tolist() == want.tolist(), host
        assert (~got).any() == (host in dict(IDLERS)), host
    assert phase.busy_past({"runs": None}, HOSTS[0], ends, W).all()  # no allocations on record


def test_a_rise_rule_neither_fires_nor_raises_alarms_on_an_idle_past(fleet, monkeypatch):
    """The pinned rule on a part's score (``rise``) follows the scan: a host idle for most of the
    past its score is measured against is not scored. Without the rule the load 'rises' before
    every idle host's failure (score ~2 against ~0.3 at the controls' 95th percentile) and each
    idle host fires when its job starts; with it those windows are left out (and counted), and
    nothing fires on a host in the hours after an idle stretch."""
    signal = fleet_test.Signal("host.load5", "rise", ">", 1.0, W)
    outcome = windows.parse_outcome("NODE_FAIL")
    lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=DAYS)).timestamp())
    job_starts = {h: lo + (i0 + IDLE_H) * 3600 for h, i0 in IDLERS}

    def fires_after_idle() -> int:
        _, by_unit, _ = fleet_test._firing_minutes(fleet, signal, lo, hi, 60)
        return sum(int(np.count_nonzero((t >= job_starts[h]) & (t < job_starts[h] + 6 * 3600)))
                   for (h, _), t in by_unit.items() if h in job_starts)

    monkeypatch.setattr(phase, "IDLE_PAST_SHARE", 1.01)  # never: the fleet test as it was
    off = fleet_test.run(signal, outcome, clusters=[fleet]).as_dict()
    off_fires = fires_after_idle()
    monkeypatch.undo()
    on = fleet_test.run(signal, outcome, clusters=[fleet]).as_dict()
    assert off["table"]["a"] == len(IDLERS) and off["controls_excluded"]["before_hosts_idle_past"] == 0
    assert off_fires > 0 and fires_after_idle() == 0
    assert on["controls_excluded"]["before_hosts_idle_past"] == len(IDLERS)
    assert on["no_data"]["before"] == len(IDLERS) and on["table"]["a"] + on["table"]["c"] == len(BUSY_FAILS)
    assert on["table"]["a"] == 0 and on["alarms"] < off["alarms"]


def test_signals_together_leave_the_idle_past_out_of_a_rise_signal_as_its_own_test_does(fleet):
    """The rise signal alone, beside the pair, is judged on the same windows as its own fleet test:
    the windows of the hosts idle before their failure are left out and counted there too."""
    from telemetry.queries import together

    signal = fleet_test.Signal("host.load5", "rise", ">", 1.0, W)
    outcome = windows.parse_outcome("NODE_FAIL")
    alone = fleet_test.run(signal, outcome, clusters=[fleet]).as_dict()
    r = together.run(signal, together.parse("and host.load5 > 50 within 30 min"), outcome, clusters=[fleet])
    rows = {row["role"]: row for row in r["side_by_side"]}
    assert rows["A alone"]["table"] == alone["table"] and alone["table"]["a"] == 0
    assert r["controls_excluded"]["before_hosts_idle_past"] == len(IDLERS)
    assert rows["together"]["table"]["a"] == 0
