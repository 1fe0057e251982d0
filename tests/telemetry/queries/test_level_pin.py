"""The pin follows the statistic the scan tested, on a fleet whose truth we wrote: twelve hosts of
four GPUs with a PCIe replay trickle and, now and then, an hour of bursts on a healthy GPU (the
healthy tail). Eight XID 79s, each on gpu1 of its host. Each failing GPU has run ~80x a healthy
GPU's replay rate since the history began (days, longer than any baseline a score is measured
against) and 3x that in the 3 h before its XID; the GPU is replaced at the failure.

The XID names the GPU, so the scan compares that GPU's level in the lead window with the same GPU
at other times and its namesake on healthy peers: a clear finding. Against its own past the last
hours are a modest rise (3x, ln 3 ≈ 1.1) — less than a quiet healthy GPU's hour of bursts — so a
``rise`` rule set at the controls' 95th percentile misses almost every failure; the level itself is
above anything the controls read, so the ``rate`` rule set the same way fires before nearly all.
Scanned as NODE_FAIL, the same: the state names no part, but its XID 79 does (contrasts.failing_units).
The same fleet with no XID logged, scanned as NODE_FAIL (nothing names the part): the scan tests
scores and the pin stays ``rise``."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry import catalog, rules
from telemetry.queries import fleet_test as ft
from telemetry.queries import signal_scan, windows

from . import BASE, every, write_part_failures, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "levelpin"
METRIC = "gpu.pcie.replay"
STEP = 120
DAYS = 5
N = DAYS * 86400 // STEP
HOSTS = [f"l{i:02d}" for i in range(12)]
GPUS = 4
# hours after BASE of each XID 79 (on gpu1)
FAILURES = {"l00": 62, "l01": 70, "l02": 79, "l03": 86, "l04": 95, "l05": 103, "l06": 110, "l07": 116}
W = 3 * 3600
HEALTHY, ELEVATED, LAST = 0.05, 4.0, 12.0  # replays per sample (120 s)


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return _write(CLUSTER, 79)


@pytest.fixture(scope="module")
def unnamed_fleet(telemetry_store):
    return _write(CLUSTER + "-unnamed", None)


def _write(cluster: str, xid: int | None) -> str:
    rng = np.random.default_rng(41)
    ts = every(BASE, STEP, N)
    end = BASE + timedelta(days=DAYS)
    for host in HOSTS:
        for g in range(GPUS):
            rate = np.full(N, HEALTHY)
            # the healthy tail: an hour in forty, a GPU logs 1-4 replays a sample
            hot = np.repeat(rng.random(N * STEP // 3600 + 1) < 0.025, 3600 // STEP)[:N]
            rate = np.where(hot, rng.uniform(1.0, 4.0, N), rate)
            if host in FAILURES and g == 1:
                t0 = FAILURES[host] * 3600 // STEP
                rate[:t0] = ELEVATED  # high since the history began: in every past a score reads
                rate[t0 - W // STEP:t0] = LAST
            write_samples(cluster, host, f"gpu{g}", METRIC, ts, np.cumsum(rng.poisson(rate)))
    write_part_failures(cluster, HOSTS, FAILURES, end, xid=xid, component="gpu1", gpus=GPUS)
    return cluster


def _test(outcome, condition, op, thr):
    return ft.run(ft.Signal(METRIC, condition, op, thr, W), windows.parse_outcome(outcome),
                  clusters=[CLUSTER]).as_dict()


def _row(outcome, cluster=CLUSTER):
    scan = signal_scan.scan(windows.parse_outcome(outcome), W, clusters=[cluster], metrics=[METRIC])
    assert scan["outcome_interruptions"] == len(FAILURES)
    return scan, scan["rows"][0]


def test_a_level_finding_pins_a_level_rule_that_a_rise_rule_would_miss(fleet):
    scan, row = _row("XID 79")
    assert scan["components_named"] == len(FAILURES)
    assert row["statistic"] == "level" and row["q"] < 0.01 and row["auc"] > 0.9, row
    levels = row["level_readings"]
    assert (levels["condition"], levels["operator"]) == ("rate", ">")
    assert levels["before"]["n"] == len(FAILURES) and levels["control"]["n"] >= rules.MIN_PIN_CONTROLS
    # the readings are in the metric's own unit: per-second rates, the lead windows' far above
    assert levels["before"]["q50"] > 1.5 * levels["control"]["q95"] > 0, levels

    basis = rules.pin_basis(row, "up")
    pinned = rules.pin_rule(row, "up", catalog.get(METRIC).is_counter)
    assert pinned == ("rate", ">", basis["threshold"]) and basis["statistic"] == "level"
    assert basis["threshold"] >= levels["control"]["q95"] and basis["n_control"] == levels["control"]["n"]
    rise = basis["rival"]  # the rise rule set the same way, from the same scan's control windows
    assert rise["condition"] == "rise" and rise["threshold"] == float(f"{row['rise_readings']['control']['q95']:.4g}")
    assert basis["before_above"] * basis["n_before"] > rise["before_above"] * rise["n_before"]
    text = rules.pin_text(row, "up")
    assert text.startswith(f"rate > {basis['threshold']:g} count/s: the 95th percentile of the highest minute rate")
    assert "the scan tested the failing part's level" in text

    level, old = _test("XID 79", *pinned), _test("XID 79", rise["condition"], rise["operator"], rise["threshold"])
    t = level["table"]
    assert t["b"] + t["d"] >= 100, t
    # calibrated on the controls as the fleet test reads them: at most ~5 % of them fire
    assert level["control_rate"] <= 0.06, (level["control_rate"], t)
    assert t["a"] >= 7 and level["lift"] >= 3 and level["p"] < 0.01, (level["lift"], level["p"], t)
    # a rise over a past that already held the high level is modest: the rise rule misses most failures
    o = old["table"]
    # (a lift with an empty cell is the ½-corrected ratio, no evidence: the p says it)
    assert o["a"] <= 2 and old["p"] > 0.05, (old["lift"], old["p"], o)
    assert old["control_rate"] <= 0.06, (old["control_rate"], o)
    # the level rule raises an alarm on each failing GPU before its XID (its false alarms: minutes
    # of the failing GPUs' high days and the healthy tail, past a threshold 5 % of controls pass)
    assert level["true_alarms"] >= 7 and level["true_alarms"] > old["true_alarms"], (level["alarms"], old["alarms"])
    print(f"\nlevel: {level['signal']}: {t}, lift {level['lift']:.3g}, p {level['p']:.2g}, alarms "
          f"{level['true_alarms']}/{level['alarms']}; rise: {old['signal']}: {o}, lift {old['lift']:.3g}, "
          f"p {old['p']:.2g}, alarms {old['true_alarms']}/{old['alarms']}")


def test_an_outcome_that_names_no_part_still_pins_a_rise(fleet, unnamed_fleet):
    # NODE_FAIL with its XID 79 logged: the XID names the GPU, the scan tests its level, as for XID 79
    scan, named = _row("NODE_FAIL")
    assert scan["components_named"] == len(FAILURES) and named["statistic"] == "level", named
    assert rules.pin_rule(named, "up", True) == rules.pin_rule(_row("XID 79")[1], "up", True)
    # with nothing logged, nothing names the part
    _, row = _row("NODE_FAIL", unnamed_fleet)
    assert row["statistic"] == "score" and row["level_readings"] is None
    condition, op, thr = rules.pin_rule(row, "up", catalog.get(METRIC).is_counter)
    assert (condition, op) == ("rise", ">") and thr == float(f"{row['rise_readings']['control']['q95']:.4g}")
    basis = rules.pin_basis(row, "up")
    assert basis["statistic"] == "score" and basis["rival"] is None
    assert rules.pin_text(row, "up").startswith(f"rise > {thr:g}: the 95th percentile of the part scores in ")


def _level_row(before, control, bad="up", kind="counter", rise=None):
    op = "<" if bad == "down" else ">"
    sign = -1.0 if bad == "down" else 1.0
    return {"metric": "gpu.pcie.link_width" if bad == "down" else METRIC, "unit": "lanes", "kind": kind,
            "statistic": "level", "median_score_before": sign * float(np.median(before)),
            "median_score_control": sign * float(np.median(control)),
            "median_before": float(np.median(before)), "median_control": float(np.median(control)),
            "level_readings": rules.level_readings(before, control, "rate" if kind == "counter" else "threshold", op),
            "rise_readings": rise}


def test_a_low_level_pins_below_the_controls_fifth_percentile_and_the_good_direction_is_refused():
    # a link width: 16 lanes, in 10 % of healthy windows some link of the hosts at 12 or 8
    control = [16.0] * 90 + [12.0] * 5 + [8.0] * 5
    before = [4.0, 4.0, 8.0, 16.0]
    row = _level_row(before, control, bad="down", kind="gauge")
    assert row["level_readings"]["control"]["q5"] == 12.0 and "before_below" in row["level_readings"]
    # "< 12" fires in 5 % of the controls (the 8s) and before three of the four
    assert rules.pin_rule(row, "down", False) == ("threshold", "<", 12.0)
    assert sum(v < 12.0 for v in control) == 5
    basis = rules.pin_basis(row, "down")
    assert basis["quantile"] == 0.05 and basis["before_above"] == 0.75 and basis["rival"] is None
    assert rules.pin_text(row, "down").startswith(
        "threshold < 12 lanes: the 5th percentile of the lowest value of any part in 100 control windows "
        "(at most 5 % of them below it; 3 of 4 windows before the outcome below)")
    # the good direction (wider before failures) is refused, as for a rise
    good = _level_row([16.0] * 4, [8.0] * 60, bad="down", kind="gauge")
    with pytest.raises(ValueError, match="good direction"):
        rules.pin_rule(good, "down", False)
    few = _level_row([5.0, 6.0], [1.0] * 12)
    with pytest.raises(ValueError, match="only 12 control windows"):
        rules.pin_rule(few, "up", True)


def test_the_rounding_never_lets_a_control_at_the_quantile_pass():
    control = [1 / 60] * 96 + [0.2] * 4  # a counter's minute rates are quantised: many ties at q95
    row = _level_row([0.5] * 4, control)
    thr = rules.pin_rule(row, "up", True)[2]
    assert thr >= 1 / 60 and sum(v > thr for v in control) <= 5
    assert rules.pin_rule(_level_row([0.5] * 4, [0.0123449] * 100), "up", True)[2] == 0.01235


def test_a_level_row_takes_the_rise_where_the_rise_passes_before_more_and_old_rows_pin_as_before():
    control = [float(i % 10) / 10 for i in range(60)]
    rise = rules.rise_readings([5.0] * 4, control)
    row = _level_row([5.0, 5.0, 0.1, 0.1], control, rise=rise)
    assert rules.pin_rule(row, "up", True) == ("rise", ">", 0.9)
    assert "but a rate rule set the same way passes before only 2 of 4" in rules.pin_text(row, "up")
    # a scan stored before the level pin (no statistic): the rise pin, as before
    old = {k: v for k, v in row.items() if k not in ("statistic", "level_readings")}
    old["median_score_before"], old["median_score_control"] = 3.0, 0.4
    assert rules.pin_rule(old, "up", True) == ("rise", ">", 0.9)
    # a level row without level readings (no reading on one side): the rise pin, said plainly
    bare = {**row, "level_readings": None}
    assert rules.pin_rule(bare, "up", True) == ("rise", ">", 0.9)
    assert rules.pin_text(bare, "up").startswith("rise > 0.9: the 95th percentile of the part scores in 60 ")
    # no readings at all (older still): the midpoint of the medians, as before
    assert rules.pin_rule({"metric": METRIC, "median_score_before": 3.0, "median_score_control": 0.2}, "up", True) == (
        "rise", ">", 1.6)
    # a level row without a bad direction that ran lower before: the midpoint of the level medians
    low = _level_row([0.1] * 4, [0.5] * 40)
    low["metric"] = "gpu.pcie.tx_rate"
    assert rules.pin_rule(low, "none", False) == ("threshold", "<", 0.3)


def test_the_scan_page_and_the_pinned_hypothesis_say_which_rule_and_why(fleet, db, investigator):
    from investigations.models import BackgroundJob
    from investigations.services import scans
    from tests.investigations.factories import client_for

    scan, row = _row("XID 79")
    job = BackgroundJob.objects.create(kind="signal_scan", state="succeeded", params={"lead_window_s": W},
                                       result=scan)
    basis = rules.pin_basis(row, "up")
    html = client_for(investigator).get(f"/jobs/{job.pk}/").content.decode()
    cell = html.split('class="muted small nowrap pin-basis"')[1].split("</div>")[0]
    assert f"rate &gt; {basis['threshold']:.3g} · p95 of {basis['n_control']} controls · 1.00 before" in cell
    assert "the scan tested the failing part&#x27;s level" in cell  # the tooltip: which rule and why
    h = scans.pin_finding(investigator, job, METRIC)
    assert (h.condition, h.operator, h.threshold) == ("rate", ">", basis["threshold"])
    assert "runs higher in the 3 h before XID 79" in h.statement
    assert (f"the 95th percentile of the highest minute rate of any part in {basis['n_control']} control windows, "
            f"passed in 8 of 8 windows before") in h.statement


# A second fleet: before each XID 79 the failing gpu1 runs a little above its trickle (3x) while
# its sibling gpu2 on the same host bursts (the job's heavy phase, say); at healthy times nothing
# bursts. What the pinned rule will be judged on before the outcome is the failing GPU (the fleet
# test reads that part alone), so the readings before the outcome must be that GPU's: read over
# every GPU of the host they would credit the rule with the sibling's bursts.
SIB = "levelpin-sibling"
SIB_HOSTS = [f"s{i:02d}" for i in range(10)]
SIB_FAILURES = {"s00": 40, "s01": 52, "s02": 64, "s03": 76, "s04": 88, "s05": 100}


@pytest.fixture(scope="module")
def sibling_fleet(telemetry_store):
    rng = np.random.default_rng(7)
    days = 5
    n = days * 86400 // STEP
    ts = every(BASE, STEP, n)
    for host in SIB_HOSTS:
        for g in range(GPUS):
            rate = np.full(n, HEALTHY)
            if host in SIB_FAILURES:
                t0 = SIB_FAILURES[host] * 3600 // STEP
                if g == 1:
                    rate[t0 - W // STEP:t0] = 3 * HEALTHY
                if g == 2:
                    rate[t0 - W // STEP:t0] = 40.0
            write_samples(SIB, host, f"gpu{g}", METRIC, ts, np.cumsum(rng.poisson(rate)))
    write_part_failures(SIB, SIB_HOSTS, SIB_FAILURES, BASE + timedelta(days=days), xid=79, component="gpu1", gpus=GPUS)
    return SIB


def test_the_readings_before_the_outcome_are_the_failing_parts_as_the_fleet_test_judges(sibling_fleet):
    scan = signal_scan.scan(windows.parse_outcome("XID 79"), W, clusters=[SIB], metrics=[METRIC])
    row = scan["rows"][0]
    assert scan["components_named"] == len(SIB_FAILURES) and row["statistic"] == "level", row
    levels, rise = row["level_readings"], row["rise_readings"]
    assert levels["before"]["n"] == len(SIB_FAILURES) and levels["control"]["n"] >= rules.MIN_PIN_CONTROLS
    # the failing GPU's highest minute rate: a handful of replays, nowhere near the sibling's ~20/min
    assert levels["before"]["q95"] < 0.1, levels
    # so no window before the outcome passes the controls' 95th percentile on the failing GPU
    assert levels["before_above"]["q95"] == 0.0 and rise["before_above"]["q95"] < 1.0, (levels, rise)
    # the fleet test of each rule set the same way counts what its readings said before the outcome
    basis = rules.pin_basis(row, "up")
    for rule in (basis, basis["rival"]):
        res = ft.run(ft.Signal(METRIC, rule["condition"], rule["operator"], rule["threshold"], W),
                     windows.parse_outcome("XID 79"), clusters=[SIB]).as_dict()
        t = res["table"]
        assert t["a"] + t["c"] == rule["n_before"] == len(SIB_FAILURES), (rule, t)
        assert t["a"] == round(rule["before_above"] * rule["n_before"]), (rule, t)
    # the level rule catches none (the sibling's bursts are not the failing GPU's); the failing
    # GPU's own 3x rise passes its rise threshold before some, so the pin takes the rise rule
    level = basis if basis["condition"] == "rate" else basis["rival"]
    assert level["condition"] == "rate" and level["before_above"] == 0.0, basis
    assert basis["condition"] == "rise" and basis["before_above"] > 0, basis
    assert "a rate rule set the same way passes before only 0 of 6" in rules.pin_text(row, "up")
