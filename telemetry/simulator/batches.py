"""Samples as Arrow batches, for both scenarios: the time axis cut into chunks (never across a UTC
day, so an insert touches one ``samples`` partition), each chunk's (metric, component set, values)
arrays turned into ``samples`` rows of the hosts that are up, in batches of about ``BATCH_ROWS``.

Generation is numpy throughout (a few hundred ns a sample); the store's insert path (the sort and
the one-minute rollup views) costs about ten times that, so a build's time is the insert's.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry import schema

BATCH_ROWS = 1_000_000

# chunk(k0, k1) -> (up: bool (hosts, steps), iterable of (metric, cset, values (hosts, C, steps) or flat))
Chunk = Callable[[int, int], tuple[np.ndarray, Iterable[tuple[str, str, np.ndarray]]]]


def sample_batches(cfg, host_names: list[str], component_sets: dict[str, list[str]], series, max_chunk_cells: int,
                   chunk: Chunk, manifest=None, batch_rows: int | None = None) -> Iterator[tuple[str, pa.Table]]:
    """Yield ("samples", table) batches; a value that is not finite (NaN: no reading) is no row.
    ``manifest.counts["samples"]`` gets the total."""
    metric_names = sorted({m for m, _ in series})
    metric_idx = {m: i for i, m in enumerate(metric_names)}
    comp_names = sorted({c for cs in component_sets.values() for c in cs})
    comp_idx = {c: i for i, c in enumerate(comp_names)}
    cidx = {cset: np.array([comp_idx[c] for c in cs], np.int32) for cset, cs in component_sets.items()}
    names = (pa.array([cfg.cluster]), pa.array(host_names), pa.array(comp_names), pa.array(metric_names))
    H = cfg.hosts
    dt_ms = cfg.interval_s * 1000
    start_ms = int(round(cfg.start_s * 1000))
    steps_per_day = max(1, int(86400 // cfg.interval_s))
    step = max(1, min(steps_per_day, max_chunk_cells // H))
    total, k0 = 0, 0
    while k0 < cfg.steps:
        day_end = ((k0 // steps_per_day) + 1) * steps_per_day  # one partition per insert
        k1 = min(cfg.steps, k0 + step, day_end)
        T = k1 - k0
        up, arrays = chunk(k0, k1)
        ts = start_ms + np.arange(k0, k1, dtype=np.int64) * dt_ms
        parts, rows = [], 0
        for metric, cset, values in arrays:
            C = len(component_sets[cset])
            values = np.asarray(values, dtype=np.float64).reshape(-1)
            flat = (np.broadcast_to(up[:, None, :], (H, C, T)).reshape(-1)) & np.isfinite(values)
            n = int(flat.sum())
            if n == 0:
                continue
            parts.append((np.tile(ts, H * C)[flat], np.repeat(np.arange(H, dtype=np.int32), C * T)[flat],
                          np.tile(np.repeat(cidx[cset], T), H)[flat], metric_idx[metric], n, values[flat]))
            rows += n
            if rows >= (batch_rows or BATCH_ROWS):
                yield "samples", _table(parts, names)
                total += rows
                parts, rows = [], 0
        if parts:
            yield "samples", _table(parts, names)
            total += rows
        k0 = k1
    if manifest is not None:
        manifest.counts["samples"] = total


def _table(parts, names) -> pa.Table:
    cluster_arr, host_arr, comp_arr, metric_arr = names
    ts = np.concatenate([p[0] for p in parts])
    n = len(ts)
    return pa.Table.from_arrays([
        pa.array(ts, schema.TS),
        pc.take(cluster_arr, pa.array(np.zeros(n, np.int32))),
        pc.take(host_arr, pa.array(np.concatenate([p[1] for p in parts]))),
        pc.take(comp_arr, pa.array(np.concatenate([p[2] for p in parts]))),
        pc.take(metric_arr, pa.array(np.concatenate([np.full(p[4], p[3], np.int32) for p in parts]))),
        pa.array(np.concatenate([p[5] for p in parts])),
    ], schema=schema.SAMPLES)
