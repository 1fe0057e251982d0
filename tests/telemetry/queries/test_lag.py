"""Lag analysis on series and events whose lag we wrote: it is recovered within one rollup step."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import lag

from . import BASE, event_row, every, write_rows, write_samples

CLUSTER = "lagged"
LAG_MIN = 17
N = 2 * 1440


@pytest.fixture(scope="module")
def lagged(telemetry_store):
    return write_lagged(CLUSTER)


def write_lagged(cluster: str, seed: int = 5) -> str:
    """Power in slow random bursts on gpu0 of four hosts, the temperature following it LAG_MIN
    minutes later, an unrelated inlet temperature, and link-downs 15 min before XID 79s
    (other modules write it under their own cluster name)."""
    rng = np.random.default_rng(seed)
    ts = every(BASE, 60, N)
    for i in range(4):
        host = f"l{i}"
        a = np.convolve(rng.normal(0, 1, N + LAG_MIN), np.ones(15) / 15, mode="same")
        write_samples(cluster, host, "gpu0", "gpu.temp", ts, 60 + 5 * a[:N])
        write_samples(cluster, host, "gpu0", "gpu.power", ts, 400 + 50 * a[LAG_MIN:] + rng.normal(0, 5, N))
        write_samples(cluster, host, "gpu1", "gpu.power", ts, 300 + rng.normal(0, 5, N))  # another GPU, unrelated
        write_samples(cluster, host, "", "cooling.inlet_temp", ts, 24 + rng.normal(0, 1, N))  # unrelated
    events = []
    for i, hours in enumerate((5, 11, 20, 29, 40)):
        t = BASE + timedelta(hours=hours)
        events.append(event_row(cluster, f"l{i % 4}", t, "link_down", 0, "mlx5_0", "error"))
        events.append(event_row(cluster, f"l{i % 4}", t + timedelta(minutes=15), "xid", 79, "gpu0", "critical"))
    events.append(event_row(cluster, "l1", BASE + timedelta(hours=45), "xid", 79, "gpu0", "critical"))  # alone
    write_rows("events", events)
    return cluster


def span():
    return int(BASE.timestamp()), int(BASE.timestamp()) + N * 60


def test_the_injected_lag_is_recovered_within_one_step(lagged):
    lo, hi = span()
    r = lag.series_lag(lagged, "gpu.temp", "gpu.power", lo_s=lo, hi_s=hi, step_s=60, max_lag_steps=60,
                       component_b="gpu0")
    # temp (A) at t follows power (B) at t - 17 min: B leads A, the peak at a negative lag
    assert abs(r.best_lag - (-LAG_MIN)) <= 1 and r.best_corr > 0.8 and r.hosts == 4
    assert r.lag_interval[0] <= r.best_lag <= r.lag_interval[1] and r.lag_interval[1] - r.lag_interval[0] <= 2
    # pooled with gpu1 (a flat, unrelated GPU) the mean still peaks there, but weaker
    pooled = lag.series_lag(lagged, "gpu.temp", "gpu.power", lo_s=lo, hi_s=hi, step_s=60, max_lag_steps=60)
    assert abs(pooled.best_lag - (-LAG_MIN)) <= 1
    assert r.verdict == "gpu.power on gpu0 leads gpu.temp by 17 min"
    coarse = lag.series_lag(lagged, "gpu.power", "gpu.temp", lo_s=lo, hi_s=hi, step_s=300, max_lag_steps=12)
    assert abs(coarse.best_lag * 300 - LAG_MIN * 60) <= 300 and coarse.best_lag > 0


def test_unrelated_series_stay_within_the_chance_band(lagged):
    lo, hi = span()
    r = lag.series_lag(lagged, "gpu.power", "cooling.inlet_temp", lo_s=lo, hi_s=hi, step_s=60, max_lag_steps=30)
    assert abs(r.best_corr) <= 3 * r.band and r.verdict.startswith(("no lead", "gpu.power", "cooling"))
    assert max(abs(c) for c in r.corr if c is not None) < 0.1


def test_lead_times_of_events_before_events(lagged):
    lo, hi = span()
    r = lag.event_lead_times(lagged, lag.EventSpec("link_down"), lag.EventSpec("xid", (79,)), lo_s=lo, hi_s=hi,
                             max_lag_s=3600, bins=12)
    assert (r["n_later"], r["n_preceded"]) == (6, 5)
    assert r["lead_times_s"] == [900.0] * 5 and r["counts"][3] == 5  # 15 min falls in the 15-20 min bin
    assert r["share_preceded"] == pytest.approx(5 / 6) and r["lift"] > 10
    assert r["median_lead_interval_s"] == [900.0, 900.0] and r["share_preceded_ci"][0] < 5 / 6 < r["share_preceded_ci"][1]
    only_l1 = lag.event_lead_times(lagged, lag.EventSpec("link_down"), lag.EventSpec("xid", (79,)), lo_s=lo, hi_s=hi,
                                   max_lag_s=3600, bins=12, hosts=["l1"])
    assert (only_l1["n_later"], only_l1["n_preceded"]) == (2, 1)  # l1: the pair at hour 11 and the lone XID


def test_what_lag_analysis_refuses(lagged):
    with pytest.raises(lag.LagError, match="not in the catalog"):
        lag.series_lag(lagged, "gpu.nope", "gpu.temp", lo_s=0, hi_s=10)
    with pytest.raises(lag.LagError, match="whole number of minutes"):
        lag.series_lag(lagged, "gpu.temp", "gpu.power", lo_s=0, hi_s=10, step_s=90)
