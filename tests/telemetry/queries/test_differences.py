"""'What's different here' ranking against a real embedded store."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import differences
from telemetry.queries.differences import DifferenceQuery

from . import BASE, every, write_samples

pytestmark = pytest.mark.slow  # a fleet per test; the case page's differences fragment stays in --fast

T0 = BASE + timedelta(hours=8)
PEERS = ["p1", "p2", "p3", "p4"]


@pytest.fixture
def fleet(clean_store):
    rng = np.random.default_rng(11)
    ts = every(T0 - timedelta(hours=1), 30, 120)
    for host in ["bad"] + PEERS:
        for g in range(4):
            comp = f"gpu{g}"
            temp = 60 + rng.normal(0, 1.0, len(ts))
            replay = np.cumsum(rng.integers(0, 2, len(ts))).astype(float)  # ~1 per minute on every GPU
            fan = 9000 + rng.normal(0, 50, len(ts))
            if host == "bad" and g == 3:
                replay = np.cumsum(rng.integers(20, 40, len(ts))).astype(float)  # the injected precursor
                replay[60:] -= replay[59] - 5  # with a counter reset half way
            if host == "bad" and g == 1:
                fan = fan + 3000  # faster fan: bad=down, so not suspicious
            write_samples("c1", host, comp, "gpu.temp", ts, temp)
            write_samples("c1", host, comp, "gpu.pcie.replay", ts, replay)
            write_samples("c1", host, comp, "cooling.fan_rpm", ts, fan)
    return ts


def test_the_injected_anomaly_ranks_first(fleet):
    rows = differences.whats_different(DifferenceQuery("c1", T0, 3600, ["bad"], PEERS))
    top = rows[0]
    assert (top.metric, top.host, top.component) == ("gpu.pcie.replay", "bad", "gpu3")
    assert top.score > 10 and top.unit == "count/s"
    assert top.affected_value == pytest.approx(30 / 30, rel=0.25)  # ~30 replays per 30 s sample
    assert top.peer_median == pytest.approx(1 / 60, rel=0.5)
    assert top.n_peers == 16
    assert top.peer_p95 >= top.peer_median
    assert all(r.score <= top.score for r in rows)


def test_direction_follows_the_catalog(fleet):
    rows = differences.whats_different(DifferenceQuery("c1", T0, 3600, ["bad"], PEERS, top_n=100))
    assert not any(r.metric == "cooling.fan_rpm" and r.component == "gpu1" for r in rows)
    fans = differences.whats_different(DifferenceQuery("c1", T0, 3600, ["bad"], PEERS, metrics=["cooling.fan_rpm"]))
    assert all(r.score < 3 for r in fans)  # only noise: the +3000 rpm fan is not suspicious
    assert "gpu1" not in {r.component for r in fans}


def test_stats_are_computed_in_the_engine_per_component(fleet):
    df = differences.component_stats(DifferenceQuery("c1", T0, 3600, ["bad"], PEERS, metrics=["gpu.temp"]))
    assert len(df) == 5 * 4
    assert df["is_affected"].sum() == 4
    assert df["stat"].between(57, 63).all()


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="'gpu.nope' not canonical"):
        differences.component_stats(DifferenceQuery("c1", T0, 3600, ["bad"], PEERS, metrics=["gpu.nope"]))
