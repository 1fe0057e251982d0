"""Arrow schemas of the telemetry tables: the one contract between parsers, the
fleet simulator and the writer.

Every ingestion path produces ``pyarrow.Table`` objects with exactly these
columns (in this order) and hands them to ``telemetry.writer``. The ClickHouse
DDL in ``telemetry/migrations/*.sql`` declares the same columns; a test keeps
the two in step.
"""
from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("ms", tz="UTC")

SAMPLES = pa.schema(
    [
        ("ts", TS),
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("component", pa.string()),  # gpu3, nvswitch1, mlx5_0/1, psu0, fan2, nvme0n1, '' = host level
        ("metric", pa.string()),  # canonical name from telemetry.catalog, or the source name if unknown
        ("value", pa.float64()),
    ]
)

EVENTS = pa.schema(
    [
        ("ts", TS),
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("component", pa.string()),
        ("source", pa.string()),  # kernel, dcgm, scheduler, network, simulator, ...
        ("kind", pa.string()),  # xid, sxid, link_down, link_up, kernel, firmware, job_state, ...
        ("code", pa.int32()),  # XID number for kind=xid; 0 when not applicable
        ("severity", pa.string()),  # critical, error, warning, info
        ("message", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())),
    ]
)

JOBS = pa.schema(
    [
        ("cluster", pa.string()),
        ("job_id", pa.string()),
        ("name", pa.string()),
        ("user", pa.string()),
        ("partition", pa.string()),
        ("state", pa.string()),  # Slurm base state: COMPLETED, FAILED, NODE_FAIL, TIMEOUT, CANCELLED, REQUEUED, RUNNING, ...
        ("exit_code", pa.string()),  # Slurm "code:signal"
        ("reason", pa.string()),  # free text: exit reason / root cause note from the source
        ("submit_ts", TS),
        ("start_ts", TS),
        ("end_ts", TS),  # null while running
        ("n_hosts", pa.uint32()),
        ("n_gpus", pa.uint32()),
        ("version", pa.uint64()),  # newer row wins (ReplacingMergeTree); ingestion uses ms since epoch of the observation
    ]
)

JOB_HOSTS = pa.schema(
    [
        ("cluster", pa.string()),
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("start_ts", TS),
        ("end_ts", TS),
        ("version", pa.uint64()),
    ]
)

HOSTS = pa.schema(
    [
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("rack", pa.string()),
        ("leaf", pa.string()),
        ("spine", pa.string()),
        ("gpu_model", pa.string()),
        ("driver_version", pa.string()),
        ("firmware_version", pa.string()),
        ("updated", TS),
    ]
)

COMPONENTS = pa.schema(
    [
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("component", pa.string()),  # gpu0..7, nvswitch0..3, mlx5_0/1, psu0, fan0
        ("kind", pa.string()),  # gpu, nvswitch, nic, psu, fan, disk
        ("model", pa.string()),
        ("serial", pa.string()),
        ("uuid", pa.string()),
        ("pci_bus_id", pa.string()),  # normalised 0000:BB:DD.F lowercase
        ("firmware", pa.string()),
        ("peer", pa.string()),  # for NICs: the switch port it is cabled to, e.g. leaf-03:p17
        ("updated", TS),
    ]
)

SERIES_LABELS = pa.schema(
    [
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("component", pa.string()),
        ("metric", pa.string()),
        ("labels", pa.map_(pa.string(), pa.string())),  # the labels no other column keeps (slot="3")
        ("first_seen", TS),
        ("last_seen", TS),
    ]
)

# Columns the store computes on insert from the others (a DEFAULT expression; writers never send
# them): the run of a job, so every run of a requeued job is its own record (migration 0007).
COMPUTED: dict[str, tuple[str, ...]] = {
    "jobs": ("run_ts",),  # submit_ts, else start_ts, else 1970
    "job_hosts": ("run_ts",),  # start_ts, else 1970
}

TABLES: dict[str, pa.Schema] = {
    "samples": SAMPLES,
    "events": EVENTS,
    "jobs": JOBS,
    "job_hosts": JOB_HOSTS,
    "hosts": HOSTS,
    "components": COMPONENTS,
    "series_labels": SERIES_LABELS,
}
