"""One function per ingestion format: parse and validate the WHOLE batch, then write.

The HTTP endpoints (``investigations.ingest_api``), the ``ingest`` command and
the benchmark all call these, so every path behaves the same:

- Nothing is written until the whole batch parsed, normalised and conformed to
  the table schema; a bad batch raises ``IngestError`` (line, field, reason)
  and leaves the store untouched.
- Every insert goes through ``telemetry.writer.write`` with a de-duplication
  token, so a retried identical batch adds no rows. Samples (text and
  remote-write) go through ``group_commit``: concurrent requests are stored as
  one insert, each answered once its rows are stored, with an idempotency
  record per request. Multi-table batches (sacct:
  jobs + job_hosts) use tokens derived from the input bytes, so a retry after a
  half-finished write completes it without duplicating the part that landed.
- Store failures are not ``IngestError``: they propagate, and the HTTP layer
  answers 503 so senders retry.

Text exposition bodies usually carry no timestamps: the samples get
``default_ts_ms`` (the receive time when not given). A sender that wants its
retries de-duplicated must therefore give the scrape time (a timestamp per
sample, or the endpoint's ``ts`` parameter): two scrapes of an idle GPU can be
byte-identical and must both be stored.
"""
from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from telemetry import names, retention, schema, store, writer, xid
from telemetry.ingestion import bulk, group_commit, inventory, kernel_log, limits, normalize, sacct
from telemetry.ingestion.errors import IngestError


@dataclass
class IngestReport:
    format: str
    cluster: str
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written (before de-duplication)
    dropped_blank: int = 0  # "no data" samples (NaN, stale markers, DCGM blank sentinels)
    skipped_lines: int = 0  # kernel-log lines that are not NVRM Xid lines
    unknown_metrics: list[str] = field(default_factory=list)  # stored under their own name
    unmapped_pci: list[str] = field(default_factory=list)  # kernel-log: PCI ids not in the inventory
    expired: int = 0  # rows older than the tables' retention left out on request (skip_expired); else refused

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    def as_dict(self) -> dict:
        return {
            "format": self.format,
            "cluster": self.cluster,
            "rows": dict(self.rows),
            "dropped_blank": self.dropped_blank,
            "skipped_lines": self.skipped_lines,
            "unknown_metrics": list(self.unknown_metrics),
            "unmapped_pci": list(self.unmapped_pci),
            "expired": self.expired,
        }


def _now_ms() -> int:
    return int(time.time() * 1000)


def _batch_token(kind: str, cluster: str, *parts: bytes | str) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{kind}\0{cluster}\0".encode())
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _check_cluster(cluster: str) -> str:
    if not cluster or not cluster.strip():
        raise IngestError("cluster must not be empty", field="cluster")
    cluster = cluster.strip()
    if len(cluster) > limits.CLUSTER_MAX or not names.is_host(cluster):
        raise IngestError(f"cluster name {names.shown(cluster)} is not allowed (letters, digits and _ . : - only, "
                          f"1 to {limits.CLUSTER_MAX} characters)", field="cluster")
    return cluster


def _retained(table: pa.Table, table_name: str, skip_expired: bool = False,
              column: str = "ts") -> tuple[pa.Table, int]:
    """(rows to write, rows left out) against the table's retention (its TTL as stored, not the
    setting). Rows the store would drop on arrival refuse the batch, since "ingested" then 0
    stored is a lie, unless the sender asked to leave them out (``skip_expired``): then they
    are left out here and counted in the report's ``expired``."""
    if table.num_rows == 0:
        return table, 0
    cutoff_ms = retention.oldest_kept_ms(table_name, _now_ms())
    if cutoff_ms is None:
        return table, 0
    as_ms = table.column(column).cast(pa.int64())
    old = pc.less(as_ms, cutoff_ms)
    n_old = pc.sum(old).as_py() or 0
    if not n_old:
        return table, 0
    if skip_expired:
        return table.filter(pc.invert(old)), n_old
    oldest = pc.min(as_ms).as_py()
    days = retention.table_days()[table_name]
    needed = -(-(_now_ms() - oldest) // 86_400_000)
    raise IngestError(
        f"{n_old} of {table.num_rows} rows are older than the retention of {table_name} ({days} days: "
        f"oldest {_iso(oldest)}, kept from {_iso(cutoff_ms)} on); the store would drop them on arrival, "
        f"so nothing of this batch was stored. To keep them: set TELEMETRY_TTL_DAYS=0 (keep forever) or "
        f"at least {needed} and run `{retention.COMMAND}`, then send the batch again "
        f"(or send it with skip_expired / --skip-expired to store only the rows inside the retention)",
        field=column)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def write_samples(result: normalize.NormalizeResult, fmt: str, cluster: str, tag: str, *,
                  skip_expired: bool = False) -> IngestReport:
    """Write a parsed and normalised batch (the second half of ``ingest_prometheus_text``/``ingest_remote_write``)."""
    table = writer.conform("samples", result.table)  # validate before anything is sent
    table, expired = _retained(table, "samples", skip_expired)
    # Stored together with the other requests queued meanwhile; returns once stored (see group_commit).
    group_commit.committer("samples").submit(table, tag=tag)
    rows = {"samples": table.num_rows}
    try:
        # GPU/NIC identity, driver and firmware from the labels of series seen for the first time
        rows.update(inventory.write(result.inventory))
    except Exception:
        # A retry must note them again: label sets already resolved would be skipped.
        normalize.forget_label_sets()
        raise
    return IngestReport(
        format=fmt, cluster=cluster, rows=rows, dropped_blank=result.dropped_blank,
        unknown_metrics=sorted(result.unknown_metrics), expired=expired,
    )


def parse_prometheus_text(
    text: str, cluster: str, default_host: str | None = None, default_ts_ms: int | None = None
) -> normalize.NormalizeResult:
    cluster = _check_cluster(cluster)
    if default_ts_ms is not None:
        limits.check_ts(default_ts_ms, "ts")
    with inventory.collecting() as found:
        result = normalize.prometheus_text_to_table(
            text, cluster=cluster, default_host=default_host or None,
            default_ts_ms=default_ts_ms if default_ts_ms is not None else _now_ms(),
        )
    return _readings(result._replace(inventory=tuple(found)))


def _readings(result: normalize.NormalizeResult) -> normalize.NormalizeResult:
    """The one rule for readings (``limits``): non-finite values dropped as no data,
    times outside the window and names outside the grammar refused."""
    table, dropped = limits.drop_no_data(result.table)
    limits.check_table("samples", table, names_checked=True)  # names: once per label set, in normalize
    return result._replace(table=table, dropped_blank=result.dropped_blank + dropped)


def ingest_prometheus_text(
    text: str, cluster: str, default_host: str | None = None, default_ts_ms: int | None = None
) -> IngestReport:
    """One text-exposition scrape (dcgm-exporter, node_exporter) -> samples."""
    result = parse_prometheus_text(text, cluster, default_host, default_ts_ms)
    return write_samples(result, "prometheus", cluster.strip(), "ingest:prometheus")


def parse_remote_write(body: bytes, cluster: str) -> normalize.NormalizeResult:
    cluster = _check_cluster(cluster)
    with inventory.collecting() as found:
        result = normalize.decode_to_table(body, cluster=cluster)
    return _readings(result._replace(inventory=tuple(found)))


def ingest_remote_write(body: bytes, cluster: str) -> IngestReport:
    """One Prometheus remote-write 1.0 request body (snappy + protobuf) -> samples."""
    result = parse_remote_write(body, cluster)
    return write_samples(result, "remote-write", cluster.strip(), "ingest:remote-write")


# --- kernel log --------------------------------------------------------------------------


def _pci_map(cluster: str, hosts: list[str]) -> dict[tuple[str, str], str]:
    """(host, normalised pci bus id) -> component, from the newest inventory."""
    if not hosts:
        return {}
    try:
        rows = store.query_rows(
            "SELECT host, pci_bus_id, component FROM components FINAL "
            "WHERE cluster = {cluster:String} AND host IN {hosts:Array(String)} AND pci_bus_id != ''",
            {"cluster": cluster, "hosts": hosts},
            tag="ingest:kernel-log:pci-map",
        )
    except (store.StoreLocked, store.StoreUnavailable):
        raise
    except Exception as exc:  # a store failure, not bad input: the sender should retry
        raise store.StoreUnavailable(f"cannot read the inventory: {exc}") from exc
    out: dict[tuple[str, str], str] = {}
    for host, pci, component in rows:
        try:
            out[(host, kernel_log.normalize_pci_bus_id(pci))] = component
        except ValueError:
            continue  # an inventory row with a malformed id cannot match a kernel line anyway
    return out


def parse_kernel_log(
    text: str, cluster: str, host: str | None = None, year: int | None = None,
    now_ts_ms: int | None = None, boot_ts_ms: int | None = None,
) -> tuple[pa.Table, kernel_log.KernelLogResult, list[str]]:
    cluster = _check_cluster(cluster)
    parsed = kernel_log.parse_kernel_log(text, host=host or None, year=year, now_ts_ms=now_ts_ms, boot_ts_ms=boot_ts_ms)
    received_ms = now_ts_ms if now_ts_ms is not None else _now_ms()
    for x in (*parsed.xids, *parsed.links):
        if not x.host:
            raise IngestError("no host: the line has no syslog/journal host and no host was given",
                              line=x.line, field="host")
    seen_hosts = sorted({x.host for x in (*parsed.xids, *parsed.links)})
    pci = _pci_map(cluster, seen_hosts) if seen_hosts else {}
    cols: dict[str, list] = {name: [] for name in schema.EVENTS.names}
    unmapped: set[str] = set()
    for x in parsed.xids:
        info = xid.describe(x.xid)
        component = pci.get((x.host, x.pci_bus_id), "")
        if not component:
            unmapped.add(f"{x.host} {x.pci_bus_id}")
        attributes = {
            "pci_bus_id": x.pci_bus_id,
            "xid_mnemonic": info.mnemonic,
            "xid_meaning": info.meaning,
            "xid_category": info.category,
        }
        if x.ts_ms is None:
            # Plain dmesg (seconds since boot) or no prefix at all: the receive time is
            # the best we have; say so, so nobody reads it as the driver's own time.
            attributes["time_source"] = "received"
        if x.pid is not None:
            attributes["pid"] = str(x.pid)
        if x.process:
            attributes["process"] = x.process
        cols["ts"].append(x.ts_ms if x.ts_ms is not None else received_ms)
        cols["cluster"].append(cluster)
        cols["host"].append(x.host)
        cols["component"].append(component)
        cols["source"].append("kernel")
        cols["kind"].append("xid")
        cols["code"].append(x.xid)
        cols["severity"].append(info.severity)
        cols["message"].append(x.message)
        cols["attributes"].append(list(attributes.items()))
    for x in parsed.links:
        # the NIC the inventory knows at that PCI address, else the netdev the line names
        attributes = {"pci_bus_id": x.pci_bus_id, "driver": "mlx5_core"}
        if x.device:
            attributes["netdev"] = x.device
        if x.ts_ms is None:
            attributes["time_source"] = "received"
        cols["ts"].append(x.ts_ms if x.ts_ms is not None else received_ms)
        cols["cluster"].append(cluster)
        cols["host"].append(x.host)
        cols["component"].append(pci.get((x.host, x.pci_bus_id), "") or x.device)
        cols["source"].append("kernel")
        cols["kind"].append(x.kind)
        cols["code"].append(0)
        cols["severity"].append({"link_down": "error", "link_up": "info"}.get(x.kind, "warning"))
        cols["message"].append(x.message)
        cols["attributes"].append(list(attributes.items()))
    if any(not (-(2**31) <= c < 2**31) for c in cols["code"]):
        bad = next(x for x in parsed.xids if not (-(2**31) <= x.xid < 2**31))
        raise IngestError(f"Xid code {bad.xid} out of range", line=bad.line, field="xid")
    try:
        table = pa.Table.from_pydict(cols, schema=schema.EVENTS)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise IngestError(f"cannot build events: {exc}") from None
    limits.check_table("events", table, line_of=lambda i: parsed.xids[i].line)
    return writer.conform("events", table), parsed, sorted(unmapped)


def ingest_kernel_log(
    text: str, cluster: str, host: str | None = None, year: int | None = None,
    now_ts_ms: int | None = None, boot_ts_ms: int | None = None,
) -> IngestReport:
    """dmesg / journal / syslog text -> one ``events`` row (kind xid) per ``NVRM: Xid`` line, and one
    (kind link_down / link_up / port_module) per mlx5 link or port-module line.

    Lines without a wall-clock time (plain ``dmesg``, bare lines) get ``boot_ts_ms`` +
    uptime when the boot time is given, else the receive time, marked
    ``attributes['time_source'] = 'received'``."""
    return write_kernel_events(*parse_kernel_log(text, cluster, host, year, now_ts_ms, boot_ts_ms), cluster=cluster)


def write_kernel_events(table: pa.Table, parsed: kernel_log.KernelLogResult, unmapped: list[str], *,
                        cluster: str, skip_expired: bool = False) -> IngestReport:
    table, expired = _retained(table, "events", skip_expired)  # before anything is written
    written = writer.write("events", table, tag="ingest:kernel-log")
    return IngestReport(format="kernel-log", cluster=cluster.strip(), rows={"events": written.rows},
                        skipped_lines=parsed.skipped, unmapped_pci=unmapped, expired=expired)


# --- sacct -------------------------------------------------------------------------------


def parse_sacct(text: str, cluster: str, observed_ts_ms: int | None = None) -> tuple[pa.Table, pa.Table]:
    cluster = _check_cluster(cluster)
    rows = sacct.parse_sacct(text)
    jobs, job_hosts = sacct.to_tables(rows, cluster, observed_ts_ms if observed_ts_ms is not None else _now_ms())
    limits.check_table("jobs", jobs, line_of=lambda i: rows[i].line)
    limits.check_table("job_hosts", job_hosts)
    return writer.conform("jobs", jobs), writer.conform("job_hosts", job_hosts)


def ingest_sacct(text: str, cluster: str, observed_ts_ms: int | None = None) -> IngestReport:
    """``sacct -P`` output (header first) -> jobs and job -> host allocations."""
    jobs, job_hosts = parse_sacct(text, cluster, observed_ts_ms)
    return write_sacct(text, cluster, jobs, job_hosts)


def write_sacct(text: str, cluster: str, jobs: pa.Table, job_hosts: pa.Table) -> IngestReport:
    # The version column holds the observation time, so the content differs on a retry:
    # the tokens come from the input instead, which makes a retry (even after only
    # `jobs` landed) idempotent.
    token = _batch_token("sacct", cluster.strip(), text)
    written_jobs = writer.write("jobs", jobs, token=token, tag="ingest:sacct")
    written_hosts = writer.write("job_hosts", job_hosts, token=token, tag="ingest:sacct")
    return IngestReport(format="sacct", cluster=cluster.strip(),
                        rows={"jobs": written_jobs.rows, "job_hosts": written_hosts.rows})


# --- bulk --------------------------------------------------------------------------------


def ingest_bulk(path_or_bytes: str | Path | bytes, fmt: str, table: str = "samples", *,
                cluster: str, skip_expired: bool = False) -> IngestReport:
    """A CSV / JSON Lines / Parquet file in the documented schema (see ``telemetry.ingestion.bulk``);
    ``cluster`` fills rows whose cluster column is absent or empty."""
    cluster = _check_cluster(cluster)
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    result = bulk.read_bulk(data, fmt, table, cluster=cluster)
    rows, dropped = limits.drop_no_data(result.table) if table == "samples" else (result.table, 0)
    limits.check_table(table, rows)
    conformed = writer.conform(table, rows)
    expired = 0
    if table in ("samples", "events"):
        conformed, expired = _retained(conformed, table, skip_expired)
    written = writer.write(table, conformed, tag=f"ingest:{fmt}")
    return IngestReport(format=fmt, cluster=cluster, rows={table: written.rows}, dropped_blank=result.dropped_blank + dropped,
                        expired=expired)
