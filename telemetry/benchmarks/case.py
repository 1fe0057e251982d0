"""Case overlay: 32 signals over t0 ± 6 h with bands, on a store of at least 100 million samples.

Prints ``samples_in_store``, ``overlay_p50_ms``, ``overlay_p95_ms`` (the product
runner ``telemetry.queries.overlay.run_overlay`` end to end: validation, the
inventory check, the series / band / events queries and the assembly into numpy
arrays), ``raw_p95_ms`` and ``ratio_p95``. Targets on the reference machine:
overlay p95 <= 500 ms, ratio <= 1.5.

What "raw" measures: the same data straight from the engine, in the same run
and on the same case. Three hand-written SQL statements with literal values, no
parameters: the 32 affected series (the rollup minutes, counter rates,
``largestTriangleThreeBuckets``), the fleet bands of the 4 metrics from
``band_1m`` (the band definition the runner uses on a 12 h window), and the
events of the host. They run the way the runner runs its queries: at the same
time on three threads, each with its own client, and the time is until the last
result is in Python (the series points as two Float64 arrays read as Arrow, as the
runner reads them; bands and events as rows). No validation, inventory lookup or
assembly.

The store must hold >= 100 M samples. The benchmark brings its own data in a
dedicated cluster ``bench-case``: 256 hosts x 8 GPUs x 6 metrics at 10 s for
26 hours (~115 M rows), generated inside the engine (``INSERT ... SELECT FROM
numbers()``), with the inventory of those hosts. It is reused by later runs;
``--rebuild`` regenerates it, ``--no-keep`` deletes it after the run. Pending
telemetry migrations are applied first (0006 backfills ``band_1m`` from the
samples already stored).

Each repetition is a different case (t0 moves across the day, the failing
host and its 64 peers change) and the overlay and the raw SQL run back to
back on the same case. Whichever runs first warms the engine's caches for the
other, so the order alternates from one case to the next.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import numpy as np

from telemetry import catalog, migrate, store
from telemetry.queries.overlay import EVENT_KINDS, MAX_EVENTS, OverlayQuery, SignalSpec, choose_source, run_overlay

CLUSTER = "bench-case"
HOSTS = 256
GPUS = 8
STEP_S = 10
HOURS = 26
MIN_SAMPLES = 100_000_000
METRICS = ("gpu.temp", "gpu.mem_temp", "gpu.power", "gpu.util", "gpu.ecc.sbe_volatile", "gpu.pcie.replay")
SIGNAL_METRICS = ("gpu.temp", "gpu.power", "gpu.ecc.sbe_volatile", "gpu.pcie.replay")
WINDOW_S = 6 * 3600
PEERS = 64
MAX_POINTS = 600

# Per-metric value shapes over (h host, g gpu, i step, n row number). Deterministic:
# noise from a hash of the row number, counters monotone with an occasional driver-reload reset.
_NOISE = "((sipHash64(n) % 2000) / 1000.0 - 1.0)"
_SHAPES = {
    "gpu.temp": f"55 + 8 * sin(i / (360.0 * (1 + h % 5))) + g * 0.6 + {_NOISE}",
    "gpu.mem_temp": f"63 + 8 * sin(i / (360.0 * (1 + h % 5))) + g * 0.4 + {_NOISE}",
    "gpu.power": f"if(i % 180 < 6, 120, 640 + 40 * sin(i / 90.0)) + 10 * {_NOISE}",
    "gpu.util": f"if(i % 180 < 6, 0, 97 + 2 * {_NOISE})",
    "gpu.ecc.sbe_volatile": "intDiv(if(h % 37 = 0 AND i > 4000, i - 4000, i) * (1 + (h * 8 + g) % 3), 700)",
    "gpu.pcie.replay": "intDiv(if(h % 53 = 0 AND i > 6000, i - 6000, i) * (1 + g % 2), 2000)",
}


def add_arguments(parser) -> None:
    parser.add_argument("--repetitions", type=int, default=100, help="cases measured (>= 20; a p95 needs many)")
    parser.add_argument("--rebuild", action="store_true", help="regenerate the bench-case filler data")
    parser.add_argument("--keep", action=__import__("argparse").BooleanOptionalAction, default=True,
                        help="keep the filler data for later runs (default) or delete it afterwards")


def _count(sql: str, params: dict | None = None) -> int:
    return int(store.query_rows(sql, params or {}, tag="bench.case.count", timeout_s=600)[0][0])


def _span() -> tuple[datetime, datetime] | None:
    rows = store.query_rows(
        "SELECT min(ts), max(ts), count() FROM samples WHERE cluster = {c:String}",
        {"c": CLUSTER}, tag="bench.case.span", timeout_s=600,
    )
    lo, hi, n = rows[0]
    expected = HOSTS * GPUS * len(METRICS) * HOURS * 3600 // STEP_S
    if n < expected:
        return None
    return lo.replace(tzinfo=timezone.utc), hi.replace(tzinfo=timezone.utc)


def _drop() -> None:
    for table in ("samples", "samples_1m", "band_1m", "hosts", "components", "series_labels"):
        store.command(f"DELETE FROM {table} WHERE cluster = {{c:String}}", {"c": CLUSTER}, tag="bench.case.drop")


def _build(progress) -> None:
    _drop()
    base = (datetime.now(timezone.utc) - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    steps = HOURS * 3600 // STEP_S
    series = HOSTS * GPUS
    for k, metric in enumerate(METRICS):
        progress(f"bench case: generating {metric} ({series * steps:,} rows, {k + 1}/{len(METRICS)})")
        # Row n -> series s = n / steps (host-major, then gpu), step i: rows arrive in sort-key order.
        store.command(
            "INSERT INTO samples (ts, cluster, host, component, metric, value) "
            "SELECT {base:DateTime64(3, 'UTC')} + toIntervalSecond(i * {step:UInt32}), {c:String}, "
            "concat('bc-n', leftPad(toString(h), 4, '0')), concat('gpu', toString(g)), {m:String}, "
            f"toFloat64({_SHAPES[metric]}) "
            "FROM (SELECT number AS n, intDiv(n, {steps:UInt64}) AS s, intDiv(s, 8) AS h, s % 8 AS g, "
            "n % {steps:UInt64} AS i FROM numbers({rows:UInt64})) "
            "SETTINGS max_insert_block_size = 2000000, min_insert_block_size_rows = 1000000",
            {"base": base, "step": STEP_S, "c": CLUSTER, "m": metric, "steps": steps, "rows": series * steps},
            tag="bench.case.fill",
        )
    store.command(
        "INSERT INTO hosts SELECT {c:String}, concat('bc-n', leftPad(toString(number), 4, '0')), "
        "concat('r', toString(intDiv(number, 8))), concat('leaf-', toString(intDiv(number, 16))), "
        "concat('spine-', toString(number % 4)), 'H100-SXM5', '550.54.15', '96.00.89', now64(3) FROM numbers({n:UInt32})",
        {"c": CLUSTER, "n": HOSTS}, tag="bench.case.fill",
    )
    store.command(
        "INSERT INTO components SELECT {c:String}, concat('bc-n', leftPad(toString(intDiv(number, 8)), 4, '0')), "
        "concat('gpu', toString(number % 8)), 'gpu', 'H100-SXM5', toString(1650000000 + number), "
        "concat('GPU-', toString(generateUUIDv4())), '', '96.00.89', '', now64(3) FROM numbers({n:UInt32})",
        {"c": CLUSTER, "n": HOSTS * GPUS}, tag="bench.case.fill",
    )


def _host(i: int) -> str:
    return f"bc-n{i:04d}"


def _cases(lo: datetime, hi: datetime, n: int) -> list[OverlayQuery]:
    rng = np.random.default_rng(20261130)
    first, last = lo + timedelta(seconds=WINDOW_S + 600), hi - timedelta(seconds=WINDOW_S + 600)
    span = (last - first).total_seconds()
    out = []
    for k in range(n):
        t0 = first + timedelta(seconds=int(span * (k + 0.5) / n) + int(rng.integers(0, 600)))
        bad = int(rng.integers(0, HOSTS))
        peer_ids = rng.choice([h for h in range(HOSTS) if h != bad], size=PEERS, replace=False)
        signals = [SignalSpec(m, _host(bad), f"gpu{g}") for m in SIGNAL_METRICS for g in range(GPUS)]
        out.append(OverlayQuery(CLUSTER, t0, -WINDOW_S, WINDOW_S, signals, [_host(int(p)) for p in peer_ids], MAX_POINTS))
    return out


def _raw_sql(q: OverlayQuery) -> list[str]:
    """Hand-written SQL for the same series, bands and events (same source, definitions, downsampling)."""
    host = q.signals[0].host
    start = q.t0 + timedelta(seconds=q.start_offset_s)
    end = q.t0 + timedelta(seconds=q.end_offset_s)
    t0s, los, starts, his = (int(t.timestamp()) for t in (q.t0, start - timedelta(seconds=120), start, end))
    counters = "('gpu.ecc.sbe_volatile', 'gpu.pcie.replay')"
    metrics = "('" + "', '".join(SIGNAL_METRICS) + "')"
    bucket = int(choose_source(2 * WINDOW_S, MAX_POINTS)[1])  # the same bucket the runner uses

    minutes = (
        "SELECT metric, component, ts, "
        f"multiIf(metric IN {counters}, max(max), metric = 'gpu.power', sum(sum) / sum(count), max(max)) AS v "
        "FROM samples_1m "
        f"WHERE cluster = '{CLUSTER}' AND metric IN {metrics} AND host = '{host}' "
        f"AND ts >= toDateTime({los}) AND ts <= toDateTime({his}) GROUP BY metric, component, ts"
    )
    rated = (
        f"SELECT metric, component, toFloat64(toUnixTimestamp(ts) - {t0s}) AS x, "
        f"if(metric IN {counters}, if(pv < 0, nan, if(v >= pv, v - pv, v) / 60.0), v) AS y "
        f"FROM (SELECT *, lagInFrame(v, 1, -1.0) OVER (PARTITION BY metric, component ORDER BY ts "
        f"ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS pv FROM ({minutes}))"
    )
    series = (
        "SELECT metric, component, arrayMap(p -> p.1, pts) AS xs, arrayMap(p -> p.2, pts) AS ys FROM ("
        f"SELECT metric, component, largestTriangleThreeBuckets({MAX_POINTS})(x, y) AS pts FROM ({rated}) "
        f"WHERE x >= {q.start_offset_s} AND isFinite(y) GROUP BY metric, component)"
    )
    bands = " UNION ALL ".join(
        f"SELECT metric, intDiv(toUnixTimestamp(ts) - {starts}, {bucket}) AS b, "
        f"quantilesTDigestMerge(0.05, 0.5, 0.95)({state}) AS q "
        f"FROM band_1m WHERE cluster = '{CLUSTER}' AND metric IN {names} AND family = 'gpu' "
        f"AND ts >= toDateTime({starts}) AND ts <= toDateTime({his}) GROUP BY metric, b"
        for state, names in (("rate_q", counters), ("max_q", "('gpu.temp')"), ("mean_q", "('gpu.power')"))
    )
    kinds = "('" + "', '".join(EVENT_KINDS) + "')"
    events = (
        f"SELECT ts, host, component, kind, code, severity, message FROM events WHERE cluster = '{CLUSTER}' "
        f"AND host = '{host}' AND ts >= toDateTime64({starts}, 3) AND ts <= toDateTime64({his}, 3) "
        f"AND kind IN {kinds} ORDER BY ts LIMIT {MAX_EVENTS}"
    )
    return [series, bands, events]


def _raw_rows(sql: str):
    # The series points are fetched the way the runner fetches them (two Float64 arrays, Arrow),
    # the cheapest form; the small band and event results as rows, as the runner does.
    if sql.startswith("SELECT metric, component, arrayMap"):
        return store.get_client().query_arrow(sql)
    return store.get_client().query(sql).result_rows


def _case_hosts(q: OverlayQuery) -> set[str]:
    """What the case page passes: it knows the job's hosts and peers from the case, so the
    runner is not asked to look them up in the inventory."""
    return {s.host for s in q.signals} | set(q.peers)


def run(options: dict, progress) -> dict:
    reps = max(20, int(options.get("repetitions") or 100))
    cfg = store.config()
    migrate.migrate(store.get_client(), migrate.Target(cluster=cfg.cluster, ttl_days=cfg.ttl_days), log=progress)
    assert all(catalog.is_known(m) for m in METRICS)
    span = None if options.get("rebuild") else _span()
    if span is None:
        t = time.perf_counter()
        _build(progress)
        progress(f"bench case: filler generated in {time.perf_counter() - t:.0f} s")
        span = _span()
        if span is None:
            raise RuntimeError("bench case: filler data incomplete after generation")
    total = _count("SELECT count() FROM samples")
    if total < MIN_SAMPLES:
        raise RuntimeError(f"bench case: only {total:,} samples in the store after generating filler")
    cases = _cases(span[0], span[1], reps)
    raw_pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="bench-raw")
    # One untimed warm-up of each path (first-use costs: parsing caches, client set-up).
    run_overlay(cases[0], allowed_hosts=_case_hosts(cases[0]))
    list(raw_pool.map(_raw_rows, _raw_sql(cases[0])))
    options.get("freeze_heap", lambda: None)()  # as `serve` and the WSGI entry point do once loaded (the command passes it)
    overlay_ms, raw_ms, points = [], [], 0

    def timed_overlay(q):
        nonlocal result, points
        t = time.perf_counter()
        result = run_overlay(q, allowed_hosts=_case_hosts(q))
        overlay_ms.append((time.perf_counter() - t) * 1000)
        points = max(points, max(len(s.x) for s in result.series))

    def timed_raw(q):
        t = time.perf_counter()
        list(raw_pool.map(_raw_rows, _raw_sql(q)))
        raw_ms.append((time.perf_counter() - t) * 1000)

    result = None
    for k, q in enumerate(cases):
        # Whichever runs first on a case warms the engine's caches for the other: alternate.
        for step in ((timed_overlay, timed_raw) if k % 2 == 0 else (timed_raw, timed_overlay)):
            step(q)
        progress(f"case {k + 1}/{reps}: overlay {overlay_ms[-1]:.0f} ms, raw {raw_ms[-1]:.0f} ms")
    raw_pool.shutdown()
    if not options.get("keep", True):
        _drop()
    o95, r95 = float(np.percentile(overlay_ms, 95)), float(np.percentile(raw_ms, 95))
    return {
        "samples_in_store": total,
        "signals": len(cases[0].signals),
        "peers": PEERS,
        "window_s": 2 * WINDOW_S,
        "source": result.source,
        "band_source": result.band_source,
        "max_points_returned": points,
        "repetitions": reps,
        "overlay_p50_ms": round(float(np.percentile(overlay_ms, 50)), 1),
        "overlay_p95_ms": round(o95, 1),
        "raw_p50_ms": round(float(np.percentile(raw_ms, 50)), 1),
        "raw_p95_ms": round(r95, 1),
        "ratio_p95": round(o95 / r95, 2),
    }
