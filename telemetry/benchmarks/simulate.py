"""Fleet simulator throughput: generation + insert through the writer, against a raw insert_arrow.

Writes into the configured store under cluster "bench-sim" (and "bench-sim-raw"
for the raw figure) and deletes those rows afterwards; other clusters' data is
never touched. Each run uses a fresh seed, so the writer's de-duplication never
turns a rerun into a no-op.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from telemetry import migrate, store
from telemetry.simulator import RunStats, SimConfig, generate, simulate

CLUSTER = "bench-sim"
RAW_CLUSTER = "bench-sim-raw"
TABLES = ("samples", "samples_1m", "band_1m", "events", "jobs", "job_hosts", "hosts", "components", "series_labels")


def add_arguments(parser):
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--days", type=float, default=0.1)
    # A realistic scrape interval: the rollup views then aggregate ~6 samples per series-minute.
    parser.add_argument("--interval", type=int, default=10)


def _cleanup() -> None:
    for table in TABLES:
        for cluster in (CLUSTER, RAW_CLUSTER):
            store.get_client().command(f"ALTER TABLE {table} DELETE WHERE cluster = {{c:String}}",
                                       parameters={"c": cluster}, settings={"mutations_sync": 1})


def run(options: dict, progress) -> dict:
    cfg = store.config()
    migrate.migrate(store.get_client(), migrate.Target(cluster=cfg.cluster, ttl_days=cfg.ttl_days), log=progress)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    cfg = SimConfig(hosts=options["hosts"], days=options["days"], interval_s=options["interval"],
                    seed=time.time_ns() % 2**31, start=today, cluster=CLUSTER)
    stats = RunStats()
    try:
        simulate(cfg, progress=lambda done, total: progress(f"{done:,}/{total:,} samples"), stats=stats,
                 tag="bench-simulate")
        # raw engine: the same kind of batches, generated up front, straight to insert_arrow
        raw_batches = []
        raw_cfg = SimConfig(hosts=cfg.hosts, days=cfg.days, interval_s=cfg.interval_s, seed=cfg.seed + 1,
                            start=today, cluster=RAW_CLUSTER)
        raw_rows = 0
        for name, table in generate(raw_cfg):
            if name == "samples":
                raw_batches.append(table)
                raw_rows += table.num_rows
                if raw_rows >= min(stats.samples, 3_000_000):
                    break
        client = store.get_client()
        t = time.perf_counter()
        for table in raw_batches:
            client.insert_arrow("samples", table)
        raw_s = time.perf_counter() - t
    finally:
        _cleanup()
    rate = stats.samples / stats.wall_s if stats.wall_s else 0.0
    raw_rate = raw_rows / raw_s if raw_s else 0.0
    return {
        "samples": stats.samples,
        "samples_per_s": round(rate),
        "generate_s": round(stats.generate_s, 2),
        "insert_s": round(stats.insert_s, 2),
        "wall_s": round(stats.wall_s, 2),
        "raw_insert_rows_per_s": round(raw_rate),
        "ratio_to_raw": round(rate / raw_rate, 3) if raw_rate else None,
    }
