"""A SLOW precursor on a fleet whose truth we wrote: on each of four hosts, gpu0 — a quiet part (a
corrected DRAM error every few days) — starts logging them two days before an XID 94 on it, the
rate climbing steadily (x10 every 16 h) to ~1,500 a day at the failure. Every host also has a gpu1
that has trickled errors all along (~400 a day, an hour in ten at 2-4x) and never fails.

Scored against the day just before the window alone, the climb hides in its own baseline: that
day already holds most of the two-day ramp, so the last six hours look only a few times worse.
Against the part's earlier past too (the days before that day) the climb stands out — and the
always-noisy gpu1 goes on as it always did, against either past. So the rule pinned from the scan
(``rise`` past the controls' 95th percentile, as the product pins it) fires before most failures
with p < 0.01, and never on a noisy part."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry import catalog, rules
from telemetry.queries import fleet_test as ft
from telemetry.queries import scores, signal_scan, windows

from . import BASE, event_row, every, job_rows, write_rows, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "slowramp"
START = BASE - timedelta(days=3)
DAYS = 8
STEP = 300
N = DAYS * 86400 // STEP
HOSTS = [f"s{i}" for i in range(8)]
FAILURES = {"s0": 5 * 24 + 4, "s1": 5 * 24 + 22, "s2": 6 * 24 + 15, "s3": 7 * 24 + 6}  # hours after START
RAMP_H = 48
W = 6 * 3600
METRIC = "gpu.ecc.dram_sbe_volatile"


def _job(job_id, host, start, end, state):
    return job_rows(job_id, host, end, state, CLUSTER, start=start)


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(17)
    ts = every(START, STEP, N)
    hours = np.arange(N) * STEP / 3600
    per_step = STEP / 86400  # events per day -> per step
    jobs, alloc, events = [], [], []
    for k, host in enumerate(HOSTS):
        burst = np.repeat(rng.random(N // 12 + 1) < 0.1, 12)[:N] * rng.choice([1.0, 2.0, 3.0], N)
        write_samples(CLUSTER, host, "gpu1", METRIC, ts, np.cumsum(rng.poisson(400 * per_step * (1 + burst))))
        rate = np.full(N, 0.3)  # a day
        end = START + timedelta(days=DAYS)
        if host in FAILURES:
            t0_h = FAILURES[host]
            on = (hours >= t0_h - RAMP_H) & (hours < t0_h)
            # x10 every 16 h: ~1.5 a day two days out, ~1,500 a day at the failure
            rate = np.where(on, 1500 * 10 ** ((hours - t0_h) / 16), rate)
            t0 = START + timedelta(hours=t0_h)
            runs = [(START, t0, "NODE_FAIL"), (t0 + timedelta(minutes=20), end, "COMPLETED")]
            events.append(event_row(CLUSTER, host, t0 - timedelta(minutes=1), "xid", 94, "gpu0", "critical"))
        else:
            runs = [(START, end, "COMPLETED")]
        write_samples(CLUSTER, host, "gpu0", METRIC, ts, np.cumsum(rng.poisson(rate * per_step)))
        for j, (a, b, state) in enumerate(runs):
            job, hosts = _job(str(100 * k + j), host, a, b, state)
            jobs.append(job)
            alloc.append(hosts)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    write_rows("events", events)
    return CLUSTER


def test_a_slow_precursor_gives_a_rule_that_fires_before_most_failures_and_never_on_a_noisy_part(fleet):
    outcome = windows.parse_outcome("XID 94")
    scan = signal_scan.scan(outcome, W, clusters=[fleet], metrics=[METRIC])
    row = next(r for r in scan["rows"] if r["metric"] == METRIC)
    assert scan["outcome_interruptions"] == 4
    condition, op, thr = rules.pin_rule(row, "up", catalog.get(METRIC).is_counter)
    assert condition == "rise"
    res = ft.run(ft.Signal(METRIC, condition, op, thr, W), outcome, clusters=[fleet]).as_dict()
    t = res["table"]
    assert t["a"] >= 3 and t["b"] + t["d"] >= 40, t
    assert res["lift"] >= 3 and res["p"] < 0.01, (res["lift"], res["p"], t, thr)
    # alarms are per part: the failing gpu0s raise them, the always-noisy gpu1s never do
    lo, hi = int(START.timestamp()), int((START + timedelta(days=DAYS)).timestamp())
    _, host_t0s = windows.outcome_interruptions(fleet, outcome, W, lo, hi, timeout_s=60)
    fires = scores.rolling_fires(fleet, METRIC, W, ">", thr, lo, hi, HOSTS, host_t0s=host_t0s)
    assert {u for _, u in fires} == {"gpu0"} and {h for h, _ in fires} >= set(FAILURES) - {"s0"}, sorted(fires)


def test_the_day_before_the_window_holds_the_ramp_the_earlier_past_does_not(fleet, monkeypatch):
    """Why: each failing part's score in its lead window against the recent past alone (the day
    before the window, the earlier past switched off) is a few times lower than against both —
    the ramp was already in that day; the noisy parts score about 0 either way."""
    spans = [windows.Window("before", i, (h,), int((START + timedelta(hours=FAILURES[h])).timestamp()) - W,
                            int((START + timedelta(hours=FAILURES[h])).timestamp())) for i, h in enumerate(sorted(FAILURES))]
    both = scores.window_scores(fleet, spans, [METRIC]).score[METRIC]
    monkeypatch.setattr(scores, "EARLIER_BASELINE_S", 0)
    recent = scores.window_scores(fleet, spans, [METRIC]).score[METRIC]
    for i, h in enumerate(sorted(FAILURES)):
        assert both[i][(h, "gpu0")] > 4 and recent[i][(h, "gpu0")] < 2.5, (h, both[i], recent[i])
        assert abs(both[i][(h, "gpu1")]) < 1 and abs(recent[i][(h, "gpu1")]) < 1
