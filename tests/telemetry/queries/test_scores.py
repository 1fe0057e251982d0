"""Self-normalised scores on a fleet whose truth we wrote: heavy-tailed health. Three healthy GPUs
trickle corrected DRAM errors all week (tens an hour) and never fail; four NODE_FAILs are each
preceded, on one quiet GPU of the failing host, by a few corrected errors a minute for three
hours — fewer than a noisy part logs. And every failing host has a GPU whose PCIe replays were
high all week long, the same before its failure as at any other time. Measured by the highest raw
value in a window, the noisy parts drown the precursor and the always-noisy hosts look guilty;
measured against each part's own past, the precursor is the finding and the noisy parts are not."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import scores, signal_scan, windows

from . import BASE, every, write_rows, write_samples
from .test_fleet_test import _job

pytestmark = pytest.mark.slow

CLUSTER = "heavytail"
STEP = 120
N = 5 * 86400 // STEP
HOSTS = [f"t{i:02d}" for i in range(10)]
GPUS = 4
FAILURES = {"t01": 3 * 24 + 5, "t04": 3 * 24 + 17, "t06": 4 * 24 + 3, "t08": 4 * 24 + 15}  # hours after BASE
NOISY_SBE = {("t02", 1), ("t05", 3), ("t09", 0)}  # healthy parts, noisy all week
RAMP = 3 * 3600 // STEP


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    rng = np.random.default_rng(5)
    ts = every(BASE, STEP, N)
    jobs, alloc = [], []
    for host in HOSTS:
        for g in range(GPUS):
            sbe = rng.poisson(0.01, N).astype(float)
            if (host, g) in NOISY_SBE:
                sbe += rng.poisson(40.0, N)  # ~1,200 an hour, every hour of the week
            replay = rng.poisson(0.02, N).astype(float)
            if host in FAILURES and g == 3:
                replay += rng.poisson(30.0, N)  # the failing hosts' gpu3: always noisy, before and after
            if host in FAILURES and g == 1:
                t0 = FAILURES[host] * 3600 // STEP
                sbe[t0 - RAMP:t0] += rng.poisson(6.0, RAMP)  # the precursor: ~3 a minute for 3 h
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.ecc.dram_sbe_volatile", ts, np.cumsum(sbe))
            write_samples(CLUSTER, host, f"gpu{g}", "gpu.pcie.replay", ts, np.cumsum(replay))
    for k, (host, hours) in enumerate(sorted(FAILURES.items())):
        j, a = _job(str(500 + k), host, BASE + timedelta(hours=hours), cluster=CLUSTER)
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j), alloc.append(a)
    for k, host in enumerate(HOSTS):  # every host busy the rest of the time
        after = BASE + timedelta(hours=FAILURES.get(host, -1) + 1) if host in FAILURES else BASE
        j, a = _job(str(800 + k), host, BASE + timedelta(days=5), "COMPLETED", cluster=CLUSTER)
        j["start_ts"] = a["start_ts"] = after
        jobs.append(j), alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    return CLUSTER


def test_parts_noisy_for_weeks_are_no_precursor_and_the_new_rise_is(fleet):
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 3 * 3600, clusters=[fleet])
    rows = {row["metric"]: row for row in r["rows"]}
    cause, noisy = rows["gpu.ecc.dram_sbe_volatile"], rows["gpu.pcie.replay"]
    assert r["outcome_interruptions"] == 4 and r["rows"][0]["metric"] == "gpu.ecc.dram_sbe_volatile"
    assert cause["auc"] > 0.9 and cause["q"] < 0.01
    # a noisy healthy part logs more errors in any window than the failing GPU did before failing:
    # by raw value the precursor would not stand out (the medians are the same units' raw rates)
    assert cause["median_before"] < 40 / STEP
    # the failing hosts' always-noisy gpu3: as noisy before the failure as all week -> no finding
    assert noisy["q"] >= 0.05 and abs(noisy["median_score_before"]) < 1


def test_a_units_score_is_its_departure_from_its_own_past(fleet):
    """The score itself, on windows we choose: the noisy healthy part scores about 0 in any window;
    the precursor's GPU scores high in the three hours before its failure and about 0 a day before."""
    t0 = int((BASE + timedelta(hours=FAILURES["t01"])).timestamp())
    W = 3 * 3600
    spans = [windows.Window("before", 0, ("t01",), t0 - W, t0), windows.Window("same_hosts", 0, ("t01",),
                                                                              t0 - W - 86400, t0 - 86400),
             windows.Window("peers", 0, ("t02",), t0 - W, t0)]
    got = scores.window_scores(fleet, spans, ["gpu.ecc.dram_sbe_volatile"])
    m = "gpu.ecc.dram_sbe_volatile"
    sc, raw, rule = got.score[m], got.level[m], got.rule[m]
    assert sc[0][("t01", "gpu1")] > 4 and abs(sc[1][("t01", "gpu1")]) < 1.5
    assert abs(sc[2][("t02", "gpu1")]) < 0.3  # ~1,200 errors an hour, as every hour before
    assert raw[2][("t02", "gpu1")] > 5 * raw[0][("t01", "gpu1")]  # far more errors than the precursor
    # what a rule reads: the highest minute rate (~6 errors per 2-min step at its worst, and more)
    assert rule[0][("t01", "gpu1")] > 1.5 * raw[0][("t01", "gpu1")] and rule[1][("t01", "gpu1")] < 0.05


def test_many_hosts_or_a_fine_grid_are_read_in_host_slices_with_the_same_scores(fleet, monkeypatch):
    """The engine refuses an array parameter of more than a million entries: a 96-host, 14-day
    scan's look-up arrays (hosts x cells) reached 2,071,392 and the scan died with
    TOO_LARGE_ARRAY_SIZE. Past ``MAX_LOOKUP`` the hosts are read in slices, each with its own
    grid, and every score is the same as in one query."""
    W = 3 * 3600
    t0s = {h: int((BASE + timedelta(hours=hrs)).timestamp()) for h, hrs in FAILURES.items()}
    spans = [windows.Window("before", i, (h,), t - W, t) for i, (h, t) in enumerate(sorted(t0s.items()))]
    spans += [windows.Window("peers", i, (p,), t - W, t) for i, t in enumerate(sorted(t0s.values()))
              for p in HOSTS if p not in t0s]
    metric = "gpu.ecc.dram_sbe_volatile"
    whole = scores.window_scores(fleet, spans, [metric])
    bounds = sorted({(h, b) for w in spans for h in w.hosts for b in (w.start - 60, w.start, w.end)})
    hosts = sorted({h for w in spans for h in w.hosts})
    n_cells = scores._grid(bounds, hosts, min(b for _, b in bounds) - 60, max(w.end for w in spans))["n_cells"]
    monkeypatch.setattr(scores, "MAX_LOOKUP", 2 * n_cells)  # two hosts a slice
    assert len(scores._host_slices(bounds, hosts, min(b for _, b in bounds) - 60, max(w.end for w in spans))) > 1
    sliced = scores.window_scores(fleet, spans, [metric])
    assert sliced.score[metric] == whole.score[metric] and sliced.level[metric] == whole.level[metric]
    assert sum(len(v) for v in whole.score[metric].values()) >= len(spans)
    # one host whose cells alone exceed the bound: refused with what to do, not the engine's error
    monkeypatch.setattr(scores, "MAX_LOOKUP", 1)
    with pytest.raises(ValueError, match="scan a shorter range"):
        scores.window_scores(fleet, spans, [metric])
