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


@pytest.mark.slow
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


# ---- the fleet band rollup (band_1m, migration 0006) and the choice of band ----

def _band_rows(cluster: str, metric: str):
    return store.query_rows(
        "SELECT family, ts, quantilesTDigestMerge(0.05, 0.5, 0.95)(mean_q), quantilesTDigestMerge(0.05, 0.5, 0.95)(max_q), "
        "quantilesTDigestMerge(0.05, 0.5, 0.95)(min_q), sum(level_n), "
        "quantilesTDigestMerge(0.05, 0.5, 0.95)(rate_q), sum(rate_n) FROM band_1m "
        "WHERE cluster = {c:String} AND metric = {m:String} GROUP BY family, ts ORDER BY family, ts",
        {"c": cluster, "m": metric}, tag="test",
    )


def test_the_view_fills_band_1m_on_insert_with_minute_mean_max_and_min(clean_store):
    minute = T0 - timedelta(minutes=30)
    # Two series, six samples each in one minute: means 2.5 and 12.5, maxes 5 and 15, mins 0 and 10.
    write_samples("c1", "a", "gpu0", "gpu.temp", every(minute, 10, 6), np.arange(6.0))
    write_samples("c1", "b", "gpu1", "gpu.temp", every(minute, 10, 6), np.arange(6.0) + 10)
    [(family, ts, mean_q, max_q, min_q, level_n, _, _)] = _band_rows("c1", "gpu.temp")
    assert family == "gpu" and ts.replace(tzinfo=minute.tzinfo) == minute
    assert level_n == 2  # one value per series and minute
    assert sorted([mean_q[0], mean_q[2]]) == pytest.approx([2.5, 12.5])
    assert sorted([max_q[0], max_q[2]]) == pytest.approx([5.0, 15.0])
    assert sorted([min_q[0], min_q[2]]) == pytest.approx([0.0, 10.0])


def test_counter_rates_are_within_the_minute_from_max_minus_min(clean_store):
    start = T0 - timedelta(minutes=30)
    ts = every(start, 10, 18)  # three minutes, six samples each
    # +4 per 10 s in minute 0; in minute 1 a reset (124 -> 2); minute 2 +8 per 10 s, starting below minute 1's max.
    values = [100 + 4 * i for i in range(6)] + [120, 124, 2, 6, 10, 14] + [20 + 8 * i for i in range(6)]
    write_samples("c1", "a", "gpu0", "gpu.pcie.replay", ts, values)
    # One sample alone in a minute has no rate.
    write_samples("c1", "b", "gpu0", "gpu.pcie.replay", [start + timedelta(seconds=5)], [7.0])
    rows = _band_rows("c1", "gpu.pcie.replay")
    assert [r[1].replace(tzinfo=start.tzinfo) for r in rows] == every(start, 60, 3)
    rates = {r[1].replace(tzinfo=start.tzinfo): (r[6], r[7]) for r in rows}
    assert rates[start][1] == 1 and rates[start][0][1] == pytest.approx(0.4)  # (120-100)/50 s
    # The rollup keeps no first/last values: a reset inside a minute gives (max - min) / (t_last - t_first),
    # here (124-2)/50 s, one off value among the fleet's series-minutes (the documented cost of the cheap view).
    assert rates[start + timedelta(minutes=1)][1] == 1
    assert rates[start + timedelta(minutes=1)][0][1] == pytest.approx(122 / 50)
    assert rates[start + timedelta(minutes=2)][1] == 1 and rates[start + timedelta(minutes=2)][0][1] == pytest.approx(0.8)
    assert [r[5] for r in rows] == [2, 1, 1]  # level values still count every series-minute


@pytest.mark.parametrize("component", ["gpu3", "nvswitch1", "mlx5_0/1", "psu0", "fan2", ""])
def test_the_family_in_band_1m_is_component_family(clean_store, component):
    write_samples("c1", "a", component, "gpu.temp", every(T0 - timedelta(minutes=5), 10, 6), np.arange(6.0))
    [row] = _band_rows("c1", "gpu.temp")
    assert row[0] == overlay.component_family(component)
    [(sql_family,)] = store.query_rows(f"SELECT {overlay.FAMILY_SQL} FROM (SELECT {{c:String}} AS component)",
                                       {"c": component}, tag="test")
    assert sql_family == overlay.component_family(component)
    assert overlay.component_family("mlx5_0/1") == "mlx_/" and overlay.component_family("gpu3") == "gpu"


def _fleet(rng, minutes_back: int, hosts: int = 4, gpus: int = 8, metric: str = "gpu.temp"):
    """Per-series samples for the last `minutes_back` minutes before T0; returns {(host, gpu): values}."""
    ts = every(T0 - timedelta(minutes=minutes_back), 10, minutes_back * 6)
    values = {}
    for h in range(hosts):
        for g in range(gpus):
            vals = 60 + 3 * h + rng.normal(0, 2, len(ts))
            values[(h, g)] = vals
            write_samples("c1", f"p{h}", f"gpu{g}", metric, ts, vals)
    return values


# t-digest quantiles against numpy's on the same ~100 values: within this share of the p5-p95 spread.
TDIGEST_TOLERANCE = 0.1


@pytest.mark.slow
def test_fleet_band_on_the_rollup_matches_numpy_within_the_tdigest_tolerance(clean_store):
    rng = np.random.default_rng(11)
    values = _fleet(rng, 30)
    write_samples("c1", "bad", "gpu2", "gpu.temp", every(T0 - timedelta(minutes=30), 10, 180), np.full(180, 95.0))
    q = OverlayQuery("c1", T0, -12 * 3600, 0, [SignalSpec("gpu.temp", "bad", "gpu2"), SignalSpec("gpu.temp", "bad", "gpu5")],
                     max_points=600)
    res = overlay.run_overlay(q, allowed_hosts={"bad"})
    assert res.source == "samples_1m" and res.bucket_s == 120 and res.band_source == "fleet"
    band = res.series[0].band
    assert band is res.series[1].band  # one band per metric and family, shared by the signals on it
    # gpu.temp is bad=up: each series counts its minute max; the fleet includes the affected host.
    minute_max = {k: v.reshape(-1, 6).max(axis=1) for k, v in values.items()}
    minute_max["bad"] = np.full(30, 95.0)
    stacked = np.stack(list(minute_max.values()))  # (33 series, 30 minutes)
    assert len(band.x) == 15
    for i in range(15):
        col = stacked[:, 2 * i: 2 * i + 2].ravel()
        expected = np.percentile(col, [5, 50, 95])
        assert band.n[i] == len(col) == 66
        assert band.x[i] == pytest.approx(-1800 + 120 * i + 60)
        tol = TDIGEST_TOLERANCE * (expected[2] - expected[0])
        np.testing.assert_allclose([band.p5[i], band.median[i], band.p95[i]], expected, atol=tol)


@pytest.mark.slow
def test_explicit_peers_band_on_the_rollup_uses_only_the_peers(clean_store):
    rng = np.random.default_rng(5)
    values = _fleet(rng, 30)
    q = OverlayQuery("c1", T0, -12 * 3600, 0, [SignalSpec("gpu.temp", "p0", "gpu0")], peers=["p1", "p2"],
                     max_points=600, band="peers")
    res = overlay.run_overlay(q, allowed_hosts={"p0", "p1", "p2"})
    assert res.band_source == "peers"
    band = res.series[0].band
    # The peers band counts every peer rollup row (16 series x 2 minutes per 120 s bucket); p3 is not a peer.
    assert list(band.n) == [32] * 15
    peer_max = np.stack([v.reshape(-1, 6).max(axis=1) for (h, _), v in values.items() if h in (1, 2)])
    np.testing.assert_allclose(band.median[0], np.percentile(peer_max[:, 0:2].ravel(), 50))
    fleet = overlay.run_overlay(
        OverlayQuery("c1", T0, -12 * 3600, 0, [SignalSpec("gpu.temp", "p0", "gpu0")], peers=["p1", "p2"], max_points=600),
        allowed_hosts={"p0", "p1", "p2"})
    assert fleet.band_source == "fleet" and list(fleet.series[0].band.n) == [64] * 15  # all 4 hosts x 8 GPUs


@pytest.mark.slow
def test_counters_without_fleet_rates_fall_back_to_the_peers_band(clean_store):
    # One sample per insert: no series has two samples of a minute in one block, so band_1m has no rate.
    start = T0 - timedelta(minutes=20)
    for i in range(120):
        for h in ("p1", "p2"):
            write_samples("c1", h, "gpu0", "gpu.pcie.replay", [start + timedelta(seconds=10 * i)], [float(3 * i)])
    # The peers band on the rollup reads rollup rows as stored; merged parts give one row per minute.
    store.command("OPTIMIZE TABLE samples_1m FINAL")
    q = OverlayQuery("c1", T0, -12 * 3600, 0, [SignalSpec("gpu.pcie.replay", "p1", "gpu0")], peers=["p2"], max_points=600)
    res = overlay.run_overlay(q, allowed_hosts={"p1", "p2"})
    assert res.band_source == "peers"
    band = res.series[0].band
    assert band is not None and len(band.x) == 10 and np.allclose(band.median, 0.3)  # +3 per 10 s


@pytest.mark.slow
def test_fleet_band_can_be_asked_for_on_a_raw_window(clean_store):
    _fleet(np.random.default_rng(2), 10, hosts=2)
    q = OverlayQuery("c1", T0, -600, 0, [SignalSpec("gpu.temp", "p0", "gpu0")], max_points=60, band="fleet")
    res = overlay.run_overlay(q, allowed_hosts={"p0"})
    assert res.source == "samples" and res.band_source == "fleet"
    band = res.series[0].band
    assert len(band.x) == 10 and list(band.n) == [16] * 10  # one-minute buckets at best
    assert overlay.run_overlay(OverlayQuery("c1", T0, -600, 0, [SignalSpec("gpu.temp", "p0", "gpu0")], max_points=60),
                               allowed_hosts={"p0"}).band_source == ""  # raw window, no peers: no band


def test_band_mode_is_validated():
    with pytest.raises(InvalidSignal, match="band 'nearby'"):
        overlay.validate(OverlayQuery("c1", T0, -60, 0, [SignalSpec("gpu.temp", "n1", "gpu0")], band="nearby"),
                         allowed_hosts=None)


def test_rectangles_cover_exactly_the_signals():
    keys = {("m1", "h1", "gpu0"), ("m1", "h1", "gpu1"), ("m2", "h1", "gpu0"), ("m2", "h1", "gpu1"),  # one product
            ("m3", "h1", "gpu0"), ("m3", "h2", "gpu5"),  # not a product: split by host
            ("m4", "h2", "gpu5")}
    rects = overlay._rectangles(sorted(keys))
    covered = [(m, h, c) for ms, hs, cs in rects for m in ms for h in hs for c in cs]
    assert sorted(covered) == sorted(keys)  # exact, and no key twice
    assert (["m1", "m2"], ["h1"], ["gpu0", "gpu1"]) in rects
    assert len(rects) <= 4


@pytest.mark.slow
@pytest.mark.parametrize("hours", [2, 24])  # the raw table and the rollup
def test_only_the_asked_series_come_back(clean_store, hours):
    ts = every(T0 - timedelta(hours=hours), 30, hours * 120)
    for host in ("n1", "n2"):
        for g in range(3):
            for metric in ("gpu.temp", "gpu.power", "gpu.pcie.replay"):
                base = 10_000.0 * g + (100_000 if host == "n2" else 0)
                write_samples("c1", host, f"gpu{g}", metric, ts, base + np.arange(len(ts)) * (g + 1))
    # Not a product of metrics x hosts x components.
    signals = [SignalSpec("gpu.temp", "n1", "gpu0"), SignalSpec("gpu.power", "n2", "gpu2"),
               SignalSpec("gpu.pcie.replay", "n1", "gpu1"), SignalSpec("gpu.pcie.replay", "n2", "gpu0")]
    q = OverlayQuery("c1", T0, -hours * 3600, 0, signals, max_points=600)
    res = overlay.run_overlay(q, allowed_hosts={"n1", "n2"})
    assert res.source == ("samples" if hours == 2 else "samples_1m")
    assert [s.signal for s in res.series] == signals
    for s in res.series:
        assert len(s.x) > 10
    temp, power, replay1, replay0 = res.series
    assert temp.y.min() >= 0 and temp.y.max() < 10_000  # n1 gpu0 only
    assert power.y.min() >= 120_000  # n2 gpu2 only
    # Counters: +2 per 30 s on gpu1 and +1 per 30 s on gpu0, as per-second rates.
    np.testing.assert_allclose(replay1.y, 2 / 30)
    np.testing.assert_allclose(replay0.y, 1 / 30)


def test_a_t0_with_milliseconds_keeps_x_exact(clean_store):
    ts = every(T0 - timedelta(minutes=10), 10, 60)
    write_samples("c1", "n1", "gpu0", "gpu.temp", ts, np.arange(60.0))
    t0 = T0 + timedelta(milliseconds=250)
    res = overlay.run_overlay(OverlayQuery("c1", t0, -300, 0, [SignalSpec("gpu.temp", "n1", "gpu0")]),
                              allowed_hosts={"n1"})
    s = res.series[0]
    # The window starts at T0 - 299.75 s: its first sample is T0 - 290 s, at x = -290.25.
    assert s.x[0] == pytest.approx(-290.25)
    assert s.x[-1] == pytest.approx(-10.25)  # the last sample, T0 - 10 s
