"""Signals together, on a fleet whose truth we wrote: PCIe replays (GPU layer) burst once a day
on every host and InfiniBand symbol errors (network layer) burst once a day on every host, never
within hours of each other — except before each of six NODE_FAILs, where the replay burst comes
first and the symbol errors follow ten minutes later. Each signal alone fires before every failure
and in many controls; only the pair is specific. The fleet test must say the pair beats each."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import fleet_test as st
from telemetry.queries import together

from . import BASE, every, write_rows, write_samples
from .test_fleet_test import DAYS, FAILURES, HOSTS, N, STEP, _job

pytestmark = pytest.mark.slow

CLUSTER = "together"
BURST_MIN = 20
GAP_MIN = 10  # from the end of the replay burst to the start of the symbol errors, before failures


def write_pair_fleet(cluster: str) -> str:
    ts = every(BASE, STEP, N)
    rng = np.random.default_rng(3)
    jobs, alloc = [], []
    for i, host in enumerate(HOSTS):
        a_on = np.zeros(N, dtype=bool)
        b_on = np.zeros(N, dtype=bool)
        for day in range(DAYS):  # the noise: replays in hours 3-12, symbol errors in hours 14-21
            a0 = (day * 24 + 3 + (i * 5 + day * 7) % 10) * 60
            b0 = (day * 24 + 14 + (i * 3 + day * 5) % 8) * 60
            a_on[a0:a0 + BURST_MIN] = True
            b_on[b0:b0 + BURST_MIN] = True
        for fh, hours in FAILURES:
            if fh == host:  # the pair: replays from t0 − 3 h, symbol errors 10 min after they stop
                a0 = hours * 60 - 180
                b0 = a0 + BURST_MIN + GAP_MIN
                a_on[a0:a0 + BURST_MIN] = True
                b_on[b0:b0 + BURST_MIN] = True
        for metric, component, on in (("gpu.pcie.replay", "gpu0", a_on), ("net.symbol_errors", "mlx5_0", b_on)):
            counter = np.cumsum(rng.poisson(0.01, N) + on * 30.0)  # 0.5/s while on, ~0.0002/s otherwise
            write_samples(cluster, host, component, metric, ts, counter)
        j, a = _job(str(800 + i), host, BASE + timedelta(days=DAYS), "COMPLETED", cluster=cluster)
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j)
        alloc.append(a)
    for k, (host, hours) in enumerate(FAILURES):
        j, a = _job(str(500 + k), host, BASE + timedelta(hours=hours), cluster=cluster)
        jobs.append(j)
        alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    return cluster


@pytest.fixture(scope="module")
def pair_fleet(telemetry_store):
    return write_pair_fleet(CLUSTER)


REPLAYS = st.Signal("gpu.pcie.replay", "rate", ">", 0.1, 6 * 3600)


def test_a_conjunction_beats_each_of_its_signals_when_only_the_pair_precedes_failures(pair_fleet):
    pair = together.parse("then net.symbol_errors rate > 0.1 within 30 min")
    r = together.run(REPLAYS, pair, st.parse_outcome("NODE_FAIL"), clusters=[pair_fleet])
    rows = {row["role"]: row for row in r["side_by_side"]}
    both, a, b = rows["together"], rows["A alone"], rows["B alone"]
    # every failure was preceded by each signal and by the pair...
    assert (both["table"]["a"], a["table"]["a"], b["table"]["a"]) == (6, 6, 6)
    assert both["recall"] == a["recall"] == b["recall"] == 1.0
    # ...on the same windows (the three 2x2 tables have the same margins)
    assert sum(both["table"].values()) == sum(a["table"].values()) == sum(b["table"].values()) > 6
    # but each alone also fires in the controls, the pair never
    assert both["table"]["b"] == 0 and a["table"]["b"] > 5 and b["table"]["b"] > 5
    assert both["lift"] > 3 * max(a["lift"], b["lift"]) and both["p"] < min(a["p"], b["p"]) and both["p"] < 1e-3
    # a deployed rule: the pair's alarms are the six failures; each alone raises one a day per host
    assert (both["alarms"], both["true_alarms"], both["precision"]) == (6, 6, 1.0)
    assert a["precision"] < 0.2 and b["precision"] < 0.2
    assert r["beats_each_alone"] is True and r["lift"] == both["lift"]
    assert r["combination"] == {"mode": "then", "within_s": 1800, "text": pair.text}
    assert r["signal"] == ("gpu.pcie.replay rate /s > 0.1 then net.symbol_errors rate /s > 0.1 within 30 min, "
                           "6 h before")
    assert set(r["alone"]) == {"a", "b"} and "examples" not in r["alone"]["a"]


def test_order_and_distance_matter(pair_fleet):
    outcome = st.parse_outcome("NODE_FAIL")
    # "and" takes either order: the same as "then" here
    both = together.run(REPLAYS, together.parse("and net.symbol_errors rate > 0.1 within 30 min"), outcome,
                        clusters=[pair_fleet])
    assert both["table"]["a"] == 6 and both["table"]["b"] == 0
    # the symbol errors never come first: "symbol errors then replays" fires nowhere
    errors_first = st.Signal("net.symbol_errors", "rate", ">", 0.1, 6 * 3600)
    reverse = together.run(errors_first, together.parse("then gpu.pcie.replay rate > 0.1 within 30 min"), outcome,
                           clusters=[pair_fleet])
    assert reverse["table"]["a"] == 0 and reverse["alarms"] == 0 and reverse["beats_each_alone"] is False
    # 5 minutes is closer than the 10-minute gap: the pair never forms
    tight = together.run(REPLAYS, together.parse("then net.symbol_errors rate > 0.1 within 5 min"), outcome,
                         clusters=[pair_fleet])
    assert tight["table"]["a"] == 0


def test_pair_times():
    a = np.array([100.0, 1000.0])
    b = np.array([150.0, 900.0, 5000.0])
    assert together.pair_times(a, b, "then", 60).tolist() == [150.0]
    assert together.pair_times(a, b, "and", 100).tolist() == [150.0, 1000.0]  # 900 then 1000: b first
    assert together.pair_times(a, None, "and", 100).tolist() == []


@pytest.mark.parametrize("text, expected", [
    ("then net.symbol_errors rate > 0.5 within 30 min", ("then", "net.symbol_errors", "rate", ">", 0.5, 1800)),
    ("AND gpu.temp > 85 within 2 h", ("and", "gpu.temp", "threshold", ">", 85.0, 7200)),
    ("and  gpu.temp value <40 within 90s", ("and", "gpu.temp", "threshold", "<", 40.0, 90)),
    ("then DCGM_FI_DEV_GPU_TEMP trend > 3 within 45 minutes", ("then", "gpu.temp", "trend", ">", 3.0, 2700)),
])
def test_combinations_it_reads(text, expected):
    t = together.parse(text)
    assert (t.mode, t.metric, t.condition, t.operator, t.threshold, t.within_s) == expected
    assert together.parse(t.text) == t


@pytest.mark.parametrize("text, message", [
    ("", "combined_with: empty"),
    ("or gpu.temp > 5 within 5 min", "starts with 'and' (both within N min of each other) or 'then'"),
    ("then gpu.temp > 5", "ends with 'within N min'"),
    ("then within 5 min", "no second signal between 'then' and 'within'"),
    ("then gpu.nope > 5 within 5 min", "unknown metric 'gpu.nope'"),
    ("then gpu.temp jumps > 5 within 5 min", "'jumps' after gpu.temp is not a condition"),
    ("then gpu.temp rate = 5 within 5 min", "an operator (> or <) and a threshold, got '= 5'"),
    ("then gpu.temp > hot within 5 min", "threshold 'hot' is not a number"),
    ("then gpu.temp > 5 within soon", "'within soon' is not a duration"),
    ("then gpu.temp > 5 within 2 d", "'within 2 d' is not a duration"),
    ("then gpu.temp > 5 within 30 s", "from 1 min to 24 h"),
])
def test_combinations_it_refuses_say_what_is_wrong(text, message):
    with pytest.raises(together.CombinationError) as caught:
        together.parse(text)
    assert message in str(caught.value)


def test_a_signal_combined_with_itself_is_refused():
    with pytest.raises(together.CombinationError, match="the second signal is the first one again"):
        together.check("gpu.pcie.replay", "rate", ">", 0.1, together.parse("and gpu.pcie.replay rate > 0.1 within 5 min"))


def test_a_rise_signal_judges_windows_as_the_single_signal_fleet_test_does(pair_fleet):
    """A ``rise`` signal in a combination reads each window as the fleet test of that signal alone
    does (the scan's reading: the part's score of the window's own data), not "any firing minute":
    the rolling score of a minute early in a window still reads the hour before the window, so a
    replay burst that ended before a control window would otherwise fire it. The same windows, so
    the same table as the signal's own fleet test; and the pair never fires where it does not."""
    outcome = st.parse_outcome("NODE_FAIL")
    rise = st.Signal("gpu.pcie.replay", "rise", ">", 1.0, 6 * 3600)
    alone = st.run(rise, outcome, clusters=[pair_fleet]).as_dict()
    r = together.run(rise, together.parse("then net.symbol_errors rate > 0.1 within 30 min"), outcome,
                     clusters=[pair_fleet])
    rows = {row["role"]: row for row in r["side_by_side"]}
    assert rows["A alone"]["table"] == alone["table"], (rows["A alone"]["table"], alone["table"])
    assert alone["table"]["a"] >= 3 and alone["table"]["b"] > 0  # the daily bursts fire some controls
    assert rows["together"]["table"]["a"] <= alone["table"]["a"] and rows["together"]["table"]["b"] <= alone["table"]["b"]
    # and the other way round: a rise as the second signal is judged the same way
    second = together.run(REPLAYS, together.parse("and gpu.pcie.replay rise > 1 within 30 min"), outcome,
                          clusters=[pair_fleet])
    assert {row["role"]: row for row in second["side_by_side"]}["B alone"]["table"] == alone["table"]
