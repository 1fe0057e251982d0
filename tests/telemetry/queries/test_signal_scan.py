"""Signal scan on the fleet whose truth we wrote (see test_fleet_test): the injected precursor
(PCIe replays ramping before each NODE_FAIL) ranks first with a small q; the noise metric (inlet
temperature spiking anywhere) does not stand out."""
from __future__ import annotations

import pytest

from telemetry.queries import signal_scan, windows

from .test_fleet_test import write_fleet

pytestmark = pytest.mark.slow  # see ./precursor test --fast


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    return write_fleet("scan", seed=3)


def test_the_precursor_ranks_first_and_the_noise_does_not_stand_out(fleet):
    stages = []
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 6 * 3600, clusters=[fleet],
                         progress=lambda done, total, stage: stages.append((done, total, stage)))
    assert r["outcome_interruptions"] == 6 and r["metrics_tested"] == 2 and r["matched_on_activity"]
    first, second = r["rows"]
    assert first["metric"] == "gpu.pcie.replay" and first["auc"] == 1.0 and first["q"] < 0.01
    assert first["n_before"] == 6 and first["n_control"] >= 12
    assert first["median_before"] > 0.4 > first["median_control"]  # ~0.5/s during a ramp
    assert second["metric"] == "cooling.inlet_temp" and second["q"] > 0.05
    assert any("scanning metric 1/2" in s for _, _, s in stages) and stages[-1][0] == stages[-1][1]


def test_a_scan_limited_to_some_metrics_and_an_outcome_with_none_in_range(fleet):
    r = signal_scan.scan(windows.parse_outcome("XID 79"), 3600, clusters=[fleet], metrics=["gpu.pcie.replay"])
    assert r["outcome_interruptions"] == 3 and [row["metric"] for row in r["rows"]] == ["gpu.pcie.replay"]
    none = signal_scan.scan(windows.parse_outcome("TIMEOUT"), 3600, clusters=[fleet])
    assert none["outcome_interruptions"] == 0 and none["rows"] == [] and none["metrics_tested"] == 0


def test_what_the_scan_refuses():
    with pytest.raises(windows.NotTestable, match="1 min to 30 days"):
        signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 30)
    with pytest.raises(windows.NotTestable, match="not in the catalog: gpu.nope"):
        signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3600, metrics=["gpu.nope"])
