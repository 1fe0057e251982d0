"""A SHORT gauge precursor in a long lead window, on a fleet whose truth we wrote: on each of four
hosts, one fan drops to 55 % of its speed for the last 75 minutes before a NODE_FAIL, a 6 h lead
window before it. Every host's fans follow its job's load (slow swings of ±8 %) with minute
noise, and two healthy hosts have a fan that drops as far for an hour once, with no failure
after it (a false alarm).

Over the whole window the drop moves the fan's mean by under a tenth — the size of the load's
swings — so the scan's score (the window's mean against the fan's own past) is diluted four-fold. A
count adds up however long the window is; a mean does not. So a gauge is also measured over the
window's last quarter (``scores.tail_for``), the worse of the two counting, before the outcome and
in its controls alike: the failing fans score several times higher (when written: AUC 1.0, p 5e-6
on four failures; 0.95 and p 3e-4 without the tail), and the ``rise`` rule pinned from it fires
before the failures in the fleet test (the rolling score reads the same statistic)."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry import catalog, rules
from telemetry.queries import fleet_test as ft
from telemetry.queries import scores, signal_scan, windows

from . import BASE, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "gaugetail"
START = BASE - timedelta(days=3)
DAYS = 8
STEP = 60
N = DAYS * 86400 // STEP
HOSTS = [f"t{i}" for i in range(10)]
FAILURES = {"t0": 4 * 24 + 5, "t1": 4 * 24 + 21, "t2": 5 * 24 + 14, "t3": 6 * 24 + 9}  # hours after START
FALSE_ALARMS = {"t6": 4 * 24 + 11, "t7": 5 * 24 + 3}
DROP_MIN = 75
W = 6 * 3600
METRIC = "cooling.fan_rpm"


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(23)
    ts = every(START, STEP, N)
    minutes = np.arange(N)
    jobs, alloc = [], []
    end = START + timedelta(days=DAYS)
    for k, host in enumerate(HOSTS):
        # the job's load: a slow swing (hours) shared by the host's fans
        knots = np.arange(0, N + 240, 240)
        load = np.interp(minutes, knots, rng.normal(0, 0.08, len(knots)))
        for fan in ("fan0", "fan1"):
            rpm = 9000 * (1 + load) + rng.normal(0, 150, N)
            if fan == "fan0" and host in FAILURES:
                t0_min = FAILURES[host] * 60
                rpm[t0_min - DROP_MIN:t0_min] *= 0.55
            if fan == "fan0" and host in FALSE_ALARMS:
                a = FALSE_ALARMS[host] * 60
                rpm[a:a + 60] *= 0.55
            write_samples(CLUSTER, host, fan, METRIC, ts, rpm)
        if host in FAILURES:
            t0 = START + timedelta(hours=FAILURES[host])
            runs = [(START, t0, "NODE_FAIL"), (t0 + timedelta(minutes=20), end, "COMPLETED")]
        else:
            runs = [(START, end, "COMPLETED")]
        for j, (a, b, state) in enumerate(runs):
            job, on = job_rows(str(100 * k + j), host, b, state, CLUSTER, start=a)
            jobs.append(job)
            alloc.append(on)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    return CLUSTER


def _before_spans():
    return [windows.Window("before", i, (h,), int((START + timedelta(hours=FAILURES[h])).timestamp()) - W,
                           int((START + timedelta(hours=FAILURES[h])).timestamp())) for i, h in enumerate(sorted(FAILURES))]


def test_the_tail_is_the_last_quarter_of_the_window_in_whole_minutes():
    assert scores.tail_for(W) == 5400
    assert scores.tail_for(3600) == 900
    assert scores.tail_for(300) == 60
    assert scores.tail_for(200) == 0 and scores.tail_for(60) == 0  # too short for a tail of a minute


def test_a_short_drop_scores_several_times_higher_once_the_tail_counts(fleet, monkeypatch):
    spans = _before_spans()
    got = scores.window_scores(fleet, spans, [METRIC])
    monkeypatch.setattr(scores, "TAIL_DIVISOR", 10 ** 9)  # no tail: the whole window's mean only
    whole = scores.window_scores(fleet, spans, [METRIC])
    for i, h in enumerate(sorted(FAILURES)):
        with_tail, without = got.score[METRIC][i][(h, "fan0")], whole.score[METRIC][i][(h, "fan0")]
        assert with_tail > 2.5 * max(without, 0.5), (h, with_tail, without)
        # the level is the worse of the two means: the tail's (75 of its 90 minutes at 55 %: ~63 %)
        assert got.level[METRIC][i][(h, "fan0")] < 0.75 * whole.level[METRIC][i][(h, "fan0")]
        # the fan that did not drop scores about as it did without the tail
        assert abs(got.score[METRIC][i][(h, "fan1")]) < 2.5, got.score[METRIC][i]


def test_the_scan_finds_the_short_drop_and_its_pinned_rule_fires_before_the_failures(fleet, monkeypatch):
    outcome = windows.parse_outcome("NODE_FAIL")
    scan = signal_scan.scan(outcome, W, clusters=[fleet], metrics=[METRIC])
    row = next(r for r in scan["rows"] if r["metric"] == METRIC)
    assert scan["outcome_interruptions"] == 4
    assert row["auc"] > 0.9 and row["p"] < 0.01, (row["auc"], row["p"])
    condition, op, thr = rules.pin_rule(row, "down", catalog.get(METRIC).is_counter)
    assert condition == "rise"
    res = ft.run(ft.Signal(METRIC, condition, op, thr, W), outcome, clusters=[fleet]).as_dict()
    assert res["table"]["a"] >= 3 and res["p"] < 0.05, (res["table"], res["p"], thr)
    # Without the tail the same fleet shows far less: the drop is a fifth of the window's mean
    monkeypatch.setattr(scores, "TAIL_DIVISOR", 10 ** 9)
    plain = next(r for r in signal_scan.scan(outcome, W, clusters=[fleet], metrics=[METRIC])["rows"]
                 if r["metric"] == METRIC)
    assert plain["p"] > 5 * row["p"], (plain["p"], row["p"])
