"""Tests of the query runners. Helpers here build small Arrow tables in the telemetry schemas;
each test writes its own contents (the writer drops batches identical to earlier ones)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa

from telemetry import schema, writer

# Recent enough that the store's TTL never drops it, fixed within a test run.
BASE = (datetime.now(timezone.utc) - timedelta(days=5)).replace(hour=0, minute=0, second=0, microsecond=0)


def write_samples(cluster: str, host: str, component: str, metric: str, ts, values) -> None:
    ts = list(ts)
    n = len(ts)
    table = pa.table(
        {
            "ts": pa.array(ts, type=schema.TS),
            "cluster": [cluster] * n,
            "host": [host] * n,
            "component": [component] * n,
            "metric": [metric] * n,
            "value": pa.array(np.asarray(values, dtype=float)),
        },
        schema=schema.SAMPLES,
    )
    writer.write("samples", table)


def every(start: datetime, seconds: int, count: int) -> list[datetime]:
    return [start + timedelta(seconds=seconds * i) for i in range(count)]


def write_rows(table_name: str, rows: list[dict]) -> None:
    target = schema.TABLES[table_name]
    cols = {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in target}
    writer.write(table_name, pa.table(cols, schema=target))


def host_row(cluster, host, *, rack="r1", leaf="leaf-1", spine="spine-1", gpu_model="H100", driver="550.54", fw="96.00"):
    return {"cluster": cluster, "host": host, "rack": rack, "leaf": leaf, "spine": spine, "gpu_model": gpu_model,
            "driver_version": driver, "firmware_version": fw, "updated": BASE}


def event_row(cluster, host, ts, kind, code=0, component="", severity="error", message="", source="kernel"):
    return {"ts": ts, "cluster": cluster, "host": host, "component": component, "source": source, "kind": kind,
            "code": code, "severity": severity, "message": message, "attributes": []}
