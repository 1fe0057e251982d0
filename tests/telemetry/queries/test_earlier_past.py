"""The score's earlier past never reaches across an interruption.

Measured on the 96-host x 14-day bench fleet (2026-12-04): when a window's recent past was cut
short by the host's last interruption and the earlier past was taken from before that interruption,
the window was scored against another job's workload. Traffic counters (InfiniBand and NVLink
bytes) then scored higher before NODE_FAIL than in the controls — AUC 0.58-0.63 over 34 windows
before and 351 controls, 19 false findings at q < 0.05 — and fell back to 0.55-0.56 once the
earlier past stopped at the interruption (0.53-0.54 with no earlier past at all).

The fleet here: one host's job is interrupted; the requeued job on it moves ten times the bytes.
A window a day into the new job is scored against the new job's own hours only — about 0 — not
against the old job's (ln 10 ≈ 2.3 for the same healthy link). A window with no interruption in
its recent past keeps its earlier past (the slow-precursor test needs it)."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import scores, windows

from . import BASE, every, write_samples

pytestmark = pytest.mark.slow

CLUSTER = "earlierpast"
STEP = 300
DAYS = 5
N = DAYS * 86400 // STEP
METRIC = "ib.port_xmit_data"
W = 6 * 3600
T1 = int((BASE + timedelta(days=2)).timestamp())  # h0's job is interrupted here, requeued 20 min later


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(3)
    ts = every(BASE, STEP, N)
    t = np.array([int(x.timestamp()) for x in ts])
    for host in ("h0", "h1"):
        rate = np.where(t < T1, 2e9, 2e10) if host == "h0" else np.full(N, 2e9)  # bytes per step
        write_samples(CLUSTER, host, "mlx5_0", METRIC, ts, np.cumsum(rate * rng.lognormal(0, 0.1, N)))
    return CLUSTER


def test_a_window_after_an_interruption_is_not_scored_against_the_job_before_it(fleet):
    t0s = {"h0": np.array([T1])}
    s = T1 + 20 * 3600
    B = scores.baseline_for(W)
    (r0, r1), (e0, e1) = scores._pasts(np.array([s]), W, B, t0s["h0"])
    assert r0[0] == T1 + W and r1[0] == s  # the recent past: the new job's hours after the recovery
    assert e0[0] == e1[0]  # no earlier past: it would lie before the interruption
    spans = [windows.Window("before", 0, ("h0",), s, s + W), windows.Window("peers", 0, ("h1",), s, s + W)]
    got = scores.window_scores(fleet, spans, [METRIC], host_t0s=t0s).score[METRIC]
    assert abs(got[0][("h0", "mlx5_0")]) < 0.5, got  # the new job against itself
    assert abs(got[1][("h1", "mlx5_0")]) < 0.5, got


def test_without_an_interruption_the_earlier_past_stays(fleet):
    s = T1 + 20 * 3600
    B = scores.baseline_for(W)
    (r0, r1), (e0, e1) = scores._pasts(np.array([s]), W, B, np.array([T1 - 5 * 86400]))
    assert r0[0] == s - B and e1[0] == s - B and e0[0] == s - B - scores.EARLIER_BASELINE_S
    # an interruption inside the earlier past's span: it starts one window after it
    (_, _), (e0, e1) = scores._pasts(np.array([s]), W, B, np.array([s - B - 86400]))
    assert e0[0] == s - B - 86400 + W and e1[0] == s - B
