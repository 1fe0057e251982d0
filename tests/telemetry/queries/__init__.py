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


def job_rows(job_id, host, end, state="NODE_FAIL", cluster="fleet", *, start=None, gpus=8):
    """A one-host job on ``host`` from ``start`` (default 30 h before ``end``) to ``end``: its
    ``jobs`` row and its ``job_hosts`` row."""
    start = end - timedelta(hours=30) if start is None else start
    return ({"cluster": cluster, "job_id": job_id, "name": f"train-{job_id}", "user": "u", "partition": "gpu",
             "state": state, "exit_code": "0:0", "reason": "", "submit_ts": start, "start_ts": start, "end_ts": end,
             "n_hosts": 1, "n_gpus": gpus, "version": 1},
            {"cluster": cluster, "job_id": job_id, "host": host, "start_ts": start, "end_ts": end, "version": 1})


def write_xid_job_failures(cluster, failures, hosts, *, first_id: int, busy_first_id: int, busy_days: int = 6,
                           xid: int | None = 94) -> None:
    """Multi-host jobs that end in NODE_FAIL with an XID on the failing GPU a minute before, one per
    ``(job hosts, failing host, failing gpu index, hours after BASE)`` in ``failures``; and every
    host of ``hosts`` busy with a job from BASE for ``busy_days`` (controls are matched on activity).
    ``xid`` None: no event at all (a NODE_FAIL that names no part)."""
    jobs, alloc, events = [], [], []
    for k, (job_hosts, fh, fg, hours) in enumerate(failures):
        end = BASE + timedelta(hours=hours)
        for i, h in enumerate(job_hosts):
            j, a = job_rows(str(first_id + k), h, end, cluster=cluster)
            if i == 0:
                j["n_hosts"] = len(job_hosts)
                jobs.append(j)
            alloc.append(a)
        if xid is not None:
            events.append(event_row(cluster, fh, end - timedelta(minutes=1), "xid", xid, f"gpu{fg}", "critical"))
    for k, h in enumerate(hosts):
        j, a = job_rows(str(busy_first_id + k), h, BASE + timedelta(days=busy_days), "COMPLETED", cluster=cluster)
        j["start_ts"] = a["start_ts"] = BASE
        jobs.append(j), alloc.append(a)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    if events:
        write_rows("events", events)


def write_part_failures(cluster, hosts, failures, end, *, xid: int | None, component: str, gpus: int = 8) -> None:
    """One-host jobs from BASE to ``end``: on each host of ``failures`` (host -> hours after BASE)
    a job ends in NODE_FAIL then, with XID ``xid`` on ``component`` a minute before (None: no event,
    a NODE_FAIL that names no part), and is requeued 10 min later until ``end``; every other host of
    ``hosts`` runs one job that completes."""
    jobs, alloc, events = [], [], []
    for k, host in enumerate(hosts):
        if host in failures:
            t0 = BASE + timedelta(hours=failures[host])
            runs = [(BASE, t0, "NODE_FAIL"), (t0 + timedelta(minutes=10), end, "COMPLETED")]
            if xid is not None:
                events.append(event_row(cluster, host, t0 - timedelta(minutes=1), "xid", xid, component, "critical"))
        else:
            runs = [(BASE, end, "COMPLETED")]
        for n, (a, b, state) in enumerate(runs):
            j, al = job_rows(f"{k}{n}", host, b, state, cluster, start=a, gpus=gpus)
            jobs.append(j), alloc.append(al)
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    if events:
        write_rows("events", events)
