"""What a rate rule reads in a window (the scores' ``rule`` for a counter): the highest per-second
rate between consecutive minutes of a series — from one minute's highest value to the next's, over
their last samples' times — whose later minute lies wholly inside the window, 0 across a reset.
The engine pairs each rollup row with the series' previous row as it reads them (``scores._PREVIOUS``);
these windows' answers are known from the samples written."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import scores, windows

from . import BASE, every, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "minute-rates"
HOST = "m01"
METRIC = "gpu.pcie.replay"
STEP = 60
DAYS = 3
N = DAYS * 86400 // STEP
W = 3 * 3600
BURST = N - 100  # the counter is 600 higher at this sample than at the one before (10 /s)
RESET = N - 60  # the counter restarts from 0 here (a reboot), then climbs as before


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    # one sample a minute, 30 s into it: each rollup minute holds one sample, so the rate between
    # two minutes is the step between their samples over 60 s
    ts = every(BASE + timedelta(seconds=30), STEP, N)
    steps = np.ones(N)
    steps[BURST] = 600.0
    values = np.cumsum(steps)
    values[RESET:] -= values[RESET] - 5.0  # back to 5, then +1 a minute
    write_samples(CLUSTER, HOST, "gpu0", METRIC, ts, values)
    write_samples(CLUSTER, HOST, "gpu1", METRIC, ts, np.cumsum(np.full(N, 3.0)))  # 3 a minute throughout
    return CLUSTER


def _start(k: int) -> int:
    """The epoch second of the minute that holds sample k."""
    return int(BASE.timestamp()) + k * STEP


def _rule(spans):
    return scores.window_scores(CLUSTER, spans, [METRIC]).rule[METRIC]


def test_the_highest_minute_rate_inside_the_window(fleet):
    end = _start(N - 10)
    spans = [windows.Window("before", 0, (HOST,), end - W, end),  # the burst and the reset inside
             windows.Window("same_hosts", 0, (HOST,), _start(BURST - 300) - W, _start(BURST - 300))]
    got = _rule(spans)
    # the burst: 600 counted between two samples a minute apart
    assert got[0][(HOST, "gpu0")] == pytest.approx(600 / 60)
    # a quiet window: one a minute; the steady part reads its own rate, not its neighbour's burst
    assert got[1][(HOST, "gpu0")] == pytest.approx(1 / 60)
    assert got[0][(HOST, "gpu1")] == pytest.approx(3 / 60) and got[1][(HOST, "gpu1")] == pytest.approx(3 / 60)


def test_the_step_into_the_window_counts_and_a_reset_counts_nothing(fleet):
    # the window starts with the burst's minute: the burst is the step into it from the minute before
    first = BURST
    spans = [windows.Window("before", 0, (HOST,), _start(first), _start(first) + W),
             # a window whose only unusual step is the reset: the drop reads as no rate at all
             windows.Window("same_hosts", 0, (HOST,), _start(RESET - 5), _start(RESET - 5) + 1800)]
    got = _rule(spans)
    assert got[0][(HOST, "gpu0")] == pytest.approx(600 / 60)
    assert got[1][(HOST, "gpu0")] == pytest.approx(1 / 60)


def test_a_step_after_the_window_never_enters_it(fleet):
    # the window ends with the minute before the burst's: its samples are all quiet
    end = _start(BURST)
    got = _rule([windows.Window("before", 0, (HOST,), end - W, end)])
    assert got[0][(HOST, "gpu0")] == pytest.approx(1 / 60)
