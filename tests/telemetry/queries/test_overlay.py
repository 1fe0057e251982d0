"""The case overlay runner against a real embedded store."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry import store
from telemetry.queries import overlay
from telemetry.queries.overlay import InvalidSignal, OverlayQuery, SignalSpec

from . import BASE, event_row, every, host_row, write_rows, write_samples

T0 = BASE + timedelta(hours=12)


def test_counter_rate_handles_a_reset(clean_store):
    ts = every(T0 - timedelta(minutes=5), 10, 30)
    # +5 per 10 s, reset to 3 at index 15, then +5 per 10 s again.
    values = [100 + 5 * i for i in range(15)] + [3 + 5 * i for i in range(15)]
    write_samples("c1", "n1", "gpu0", "gpu.pcie.replay", ts, values)
    q = OverlayQuery("c1", T0, -300, 0, [SignalSpec("gpu.pcie.replay", "n1", "gpu0")], max_points=600)
    res = overlay.run_overlay(q, allowed_hosts={"n1"})
    s = res.series[0]
    assert res.source == "samples"
    assert s.kind == "counter" and s.unit == "count/s"
    rates = dict(zip(np.round(s.x).astype(int), s.y))
    assert rates[-150] == pytest.approx(3 / 10)  # the reset: rate from the new value
    assert rates[-160] == pytest.approx(0.5)
    assert rates[-140] == pytest.approx(0.5)
    assert np.all(s.y >= 0)


def test_peer_band_percentiles_match_numpy(clean_store):
    rng = np.random.default_rng(7)
    ts = every(T0 - timedelta(minutes=10), 10, 60)
    write_samples("c1", "bad", "gpu2", "gpu.temp", ts, np.full(60, 90.0))
    peer_values = {}
    for h in range(4):
        for g in range(8):
            vals = 60 + rng.normal(0, 3, 60)
            peer_values[(h, g)] = vals
            write_samples("c1", f"p{h}", f"gpu{g}", "gpu.temp", ts, vals)
    # A NIC metric on peers must not leak into the GPU band.
    write_samples("c1", "p0", "mlx5_0/1", "gpu.temp", ts, np.full(60, 1000.0))
    q = OverlayQuery("c1", T0, -600, 0, [SignalSpec("gpu.temp", "bad", "gpu2")],
                     peers=["p0", "p1", "p2", "p3"], max_points=60)
    res = overlay.run_overlay(q, allowed_hosts={"bad", "p0", "p1", "p2", "p3"})
    band = res.series[0].band
    assert band is not None and res.bucket_s == 10
    all_vals = np.stack(list(peer_values.values()))  # (32 series, 60 samples)
    assert len(band.x) == 60
    for i in (0, 17, 59):
        col = all_vals[:, i]
        assert band.n[i] == 32
        np.testing.assert_allclose([band.p5[i], band.median[i], band.p95[i]], np.percentile(col, [5, 50, 95]))
    np.testing.assert_allclose(res.series[0].y, 90.0)


def test_downsampling_keeps_max_points_and_the_spike(clean_store):
    ts = every(T0 - timedelta(hours=2), 1, 7200)
    rng = np.random.default_rng(3)
    vals = 50 + rng.normal(0, 1, 7200)
    vals[4321] = 400.0
    write_samples("c1", "n1", "gpu0", "gpu.power", ts, vals)
    q = OverlayQuery("c1", T0, -7200, 0, [SignalSpec("gpu.power", "n1", "gpu0")], max_points=200)
    res = overlay.run_overlay(q, allowed_hosts={"n1"})
    s = res.series[0]
    assert res.source == "samples"
    assert 100 < len(s.x) <= 200
    assert s.y.max() == 400.0
    assert s.x[np.argmax(s.y)] == pytest.approx(-7200 + 4321)


def test_long_windows_read_the_rollup(clean_store):
    ts = every(T0 - timedelta(hours=24), 30, 2 * 60 * 24)
    vals = np.full(len(ts), 40.0)
    vals[1000] = 85.0  # inside one minute: the rollup keeps the max for a bad=up gauge
    write_samples("c1", "n1", "gpu1", "gpu.temp", ts, vals)
    q = OverlayQuery("c1", T0, -24 * 3600, 0, [SignalSpec("gpu.temp", "n1", "gpu1")], max_points=600)
    res = overlay.run_overlay(q, allowed_hosts={"n1"})
    assert res.source == "samples_1m"
    assert res.bucket_s == 180
    s = res.series[0]
    assert len(s.x) <= 600
    assert s.y.max() == 85.0
    assert overlay.choose_source(6 * 3600, 600)[0] == "samples"


def test_events_come_back_as_markers(clean_store):
    ts = every(T0 - timedelta(minutes=5), 10, 30)
    write_samples("c1", "n1", "gpu3", "gpu.temp", ts, np.arange(30.0))
    write_rows("events", [
        event_row("c1", "n1", T0 - timedelta(minutes=2), "xid", 79, "gpu3", "critical", "fell off the bus"),
        event_row("c1", "n1", T0 - timedelta(minutes=1), "kernel", 0, "", "info", "noise"),
        event_row("c1", "n2", T0 - timedelta(minutes=1), "xid", 48, "gpu0", "critical", "other host"),
    ])
    res = overlay.run_overlay(OverlayQuery("c1", T0, -300, 60, [SignalSpec("gpu.temp", "n1", "gpu3")]),
                              allowed_hosts={"n1"})
    assert [(e.kind, e.code, e.x) for e in res.events] == [("xid", 79, -120.0)]


def test_hosts_are_checked_against_the_inventory(clean_store):
    write_rows("hosts", [host_row("c1", "n1")])
    with pytest.raises(InvalidSignal, match="'ghost' is not in the inventory"):
        overlay.run_overlay(OverlayQuery("c1", T0, -60, 0, [SignalSpec("gpu.temp", "ghost", "gpu0")]))
    res = overlay.run_overlay(OverlayQuery("c1", T0, -60, 0, [SignalSpec("gpu.temp", "n1", "gpu0")]))
    assert len(res.series[0].x) == 0


@pytest.mark.parametrize(
    "signal, message",
    [
        (SignalSpec("gpu.tmep", "n1", "gpu0"), "metric 'gpu.tmep' is not in the metric catalog"),
        (SignalSpec("gpu.temp", "n9", "gpu0"), "host 'n9' is not in the inventory"),
        (SignalSpec("gpu.temp", "n1", "gpu0'; DROP TABLE samples"), "is not a valid component name"),
    ],
)
def test_invalid_signals_raise_before_any_sql(monkeypatch, signal, message):
    calls = []
    for name in ("query_rows", "query_df", "query_arrow"):
        monkeypatch.setattr(store, name, lambda *a, **k: calls.append(a))
    q = OverlayQuery("c1", T0, -60, 0, [SignalSpec("gpu.temp", "n1", "gpu1"), signal])
    with pytest.raises(InvalidSignal, match="signal 2") as err:
        overlay.run_overlay(q, allowed_hosts={"n1"})
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)
    assert calls == []


def test_unknown_metric_is_rejected_before_the_inventory_lookup(monkeypatch):
    calls = []
    monkeypatch.setattr(store, "query_rows", lambda *a, **k: calls.append(a))
    with pytest.raises(InvalidSignal, match="not in the metric catalog"):
        overlay.run_overlay(OverlayQuery("c1", T0, -60, 0, [SignalSpec("no.such", "n1", "")]))
    assert calls == []


def test_window_and_points_are_validated():
    with pytest.raises(InvalidSignal, match="start_offset_s"):
        overlay.validate(OverlayQuery("c1", T0, 0, -60, [SignalSpec("gpu.temp", "n1", "gpu0")]), allowed_hosts=None)
    with pytest.raises(InvalidSignal, match="max_points"):
        overlay.validate(OverlayQuery("c1", T0, -60, 0, [SignalSpec("gpu.temp", "n1", "gpu0")], max_points=1),
                         allowed_hosts=None)
