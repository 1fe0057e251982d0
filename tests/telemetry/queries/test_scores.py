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


def test_queries_of_bounded_size_give_the_same_scores_to_the_last_bit(fleet, monkeypatch):
    """The scores are read in queries of at most about ``ROWS_PER_QUERY`` rollup rows (a batch of
    metrics on a slice of hosts), so memory does not grow with the fleet: a 96-host, 14-day scan
    held 11 GB when every metric's scores came from all hosts at once. However the fleet is cut —
    one metric on two hosts a query, or everything in one — every score, level and rule value is
    the same, in the same order (ties between units are broken by it)."""
    W = 3 * 3600
    t0s = {h: int((BASE + timedelta(hours=hrs)).timestamp()) for h, hrs in FAILURES.items()}
    spans = [windows.Window("before", i, (h,), t - W, t) for i, (h, t) in enumerate(sorted(t0s.items()))]
    spans += [windows.Window("peers", i, (p,), t - W, t) for i, t in enumerate(sorted(t0s.values()))
              for p in HOSTS if p not in t0s]
    spans += [windows.Window("same_hosts", i, (h,), t - W - k * W, t - k * W) for i, (h, t) in enumerate(sorted(t0s.items()))
              for k in (2, 5, 9)]
    metrics = ["gpu.ecc.dram_sbe_volatile", "gpu.pcie.replay"]
    whole = scores.window_scores(fleet, spans, metrics, host_t0s={h: np.array([t]) for h, t in t0s.items()})
    queries = []
    real = scores.store.query_arrow

    def counted(sql, params, **kw):
        if kw.get("tag") == "scores:window_scores":
            queries.append((tuple(params["metrics"]), tuple(params["hosts"])))
        return real(sql, params, **kw)

    monkeypatch.setattr(scores.store, "query_arrow", counted)
    hosts = sorted({h for w in spans for h in w.hosts})
    rows = scores._row_counts(fleet, metrics, hosts, int(BASE.timestamp()), max(w.end for w in spans), timeout_s=60)
    monkeypatch.setattr(scores, "ROWS_PER_QUERY", max(rows.values()))  # a host a query ...
    monkeypatch.setattr(scores, "METRICS_PER_QUERY", 1)  # ... and a metric
    sliced = scores.window_scores(fleet, spans, metrics, host_t0s={h: np.array([t]) for h, t in t0s.items()})
    assert sorted(queries) == sorted(((m,), (h,)) for m in metrics for h in hosts)
    for m in metrics:
        for got, want in ((sliced.score[m], whole.score[m]), (sliced.level[m], whole.level[m]),
                          (sliced.rule[m], whole.rule[m])):
            assert list(got) == list(want)
            assert all(list(got[w].items()) == list(want[w].items()) for w in want)
    assert sum(len(v) for v in whole.score[metrics[0]].values()) >= len(spans)
    # the windows' values, as _reduce finds them all at once, are each unit's own computation
    # (``_statistic`` on the unit's segments alone, as a unit at a time would do it)
    m = metrics[0]
    for wi, w in enumerate(spans[:8]):
        for (h, u), v in whole.score[m][wi].items():
            assert v == _one_unit_score(fleet, spans, wi, h, u, m, t0s)


def _one_unit_score(cluster, spans, wi, host, unit, metric, t0s):
    """The unit's score in window ``wi`` from its own segments: against each of its pasts
    (``scores._pasts``), the worse of them (``scores._worse_of``)."""
    W = spans[0].end - spans[0].start
    B = scores.baseline_for(W)
    t0 = np.array([t0s[host]]) if host in t0s else None
    wins = {i: [(int(a[0]), int(b[0])) for a, b in scores._pasts(np.array([w.start]), W, B, t0)]
            for i, w in enumerate(spans) if host in w.hosts}
    bounds = sorted({x for i, pasts in wins.items() for x in (spans[i].start, spans[i].end - 59)
                     + tuple(y for a, b in pasts if a < b for y in (a, b - 59))})
    lo = bounds[0] - 60
    table = scores.store.query_arrow(scores._UNITS["mixed"], {
        "cluster": cluster, "metrics": [metric], "counters": [metric], "hosts": [host], "lo_s": lo,
        "hi_s": max(w.end for w in spans), **scores.bounds_params([1] * len(bounds), bounds, [2] * len(bounds))},
        tag="test")
    d = table.to_pydict()
    keep = [k for k, u in enumerate(d["unit"]) if u == unit]
    segs = np.array([d["seg"][k] for k in keep])
    col = lambda name: np.array([d[name][k] for k in keep], dtype=float)  # noqa: E731
    s, e = spans[wi].start, spans[wi].end
    i0, i1 = (np.searchsorted(segs, [x], "left") for x in (s, e - 59))
    args = (True, col("u_n"), col("u_nv"), col("u_sv"), col("u_sv2"), col("u_inc"), i0, i1)
    got = [scores._statistic(*args, *(np.searchsorted(segs, [x], "left") for x in (a, b - 59 if a < b else a)))
           for a, b in wins[wi]]
    sc, nb = np.array([g[0] for g in got]), np.array([g[3] for g in got])
    score, ok = scores._worse_of(1.0, False, sc, scores._scored(sc, got[0][2], nb) & (nb > 0))
    assert ok[0]
    return float(score[0])


def test_only_the_windows_and_their_baselines_are_read_with_the_same_values(fleet, monkeypatch):
    """Rows of a host's time that no window or baseline covers are not summed (``scores._bounds``:
    a boundary with keep 0 where such a stretch begins, one with keep 1 ``GAP_MARGIN_S`` before
    the next baseline, whose counter step comes from the row before it): every score, level and
    rule value is the one a read of every row gives (the engine's float sums to their last bits).
    (The earlier past shortened to 6 h: at its 3 days every host's windows here form one stretch.)"""
    monkeypatch.setattr(scores, "EARLIER_BASELINE_S", 6 * 3600)
    W = 3 * 3600
    t0s = {h: int((BASE + timedelta(hours=hrs)).timestamp()) for h, hrs in FAILURES.items()}
    host_t0s = {h: np.array([t]) for h, t in t0s.items()}
    spans = [windows.Window("before", i, (h,), t - W, t) for i, (h, t) in enumerate(sorted(t0s.items()))]
    # the same hosts 6 h and 60 h earlier: two stretches a host, a day and more apart
    spans += [windows.Window("same_hosts", i, (h,), t - W - k * W, t - k * W) for i, (h, t) in enumerate(sorted(t0s.items()))
              for k in (2, 20)]
    spans += [windows.Window("peers", 0, ("t02",), t0s["t01"] - W, t0s["t01"])]
    metrics = ["gpu.ecc.dram_sbe_volatile", "gpu.pcie.replay"]
    B = scores.baseline_for(W)
    by_host: dict[str, list] = {}
    for i, w in enumerate(spans):
        for h in w.hosts:
            pasts = scores._pasts(np.array([w.start]), W, B, host_t0s.get(h))
            by_host.setdefault(h, []).append((i, *(int(x[0]) for past in pasts for x in past)))
    marks = scores._bounds(by_host, spans)
    # two stretches on each failing host (a day and a half unread between them), one on the peer:
    # each ends in a keep-0 boundary, the second of a failing host starts with the margin's
    assert sum(1 for _, _, keep in marks if not keep) == 2 * 4 + 1
    cuts = _cuts(by_host, spans)
    assert sum(1 for h, b, keep in marks if keep and (h, b) not in cuts) == 4
    # minute rates (keep 2) only inside the windows: a segment at s of each
    starts = {(h, int(w.start)) for w in spans for h in w.hosts}
    assert {(h, b) for h, b, keep in marks if keep == 2} >= starts
    assert not any(keep == 2 and (h, b + 59) in starts for h, b, keep in marks)  # not the minute before
    pruned = scores.window_scores(fleet, spans, metrics, host_t0s=host_t0s)

    def every_row(by_host, spans):  # the boundaries alone, every segment read
        return sorted((h, b, 2) for h, b in _cuts(by_host, spans))

    monkeypatch.setattr(scores, "_bounds", every_row)
    whole = scores.window_scores(fleet, spans, metrics, host_t0s=host_t0s)
    assert_same_values(pruned, whole, metrics, len(spans))


def _cuts(by_host, spans):
    """Every window's s and e − 59 and each of its pasts' start and end − 59, per host."""
    return {(h, int(b)) for h, wins in by_host.items() for i, *ab in wins
            for b in (spans[i].start, spans[i].end - 59)
            + tuple(x for a, e in zip(ab[0::2], ab[1::2]) if a < e for x in (a, e - 59))}


def _some_windows():
    W = 3 * 3600
    t0s = {h: int((BASE + timedelta(hours=hrs)).timestamp()) for h, hrs in FAILURES.items()}
    spans = [windows.Window("before", i, (h,), t - W, t) for i, (h, t) in enumerate(sorted(t0s.items()))]
    spans += [windows.Window("peers", i, (p,), t - W, t) for i, t in enumerate(sorted(t0s.values()))
              for p in HOSTS if p not in t0s]
    return spans, {h: np.array([t]) for h, t in t0s.items()}


def test_the_next_query_is_read_while_the_caller_works_on_the_last(fleet, monkeypatch):
    """``iter_window_scores`` reads the next batch's rows on its reader thread while the caller
    works on the metrics it was handed (the engine lets go of the GIL: the two cores overlap: about 12 %
    off a scan of the 48-host bench fleet). The caller gets the same values in the same order,
    and the read runs while the caller still holds the first metric."""
    import threading

    spans, host_t0s = _some_windows()
    metrics = ["gpu.ecc.dram_sbe_volatile", "gpu.pcie.replay"]
    whole = scores.window_scores(fleet, spans, metrics, host_t0s=host_t0s)  # one batch: both metrics
    monkeypatch.setattr(scores, "METRICS_PER_QUERY", 1)
    started: dict[str, threading.Event] = {m: threading.Event() for m in metrics}
    threads: list[str] = []
    real = scores.store.query_arrow

    def watched(sql, params, **kw):
        if kw.get("tag") == "scores:window_scores":
            threads.append(threading.current_thread().name)
            started[params["metrics"][0]].set()
        return real(sql, params, **kw)

    monkeypatch.setattr(scores.store, "query_arrow", watched)
    got = []
    for metric, score, level, rule in scores.iter_window_scores(fleet, spans, metrics, host_t0s=host_t0s):
        if metric == metrics[0]:
            # the caller has not asked for the second metric yet: its read has begun all the same
            assert started[metrics[1]].wait(30), "the next batch was not read ahead"
        got.append((metric, score, level, rule))
    assert [g[0] for g in got] == metrics
    assert threads and all(t.startswith("scores-read") for t in threads)
    for metric, score, level, rule in got:
        assert score == whole.score[metric] and level == whole.level[metric] and rule == whole.rule[metric]


def test_a_failed_read_raises_to_the_caller_and_nothing_is_left_reading(fleet, monkeypatch):
    """A query that fails on the reader thread raises where the caller takes its batch, with the
    engine's own error; a caller that stops early leaves no read running behind it."""
    spans, host_t0s = _some_windows()
    metrics = ["gpu.ecc.dram_sbe_volatile", "gpu.pcie.replay"]
    monkeypatch.setattr(scores, "METRICS_PER_QUERY", 1)
    real = scores.store.query_arrow
    reads = []

    def failing(sql, params, **kw):
        if kw.get("tag") == "scores:window_scores":
            reads.append(params["metrics"][0])
            if params["metrics"][0] == metrics[1]:
                raise RuntimeError("engine refused the second batch")
        return real(sql, params, **kw)

    monkeypatch.setattr(scores.store, "query_arrow", failing)
    it = scores.iter_window_scores(fleet, spans, metrics, host_t0s=host_t0s)
    assert next(it)[0] == metrics[0]
    with pytest.raises(RuntimeError, match="refused the second batch"):
        next(it)
    assert reads == metrics

    # stopping after the first metric: the read ahead of the second ends before close() returns
    reads.clear()
    monkeypatch.setattr(scores.store, "query_arrow", real)
    it = scores.iter_window_scores(fleet, spans, metrics, host_t0s=host_t0s)
    assert next(it)[0] == metrics[0]
    it.close()
    assert scores._reader_pool().submit(lambda: "idle").result(timeout=30) == "idle"


def test_read_ahead_keeps_the_order_and_reads_one_item_ahead():
    """``_Ahead`` alone: results in the items' order; one read in flight before the first take,
    and taking one starts the next read, never more (at most two results held)."""
    import threading

    gate = threading.Event()
    pulled = []

    def items():
        for k in range(4):
            pulled.append(k)
            yield k, k

    def read(x):
        gate.wait(10)
        return x * 10

    ahead = scores._Ahead(items(), read)
    assert pulled == [0] and ahead.next_batch() == 0
    gate.set()
    assert ahead.take() == 0 and pulled == [0, 1]
    assert [ahead.take() for _ in range(3)] == [10, 20, 30]
    assert ahead.next_batch() is None and pulled == [0, 1, 2, 3]
    ahead.close()


KINDS_CLUSTER = "kinds"


def assert_same_values(got: scores.Scores, want: scores.Scores, metrics, n_windows: int) -> None:
    """The same windows and parts in the same order, and the same values (the engine's float sums
    may differ in the last bits from query to query)."""
    for m in metrics:
        for a, b in ((got.score[m], want.score[m]), (got.level[m], want.level[m]), (got.rule[m], want.rule[m])):
            assert list(a) == list(b) and len(b) == n_windows
            for w in b:
                assert list(a[w]) == list(b[w])
                assert np.allclose(list(a[w].values()), list(b[w].values()), rtol=1e-12, atol=0), (m, w)


def test_counter_and_gauge_queries_read_what_the_full_query_reads(telemetry_store, monkeypatch):
    """A batch of counters or of gauges only is read by a query that sums only what its kind is
    scored on (``scores._segments_sql``). Every score, level and rule value — of a gauge, of a
    counter across a reset — is the one the full query (every sum, every metric) gives."""
    rng = np.random.default_rng(11)
    n = 2 * 86400 // 300
    ts = every(BASE, 300, n)
    for host in ("k0", "k1"):
        for g in range(2):
            temp = 60 + np.cumsum(rng.normal(0, 0.3, n)) + rng.standard_t(3, n)
            replay = np.cumsum(rng.poisson(0.5, n)).astype(float)
            replay[n // 2:] -= replay[n // 2]  # a reboot: the counter starts again from 0
            write_samples(KINDS_CLUSTER, host, f"gpu{g}", "gpu.temp", ts, temp)
            write_samples(KINDS_CLUSTER, host, f"gpu{g}", "gpu.pcie.replay", ts, replay)
    W = 2 * 3600
    t0 = int((BASE + timedelta(hours=40)).timestamp())
    spans = [windows.Window("before", 0, ("k0",), t0 - W, t0)]
    spans += [windows.Window("same_hosts", 0, (h,), t0 - k * W - W, t0 - k * W) for h in ("k0", "k1") for k in (1, 3, 7)]
    metrics = ["gpu.temp", "gpu.pcie.replay"]
    split = scores.window_scores(KINDS_CLUSTER, spans, metrics)
    queries = []
    real = scores.store.query_arrow

    def full(sql, params, **kw):  # every query as the full one
        queries.append(sql)
        return real(scores._UNITS["mixed"] if sql in scores._UNITS.values() else sql, params, **kw)

    monkeypatch.setattr(scores.store, "query_arrow", full)
    whole = scores.window_scores(KINDS_CLUSTER, spans, metrics)
    assert sum(q in scores._UNITS.values() for q in queries) == 2  # one batch a kind
    assert_same_values(split, whole, metrics, len(spans))
    assert any(v > 0 for w in split.rule["gpu.pcie.replay"].values() for v in w.values())
    # the rule a rise fires on reads the same: the rolling query per kind
    fired = 0
    for m in metrics:
        lo, hi = int(BASE.timestamp()), int((BASE + timedelta(days=2)).timestamp())
        monkeypatch.undo()
        a = scores.rolling_fires(KINDS_CLUSTER, m, W, ">", 1.0, lo, hi, ["k0", "k1"])
        monkeypatch.setattr(scores.store, "query_arrow", lambda sql, params, **kw: real(
            scores._UNIT_MINUTES["mixed"] if sql in scores._UNIT_MINUTES.values() else sql, params, **kw))
        b = scores.rolling_fires(KINDS_CLUSTER, m, W, ">", 1.0, lo, hi, ["k0", "k1"])
        assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
        fired += sum(len(v) for v in a.values())
    assert fired > 0
