"""The pin rule's threshold from the controls, on a fleet whose truth we wrote: twelve hosts of four
GPUs trickle corrected DRAM errors, and now and then a healthy GPU has an hour of bursts (the
healthy tail). Eight XID 94s, each on gpu1 of its host; only three are preceded, for the 2 h
before t0, by a climb of corrected errors on that GPU — the others show nothing in the 3 h lead
window (as in a real fleet, where lead times spread and most windows before a failure look
healthy). The median window before the outcome is therefore a healthy one, and a threshold midway
between the medians fires almost everywhere; the 95th percentile of the control windows' scores
fires in about 5 % of them and in the three windows with a precursor."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry import rules
from telemetry.queries import fleet_test as ft
from telemetry.queries import scores, signal_scan, windows

from . import BASE, every, write_part_failures, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "pintest"
METRIC = "gpu.ecc.dram_sbe_volatile"
STEP = 120
DAYS = 5
N = DAYS * 86400 // STEP
HOSTS = [f"p{i:02d}" for i in range(12)]
GPUS = 4
# hours after BASE of each XID 94 (on gpu1); the first three have a precursor
FAILURES = {"p00": 62, "p01": 70, "p02": 79, "p03": 86, "p04": 95, "p05": 103, "p06": 110, "p07": 116}
WITH_PRECURSOR = ("p00", "p02", "p04")
W = 3 * 3600
RAMP = 2 * 3600 // STEP


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(23)
    ts = every(BASE, STEP, N)
    end = BASE + timedelta(days=DAYS)
    for host in HOSTS:
        for g in range(GPUS):
            rate = np.full(N, 0.05)
            # the healthy tail: an hour in forty, a GPU logs 1-4 errors a sample
            hot = np.repeat(rng.random(N * STEP // 3600 + 1) < 0.025, 3600 // STEP)[:N]
            rate = np.where(hot, rng.uniform(1.0, 4.0), rate)
            if host in WITH_PRECURSOR and g == 1:
                t0 = FAILURES[host] * 3600 // STEP
                rate[t0 - RAMP:t0] += 3.0
            write_samples(CLUSTER, host, f"gpu{g}", METRIC, ts, np.cumsum(rng.poisson(rate)))
    write_part_failures(CLUSTER, HOSTS, FAILURES, end, xid=94, component="gpu1", gpus=GPUS)
    return CLUSTER


def _test(rule):
    condition, op, thr = rule
    return ft.run(ft.Signal(METRIC, condition, op, thr, W), windows.parse_outcome("XID 94"), clusters=[CLUSTER]).as_dict()


def test_the_pinned_threshold_is_rare_in_the_controls_and_beats_the_midpoint(fleet):
    scan = signal_scan.scan(windows.parse_outcome("XID 94"), W, clusters=[CLUSTER], metrics=[METRIC])
    assert scan["outcome_interruptions"] == len(FAILURES)
    row = scan["rows"][0]
    readings = row["rise_readings"]
    assert readings["before"]["n"] == len(FAILURES) and readings["control"]["n"] >= rules.MIN_PIN_CONTROLS
    # most windows before the outcome look healthy: the median reading before is a control-like one
    assert readings["before"]["q50"] <= readings["control"]["q95"]

    pinned = rules.pin_rule(row, "up", True)
    basis = rules.pin_basis(row, "up")
    assert pinned == ("rise", ">", basis["threshold"]) and basis["n_control"] == readings["control"]["n"]
    assert basis["before_above"] == pytest.approx(len(WITH_PRECURSOR) / len(FAILURES))
    midpoint = rules._midpoint_rule(row, "up", True)

    new, old = _test(pinned), _test(midpoint)
    t = new["table"]
    assert t["b"] + t["d"] >= 40, t
    # by construction: the fleet test judges a window by the scan's reading, so the controls'
    # 95th percentile fires in at most ~5 % of them (the fleet test's controls are the scan's)
    assert new["control_rate"] <= 0.06, (new["control_rate"], t)
    assert t["a"] == len(WITH_PRECURSOR), t  # the three climbs, and none of the healthy-looking windows
    # 3 of 8 against ~5 %: lift ~7, p ~0.01 — what three precursors among eight failures can show
    assert new["lift"] >= 3 and new["p"] < 0.05, (new["lift"], new["p"], t)
    # the midpoint of the medians sits in the healthy bulk: it fires in most controls
    assert old["control_rate"] > 0.3 and old["lift"] < 1.5, (old["control_rate"], old["lift"], old["table"])
    assert new["lift"] > 2 * old["lift"]
    # fewer alarms on healthy parts: the pinned rule's alarms are mostly the precursors' and the tail's
    assert new["alarms"] < old["alarms"] / 3 and new["true_alarms"] == len(WITH_PRECURSOR)
    # the result says what the table could show at best
    assert new["power"]["windows_before"] == len(FAILURES) and not new["power"]["underpowered"]
    assert new["power"]["best_p"] <= new["p"]


def test_a_window_fires_on_its_own_data_not_on_a_rise_before_it(fleet):
    """A rise rule's rolling score at a minute inside a window reads up to a window of data before
    it; the window itself is judged by the score of its own data (the scan's reading). A control
    window that starts right after a failure's climb would otherwise fire on it."""
    t0 = int((BASE + timedelta(hours=FAILURES["p00"])).timestamp())

    class Span:  # the lead window before p00's XID
        kind, index, hosts, start, end, fired_at, has_data = "same_hosts", 0, ("p00",), t0 - W, t0, None, True

    signal = ft.Signal(METRIC, "rise", ">", 2.0, W)
    before = Span()
    assert ft._rise_at_end(CLUSTER, signal, [before], {}, 600) == {0: True}
    after = Span()
    after.start, after.end = t0, t0 + W  # right after the climb: quiet data of its own
    rolling = scores.rolling_fires(CLUSTER, METRIC, W, ">", 2.0, t0, t0 + W, ["p00"], host_t0s={})
    assert len(rolling.get(("p00", "gpu1"), [])), "the rolling score inside it still reads the climb"
    assert ft._rise_at_end(CLUSTER, signal, [after], {}, 600) == {0: False}


def test_too_few_controls_are_refused_and_the_quantile_is_exact():
    before, control = [0.1, 3.0, 4.0], [float(i) for i in range(100)]
    r = rules.rise_readings(before, control)
    assert r["control"]["q95"] == 94.0 and sum(v > 94.0 for v in control) == 5  # at most 5 % above
    assert r["before_above"]["q95"] == 0.0 and r["before"]["n"] == 3
    row = {"metric": METRIC, "median_score_before": 3.0, "median_score_control": 49.5, "rise_readings": r}
    with pytest.raises(ValueError, match="good direction"):  # lower before than in controls
        rules.pin_rule(row, "up", True)
    few = {"metric": METRIC, "median_score_before": 3.0, "median_score_control": 0.0,
           "rise_readings": rules.rise_readings(before, control[:12])}
    with pytest.raises(ValueError, match="only 12 control windows"):
        rules.pin_rule(few, "up", True)
    assert "12 control windows" in rules.pin_text(few, "up")
    assert rules.rise_readings([], control) is None and rules.rise_readings([float("nan")], control) is None


def test_a_threshold_at_zero_reads_zero_not_minus_zero():
    """The controls' 95th percentile of a score can be -0.0 (a median-centred score of a flat part):
    the rule read 'rise > -0' on the psu pin of the 256 x 40 bench fleet."""
    control = [-0.0] * 96 + [1.0] * 4
    r = rules.rise_readings([2.0, 3.0, -0.0], control)
    row = {"metric": METRIC, "median_score_before": 2.0, "median_score_control": -0.0, "rise_readings": r}
    condition, op, threshold = rules.pin_rule(row, "up", True)
    assert (condition, op, threshold) == ("rise", ">", 0.0)
    assert str(threshold) == "0.0" and "> 0:" in rules.pin_text(row, "up")
