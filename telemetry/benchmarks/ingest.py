"""Ingestion throughput: remote-write and text exposition against raw insert_arrow, same rows, same run.

Prints ``raw_insert_rows_per_s`` (the normalised rows sent with the bare
clickhouse-connect ``insert_arrow``, no validation, no token, in remote-write
sized batches; ``raw_insert_large_batch_rows_per_s`` in text-body sized ones),
``remote_write_rows_per_s`` (snappy+protobuf decode, normalise, validate,
write with its de-duplication token: ``service.ingest_remote_write``),
``prometheus_text_rows_per_s`` (parse, normalise, validate, write:
``service.ingest_prometheus_text``) and each one's ratio to raw at the same batch size, plus the text
path without the store (parse only; parse + normalise) to show where its time goes. Targets on
the reference machine, embedded store: remote-write >= 50 % of raw, text >=
200,000 samples/s.

Data: dcgm-exporter-like series, ``--hosts`` x 8 GPUs x 20 DCGM fields with
dcgm-exporter's labels (gpu, UUID, pci_bus_id, device, modelName, Hostname,
driver version, container/namespace/pod), ``--rounds`` scrape rounds 10 s apart
(default 640 x 8 x 20 x 10 = 1,024,000 rows per path). Each round is one batch
for the text path: one body holding the round's 640 host scrapes back to back (what
``/federate`` or a scrape relay forwards, and what a backfill file handed to the
``ingest`` command holds), against one raw insert of the same 102,400 rows;
remote-write sends them as requests of 10,240 series (a sender's batch), against
raw inserts of the same batches. An
embedded-store insert costs tens of milliseconds whatever its size, so small
batches measure that cost rather than the path; a single node's scrape (160
samples) is measured apart, after the main run, and reported as
``prometheus_text_small_body_rows_per_s`` (``--small-bodies`` of them). Bodies
are rendered before the clock starts; senders produce them, not Precursor. The rollups the
product paths defer (``telemetry.rollup``: pushes are rolled up many at once) are fed inside
their timing, once per round (after the small bodies: once after all of them); the raw inserts
are rolled by the view, block by block.

Rows go to dedicated clusters (``bench-ingest-raw``/``-rw``/``-text``), with
timestamps from the run's start so no earlier run's de-duplication memory
applies, and are deleted afterwards (``ALTER TABLE ... DELETE``, mutations_sync).
"""
from __future__ import annotations

import random
import time

import pyarrow as pa

from telemetry import store
from telemetry.ingestion import normalize, remote_write, service
from telemetry.ingestion.prometheus_text import parse_exposition
from telemetry.ingestion.remote_write import RWSeries

CLUSTER_PREFIX = "bench-ingest"
PATHS = ("raw", "rw", "raw-large", "text")
RW_BATCH = 10_240  # series per remote-write request (a sender's batch; Prometheus' default is smaller)
GPUS = 8
STEP_MS = 10_000
# (DCGM field, typical value, is integer-valued): 20 fields a dcgm-exporter default set carries.
FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", 55, True), ("DCGM_FI_DEV_MEMORY_TEMP", 63, True),
    ("DCGM_FI_DEV_POWER_USAGE", 612.5, False), ("DCGM_FI_DEV_GPU_UTIL", 97, True),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 41, True), ("DCGM_FI_DEV_SM_CLOCK", 1980, True),
    ("DCGM_FI_DEV_MEM_CLOCK", 2619, True), ("DCGM_FI_DEV_FB_USED", 71234, True),
    ("DCGM_FI_DEV_FB_FREE", 9800, True), ("DCGM_FI_DEV_XID_ERRORS", 0, True),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 3, True), ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 12, True),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, True), ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 183_000_000, True),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 91_234_567_890, True), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.93, False),
    ("DCGM_FI_PROF_SM_ACTIVE", 0.88, False), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.61, False),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 0.47, False), ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0, True),
)


def add_arguments(parser) -> None:
    parser.add_argument("--hosts", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=10, help="scrape rounds (each one batch per path)")
    parser.add_argument("--small-bodies", type=int, default=200, help="single-node scrapes for the small-body figure")
    parser.add_argument("--seed", type=int, default=7)


def _labels(host: int, gpu: int) -> dict[str, str]:
    return {
        "gpu": str(gpu),
        "UUID": f"GPU-{host:04x}{gpu:04x}-5f2c-4b1e-9a3d-0c7e6b5a{host:02x}{gpu:02x}",
        "pci_bus_id": f"00000000:{(0x18 + gpu * 0x11) & 0xff:02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": f"gpu-{host:04d}",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "container": "", "namespace": "", "pod": "",
    }


def _value(rng: random.Random, base, integer: bool, counter_step: int):
    if integer:
        return int(base) + rng.randrange(0, 3) + counter_step
    return round(base * (0.95 + rng.random() * 0.1), 3)


def _generate(hosts: int, rounds: int, t0: int, seed: int, per_host: bool = False):
    """Per round: (rw series, text body, ts) with identical samples; ``per_host``: a list of
    one body per host instead of one body."""
    rng = random.Random(seed)
    label_sets = [[_labels(h, g) for g in range(GPUS)] for h in range(hosts)]
    heads = {}
    for h in range(hosts):
        for g in range(GPUS):
            lab = label_sets[h][g]
            body = ",".join(f'{k}="{v}"' for k, v in lab.items())
            for name, _, _ in FIELDS:
                heads[(h, g, name)] = f"{name}{{{body}}}"
    out = []
    for r in range(rounds):
        ts = t0 + r * STEP_MS
        series: list[RWSeries] = []
        lines: list[str] = []
        host_bodies: list[str] = []
        for h in range(hosts):
            if per_host and lines:
                host_bodies.append("\n".join(lines) + "\n")
                lines = []
            for name, base, integer in FIELDS:
                lines.append(f"# HELP {name} {name}.\n# TYPE {name} gauge")
                for g in range(GPUS):
                    v = _value(rng, base, integer, r if "TOTAL" in name or "COUNTER" in name else 0)
                    lines.append(f"{heads[(h, g, name)]} {v}")
                    series.append(RWSeries({"__name__": name, **label_sets[h][g]}, [ts], [float(v)]))
        if per_host:
            out.append((series, host_bodies + ["\n".join(lines) + "\n"], ts))
        else:
            out.append((series, "\n".join(lines) + "\n", ts))
    return out


def _feed_rollups() -> None:
    """Feed the rollups the product path deferred (``telemetry.rollup``) now, inside its timing:
    here once per round, where a server feeds millions of rows at once."""
    from telemetry import rollup

    if rollup.deferring():
        rollup.buffer().flush()


def _cleanup(clusters: list[str]) -> None:
    for c in clusters:
        for table in ("samples", "samples_1m", "band_1m"):
            store.command(f"ALTER TABLE {table} DELETE WHERE cluster = {{c:String}} SETTINGS mutations_sync = 1",
                          {"c": c}, tag="bench:ingest:cleanup")


def run(options: dict, progress) -> dict:
    from telemetry import migrate

    cfg = store.config()
    migrate.migrate(store.get_client(), migrate.Target(cluster=cfg.cluster, ttl_days=cfg.ttl_days), log=progress)
    hosts, rounds = options["hosts"], options["rounds"]
    clusters = {p: f"{CLUSTER_PREFIX}-{p}" for p in PATHS}
    clusters["text-small"] = f"{CLUSTER_PREFIX}-text-small"
    t0 = (int(time.time() * 1000) // 1000) * 1000 - rounds * STEP_MS
    progress(f"generating {hosts} hosts x {GPUS} GPUs x {len(FIELDS)} fields x {rounds} rounds …")
    rounds_data = _generate(hosts, rounds, t0, options["seed"])
    # Remote-write senders batch smaller than a federation body: RW_BATCH series per request,
    # compared with raw inserts of the same batches; the text bodies with one raw insert per round.
    bodies = [[remote_write.encode_write_request(series[k : k + RW_BATCH]) for k in range(0, len(series), RW_BATCH)]
              for series, _, _ in rounds_data]
    # The raw paths insert exactly the rows the other paths produce (normalised, same order).
    raw_tables = [[normalize.rw_series_to_table(series[k : k + RW_BATCH], cluster=clusters["raw"]).table
                   for k in range(0, len(series), RW_BATCH)] for series, _, _ in rounds_data]
    large_tables = [normalize.rw_series_to_table(series, cluster=clusters["raw-large"]).table
                    for series, _, _ in rounds_data]
    rows_per_round = large_tables[0].num_rows
    total_rows = sum(t.num_rows for t in large_tables)
    texts = [text for _, text, _ in rounds_data]
    stamps = [ts for _, _, ts in rounds_data]
    del rounds_data
    # Single-node scrapes: the first rounds of the same fleet, one body per host, later timestamps.
    small: list[tuple[str, int]] = []
    small_rounds = -(-options["small_bodies"] // hosts) if options["small_bodies"] > 0 else 0
    for _, host_bodies, ts in _generate(hosts, small_rounds, t0 + rounds * STEP_MS, options["seed"], per_host=True):
        small.extend((body, ts) for body in host_bodies)
    small = small[: options["small_bodies"]]
    text_bytes = sum(len(t) for t in texts)
    rw_bytes = sum(len(b) for round_bodies in bodies for b in round_bodies)
    _cleanup(list(clusters.values()))
    client = store.get_client()
    try:
        # Interleave the three paths round by round so each sees the same store state.
        spent = {p: 0.0 for p in PATHS}
        written = {p: 0 for p in PATHS}
        for i in range(rounds):
            # Round 0 warms every path (a sender's first push resolves each new label set once;
            # later pushes of the same series hit the cache) and is not timed: steady state counts.
            timed = i > 0 or rounds == 1
            for table in raw_tables[i]:
                start = time.perf_counter()
                client.insert_arrow("samples", table)
                if timed:
                    spent["raw"] += time.perf_counter() - start
                    written["raw"] += table.num_rows

            for body in bodies[i]:
                start = time.perf_counter()
                report = service.ingest_remote_write(body, clusters["rw"])
                if timed:
                    spent["rw"] += time.perf_counter() - start
                    written["rw"] += report.rows["samples"]
            start = time.perf_counter()
            _feed_rollups()  # the path's deferred rollup, timed with it (the raw inserts' view rolls per block)
            if timed:
                spent["rw"] += time.perf_counter() - start

            start = time.perf_counter()
            client.insert_arrow("samples", large_tables[i])
            if timed:
                spent["raw-large"] += time.perf_counter() - start
                written["raw-large"] += large_tables[i].num_rows

            start = time.perf_counter()
            report = service.ingest_prometheus_text(texts[i], clusters["text"], default_ts_ms=stamps[i])
            _feed_rollups()
            if timed:
                spent["text"] += time.perf_counter() - start
                written["text"] += report.rows["samples"]
            if (i + 1) % 10 == 0:
                progress(f"round {i + 1}/{rounds}")
        small_rows, small_spent = 0, 0.0
        for body, ts in small:
            start = time.perf_counter()
            report = service.ingest_prometheus_text(body, clusters["text-small"], default_ts_ms=ts)
            small_spent += time.perf_counter() - start
            small_rows += report.rows["samples"]
        start = time.perf_counter()
        _feed_rollups()
        small_spent += time.perf_counter() - start
        stored = {
            p: store.query_rows("SELECT count() FROM samples WHERE cluster = {c:String}", {"c": clusters[p]},
                                tag="bench:ingest:count")[0][0]
            for p in PATHS
        }
        # Where the time of the text path goes (no store): parse alone, parse + normalise.
        sample = range(min(rounds, 20))
        start = time.perf_counter()
        parsed = sum(len(parse_exposition(texts[i], default_ts_ms=stamps[i])) for i in sample)
        parse_only = parsed / (time.perf_counter() - start)
        start = time.perf_counter()
        normalised = sum(service.parse_prometheus_text(texts[i], clusters["text"], default_ts_ms=stamps[i]).table.num_rows
                         for i in sample)
        parse_normalise = normalised / (time.perf_counter() - start)
    finally:
        _cleanup(list(clusters.values()))
    raw_rate = written["raw"] / spent["raw"]
    rw_rate = written["rw"] / spent["rw"]
    text_rate = written["text"] / spent["text"]
    large_rate = written["raw-large"] / spent["raw-large"]
    return {
        "rows_per_path": total_rows,
        "rows_per_batch": rows_per_round,  # text body and raw-large insert
        "rows_per_remote_write_batch": min(RW_BATCH, rows_per_round),
        "batches": rounds,
        "timed_batches": max(1, rounds - 1),  # round 0 warms the label-set caches, untimed
        "stored_rows": stored,
        "compiled_scanner": remote_write.COMPILED_SCANNER,
        "remote_write_body_bytes": rw_bytes,
        "prometheus_text_body_bytes": text_bytes,
        "raw_insert_rows_per_s": round(raw_rate),  # remote-write batch size
        "raw_insert_large_batch_rows_per_s": round(large_rate),  # text body size
        "remote_write_rows_per_s": round(rw_rate),
        "prometheus_text_rows_per_s": round(text_rate),
        "remote_write_ratio_to_raw": round(rw_rate / raw_rate, 3),
        "prometheus_text_ratio_to_raw": round(text_rate / large_rate, 3),  # same batch size
        "prometheus_text_parse_only_rows_per_s": round(parse_only),
        "prometheus_text_parse_normalise_rows_per_s": round(parse_normalise),
        "prometheus_text_small_body_rows_per_s": round(small_rows / small_spent) if small_spent else None,
        "small_body_samples": round(small_rows / len(small)) if small else 0,
        "targets": {"remote_write_ratio_to_raw": ">= 0.5", "prometheus_text_rows_per_s": ">= 200000"},
    }
