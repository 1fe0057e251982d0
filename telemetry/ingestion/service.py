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
import json
import re
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import NamedTuple
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry import catalog, catalog_store, names, retention, schema, store, writer, xid
from telemetry.ingestion import bulk, group_commit, inventory, kernel_log, limits, localtime, normalize, sacct
from telemetry.ingestion import series_labels
from telemetry.ingestion import labels as label_rules
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
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> lines not read (sums to skipped_lines)
    receive_time: dict = field(default_factory=dict)  # lines stamped with the receive time: count, lines
    time_zone: dict = field(default_factory=dict)  # tz used for naive times, ambiguous / missing ones named
    aliases: dict[str, str] = field(default_factory=dict)  # source name -> catalog name it was stored under
    labels_not_stored: dict[str, int] = field(default_factory=dict)  # label -> series that carried it (kept in series_labels)
    merged_series: int = 0  # series that share a stored row key with another (they differ only in such labels)
    merged_by: dict[str, int] = field(default_factory=dict)  # label -> series, among the merged ones it told apart

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
            "skipped": dict(self.skipped),
            "receive_time": dict(self.receive_time),
            "time_zone": dict(self.time_zone),
            "unknown_metrics": list(self.unknown_metrics),
            "aliases": dict(self.aliases),
            "labels_not_stored": dict(self.labels_not_stored),
            "merged_series": self.merged_series,
            "merged_by": dict(self.merged_by),
            "unmapped_pci": list(self.unmapped_pci),
            "expired": self.expired,
        }

    def summary_lines(self) -> list[str]:
        """The report as sentences: what the CLI prints and the HTTP answer carries as ``summary``."""
        out = [f"stored {', '.join(f'{n} {t}' for t, n in self.rows.items()) or 'no rows'} "
               f"({self.format}, cluster {self.cluster})"]
        if self.expired:
            out.append(f"{self.expired} rows older than the tables' retention left out (skip_expired)")
        if self.dropped_blank:
            out.append(f"{self.dropped_blank} no-data samples (NaN, stale markers, DCGM blanks) not stored")
        for reason, n in self.skipped.items():
            out.append(f"{n} lines skipped: {reason}")
        if self.receive_time.get("count"):
            out.append(f"{self.receive_time['count']} lines had no date and got the receive time "
                       f"(attributes time_source=received): lines {_shown(self.receive_time['lines'])}")
        tz = self.time_zone
        if tz.get("localised"):
            out.append(f"{tz['localised']} times without a zone read as {tz['tz']}")
        for key, what in (("ambiguous", "ambiguous local times"), ("missing", "local times that do not exist")):
            if key in tz:
                out.append(f"{tz[key]['count']} {what}, {tz[key]['rule']}: {'; '.join(tz[key]['examples'])}")
        if self.aliases:
            out.append("names mapped by the catalog: "
                       + ", ".join(f"{a} -> {c}" for a, c in sorted(self.aliases.items())))
        if self.unknown_metrics:
            out.append(f"{len(self.unknown_metrics)} names not in the catalog, stored under their own name "
                       f"(map them on the catalog page): {_shown(self.unknown_metrics)}")
        if self.labels_not_stored:
            out.append("labels kept in series_labels, not part of the series key: "
                       + ", ".join(f"{k} ({n} series)" for k, n in sorted(self.labels_not_stored.items())))
        if self.merged_series:
            by = (f" (they differ only in {', '.join(sorted(self.merged_by))}; each label set is kept in "
                  "series_labels)" if self.merged_by else "")
            out.append(f"{self.merged_series} series merged into another's row key{by}")
        if self.unmapped_pci:
            out.append(f"PCI ids not in the inventory (component left empty): {_shown(self.unmapped_pci)}")
        return out


def _shown(items, n: int = 10) -> str:
    items = list(items)
    return ", ".join(map(str, items[:n])) + (f" and {len(items) - n} more" if len(items) > n else "")


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
              column: str = "ts", ts_span: tuple[int, int] | None = None) -> tuple[pa.Table, int]:
    """(rows to write, rows left out) against the table's retention (its TTL as stored, not the
    setting). Rows the store would drop on arrival refuse the batch, since "ingested" then 0
    stored is a lie, unless the sender asked to leave them out (``skip_expired``): then they
    are left out here and counted in the report's ``expired``. ``ts_span``: the lowest and
    highest ``column`` where the caller knows them (a bound: the rows are read only when the
    lowest is past the cutoff)."""
    if table.num_rows == 0:
        return table, 0
    cutoff_ms = retention.oldest_kept_ms(table_name, _now_ms())
    if cutoff_ms is None or (ts_span is not None and ts_span[0] >= cutoff_ms):
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


class ParsedSamples(NamedTuple):
    """A normalised scrape / push, with the labels that did not make it into the row key."""
    table: pa.Table
    dropped_blank: int
    unknown_metrics: set[str]
    labels_not_stored: dict[str, int]  # label -> series carrying it (telemetry.ingestion.labels)
    merged_series: int
    inventory: tuple = ()  # identity labels of new label sets (telemetry.ingestion.inventory)
    merged_by: dict[str, int] = {}  # label -> series, among merged series it tells apart (never mutated)
    ts_span: tuple[int, int] | None = None  # lowest and highest ts (ms) where known (normalize.NormalizeResult)


_KEY = ["cluster", "host", "component", "metric", "ts"]


def merged_rows(table: pa.Table) -> int:
    """Rows whose (cluster, host, component, metric, ts) another row of the batch has too:
    series the row key cannot tell apart (they differ only in labels that are not stored)."""
    return _merges(table)[0]


def _merges(table: pa.Table) -> tuple[int, frozenset[str]]:
    """(merged rows, the metric names they are under)."""
    n = table.num_rows
    if n < 2:
        return 0, frozenset()
    key = np.zeros(n, dtype=np.int64)
    metric_codes = None
    for name in _KEY[:-1]:
        codes = pc.dictionary_encode(table.column(name)).combine_chunks()
        width = max(len(codes.dictionary), 1)
        idx = codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        key = key * width + idx
        if name == "metric":
            metric_codes = (codes.dictionary, idx)
    ts = table.column("ts").cast(pa.int64()).to_numpy()
    order = np.lexsort((ts, key))
    dup = (key[order][1:] == key[order][:-1]) & (ts[order][1:] == ts[order][:-1])
    count = int(np.count_nonzero(dup))
    if not count:
        return 0, frozenset()
    names, idx = metric_codes
    return count, frozenset(names.take(pa.array(np.unique(idx[order][1:][dup]))).to_pylist())


# What tells merged series apart rarely changes between scrapes of one exporter: remembered by
# (cluster, default host, merged metrics) so a node_exporter scrape (cpu x mode) is not parsed twice.
_MERGE_LABELS: dict[tuple, dict[str, int]] = {}
_MERGE_LABELS_MAX = 4096


def _labels_in_merges(label_sets, cluster: str, default_host: str | None,
                      metrics: frozenset[str] | None = None) -> dict[str, int]:
    """For series that share a row key: which labels tell them apart (label -> series).
    ``metrics``: the metrics merges were found under (series of others are skipped)."""
    groups: dict[tuple, list[dict]] = {}
    for name, labels in label_sets:
        metric = catalog.resolve(name)
        metric = metric.name if metric is not None else name
        if metrics is not None and metric not in metrics:
            continue
        labels = dict(labels)
        key = (labels.get("cluster") or cluster, label_rules.host_of(labels, default_host),
               label_rules.component_of(labels), metric)
        groups.setdefault(key, [])
        if labels not in groups[key]:
            groups[key].append(labels)
    out: dict[str, int] = {}
    for sets in groups.values():
        if len(sets) < 2:
            continue
        names = set().union(*sets)
        for label in sorted(names):
            if len({s.get(label) for s in sets}) > 1:
                out[label] = out.get(label, 0) + len(sets)
    return out


def _with_merges(result: normalize.NormalizeResult, label_sets, cluster: str,
                 default_host: str | None = None) -> ParsedSamples:
    merged, metrics = result.merged if result.merged is not None else _merges(result.table)
    labels: dict[str, int] = {}
    if merged and label_sets is not None:
        key = (cluster, default_host, metrics)
        labels = _MERGE_LABELS.get(key)
        if labels is None:
            labels = _labels_in_merges(label_sets(), cluster, default_host, metrics)
            if len(_MERGE_LABELS) >= _MERGE_LABELS_MAX:
                _MERGE_LABELS.clear()
            _MERGE_LABELS[key] = labels
    return ParsedSamples(result.table, result.dropped_blank, result.unknown_metrics,
                         dict(result.labels_not_stored), merged, tuple(getattr(result, "inventory", ())), labels,
                         result.ts_span)


def write_samples(result: normalize.NormalizeResult | ParsedSamples, fmt: str, cluster: str, tag: str, *,
                  skip_expired: bool = False) -> IngestReport:
    """Write a parsed and normalised batch (the second half of ``ingest_prometheus_text``/``ingest_remote_write``)."""
    table = writer.conform("samples", result.table)  # validate before anything is sent
    table, expired = _retained(table, "samples", skip_expired, ts_span=getattr(result, "ts_span", None))
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
        labels_not_stored=dict(getattr(result, "labels_not_stored", {})),
        merged_series=getattr(result, "merged_series", 0), merged_by=dict(getattr(result, "merged_by", {})),
    )


def parse_prometheus_text(
    text: str, cluster: str, default_host: str | None = None, default_ts_ms: int | None = None
) -> ParsedSamples:
    cluster = _check_cluster(cluster)
    catalog_store.refresh()
    if default_ts_ms is not None:
        limits.check_ts(default_ts_ms, "ts")
    ts = default_ts_ms if default_ts_ms is not None else _now_ms()
    with inventory.collecting() as found:
        result = normalize.prometheus_text_to_table(
            text, cluster=cluster, default_host=default_host or None, default_ts_ms=ts,
        )
    return _with_merges(_readings(result._replace(inventory=tuple(found))), result.label_sets, cluster,
                        default_host or None)


def _readings(result: normalize.NormalizeResult) -> normalize.NormalizeResult:
    """The one rule for readings (``limits``): non-finite values dropped as no data,
    times outside the window and names outside the grammar refused."""
    table, dropped = (result.table, 0) if result.finite else limits.drop_no_data(result.table)
    # names: once per label set, in normalize; times: from ts_span where the parser knows it
    limits.check_table("samples", table, names_checked=True, ts_span=result.ts_span)
    return result._replace(table=table, dropped_blank=result.dropped_blank + dropped)


def ingest_prometheus_text(
    text: str, cluster: str, default_host: str | None = None, default_ts_ms: int | None = None
) -> IngestReport:
    """One text-exposition scrape (dcgm-exporter, node_exporter) -> samples."""
    result = parse_prometheus_text(text, cluster, default_host, default_ts_ms)
    return write_samples(result, "prometheus", cluster.strip(), "ingest:prometheus")


def parse_remote_write(body: bytes, cluster: str) -> ParsedSamples:
    cluster = _check_cluster(cluster)
    catalog_store.refresh()  # user aliases (rate-limited: a clock check per call)
    # Labels not stored are counted (per label set, cached); merged series are not looked for
    # here: this is the hot path (that check costs ~0.3 us a row), and Prometheus' relabelling
    # decides the labels a push carries.
    with inventory.collecting() as found:
        result = normalize.decode_to_table(body, cluster=cluster)
    result = _readings(result._replace(inventory=tuple(found)))
    return ParsedSamples(result.table, result.dropped_blank, result.unknown_metrics,
                         dict(result.labels_not_stored), 0, result.inventory)


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


class KernelParsed(NamedTuple):
    """A parsed kernel log with what the report says about it."""
    xids: list
    skipped: int
    links: tuple
    skipped_by_reason: dict[str, int]
    received_lines: list[int]
    time_zone: dict


_SKIP_REASONS = (
    ("link up/down lines not understood (NVRM Xid and mlx5_core link lines are read)",
     re.compile(r"\blink\b.*\b(down|up)\b", re.I)),
    ("NVSwitch SXid lines (only NVRM Xid lines are read)", re.compile(r"\bSXid\b")),
    ("other NVRM driver messages", re.compile(r"NVRM:")),
)


def _skipped_by_reason(text: str, read_lines: set[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip() or lineno in read_lines:
            continue
        reason = next((r for r, rx in _SKIP_REASONS if rx.search(line)), "other lines (not NVRM Xid)")
        out[reason] = out.get(reason, 0) + 1
    return out


def parse_kernel_log(
    text: str, cluster: str, host: str | None = None, year: int | None = None,
    now_ts_ms: int | None = None, boot_ts_ms: int | None = None, tz: str | None = None,
) -> tuple[pa.Table, KernelParsed, list[str]]:
    """``tz`` names the zone of wall-clock times without one (``dmesg -T``, syslog)."""
    cluster = _check_cluster(cluster)
    local = localtime.Localizer(localtime.zone(tz))
    parsed = kernel_log.parse_kernel_log(text, host=host or None, year=year, now_ts_ms=now_ts_ms, boot_ts_ms=boot_ts_ms)
    if local.tz is not None and (parsed.xids or parsed.links):
        lines = text.split("\n")

        def localised(items):
            return [x._replace(ts_ms=local.wall_ms_to_ms(x.ts_ms, x.line))
                    if x.ts_ms is not None and kernel_log.wall_clock_prefix(lines[x.line - 1]) else x
                    for x in items]

        parsed = parsed._replace(xids=localised(parsed.xids), links=tuple(localised(parsed.links)))
    read = {x.line for x in (*parsed.xids, *parsed.links)}
    parsed = KernelParsed(parsed.xids, parsed.skipped, parsed.links,
                          _skipped_by_reason(text, read) if parsed.skipped else {},
                          sorted(x.line for x in (*parsed.xids, *parsed.links) if x.ts_ms is None), local.notes())
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
    now_ts_ms: int | None = None, boot_ts_ms: int | None = None, tz: str | None = None,
) -> IngestReport:
    """dmesg / journal / syslog text -> one ``events`` row (kind xid) per ``NVRM: Xid`` line, and one
    (kind link_down / link_up / port_module) per mlx5 link or port-module line.

    Lines without a wall-clock time (plain ``dmesg``, bare lines) get ``boot_ts_ms`` +
    uptime when the boot time is given, else the receive time, marked
    ``attributes['time_source'] = 'received'``."""
    return write_kernel_events(*parse_kernel_log(text, cluster, host, year, now_ts_ms, boot_ts_ms, tz), cluster=cluster)


def write_kernel_events(table: pa.Table, parsed: KernelParsed, unmapped: list[str], *,
                        cluster: str, skip_expired: bool = False) -> IngestReport:
    table, expired = _retained(table, "events", skip_expired)  # before anything is written
    written = writer.write("events", table, tag="ingest:kernel-log")
    received = parsed.received_lines
    return IngestReport(format="kernel-log", cluster=cluster.strip(), rows={"events": written.rows},
                        skipped_lines=parsed.skipped, unmapped_pci=unmapped, expired=expired,
                        skipped=parsed.skipped_by_reason, time_zone=parsed.time_zone,
                        receive_time={"count": len(received), "lines": received[:50]} if received else {})


# --- sacct -------------------------------------------------------------------------------


def parse_sacct(text: str, cluster: str, observed_ts_ms: int | None = None, tz: str | None = None,
                notes: dict | None = None) -> tuple[pa.Table, pa.Table]:
    """``tz`` names the zone sacct printed its (zone-less) times in; ``notes`` (a dict) receives
    the report's ``time_zone`` part."""
    cluster = _check_cluster(cluster)
    local = localtime.Localizer(localtime.zone(tz))
    rows = sacct.parse_sacct(text)
    if local.tz is not None:
        rows = [r._replace(submit_ms=local.wall_ms_to_ms(r.submit_ms, r.line),
                           start_ms=local.wall_ms_to_ms(r.start_ms, r.line),
                           end_ms=local.wall_ms_to_ms(r.end_ms, r.line)) for r in rows]
    if notes is not None:
        notes.update(local.notes())
    jobs, job_hosts = sacct.to_tables(rows, cluster, observed_ts_ms if observed_ts_ms is not None else _now_ms())
    limits.check_table("jobs", jobs, line_of=lambda i: rows[i].line)
    limits.check_table("job_hosts", job_hosts)
    return writer.conform("jobs", jobs), writer.conform("job_hosts", job_hosts)


def ingest_sacct(text: str, cluster: str, observed_ts_ms: int | None = None, tz: str | None = None) -> IngestReport:
    """``sacct -P`` output (header first) -> jobs and job -> host allocations."""
    notes: dict = {}
    jobs, job_hosts = parse_sacct(text, cluster, observed_ts_ms, tz, notes)
    return write_sacct(text, cluster, jobs, job_hosts, time_zone=notes)


def write_sacct(text: str, cluster: str, jobs: pa.Table, job_hosts: pa.Table, *,
                time_zone: dict | None = None) -> IngestReport:
    # The version column holds the observation time, so the content differs on a retry:
    # the tokens come from the input instead, which makes a retry (even after only
    # `jobs` landed) idempotent.
    token = _batch_token("sacct", cluster.strip(), text, (time_zone or {}).get("tz", "UTC"))
    written_jobs = writer.write("jobs", jobs, token=token, tag="ingest:sacct")
    written_hosts = writer.write("job_hosts", job_hosts, token=token, tag="ingest:sacct")
    return IngestReport(format="sacct", cluster=cluster.strip(),
                        rows={"jobs": written_jobs.rows, "job_hosts": written_hosts.rows},
                        time_zone=time_zone or {})


# --- bulk --------------------------------------------------------------------------------


class BulkParsed(NamedTuple):
    table: pa.Table  # conformed to the target table's schema
    dropped_blank: int
    time_zone: dict
    aliases: dict[str, str]  # source name -> catalog name (samples)
    unknown_metrics: list[str]
    kept: tuple = ()  # series_labels entries of the distinct label sets of a ``labels`` column
    labels_not_stored: dict[str, int] = {}  # label -> series carrying it (never mutated)


def parse_bulk(data: bytes, fmt: str, table: str = "samples", *, cluster: str, tz: str | None = None) -> BulkParsed:
    """Read and validate a bulk file: times without a zone in ``tz`` (UTC without it); for
    samples, metric names the catalog knows as aliases are stored under the catalog name,
    scaled as the Prometheus path scales them (``DCGM_FI_DEV_GPU_UTIL`` -> ``gpu.util``)."""
    cluster = _check_cluster(cluster)
    catalog_store.refresh()
    local = localtime.Localizer(localtime.zone(tz))
    result = bulk.read_bulk(data, fmt, table, cluster=cluster, local=local)
    out, aliases, unknown = result.table, {}, []
    if table == "samples" and out.num_rows:
        out, aliases, unknown = _resolve_metric_names(out)
    kept, tally = _kept_label_sets(out, result.labels) if result.labels is not None else ((), {})
    # the one rule for readings (limits): non-finite values are no data; times and names checked
    out, dropped = limits.drop_no_data(out) if table == "samples" else (out, 0)
    limits.check_table(table, out)
    return BulkParsed(writer.conform(table, out), result.dropped_blank + dropped, local.notes(), aliases, unknown,
                      kept, tally)


def _kept_label_sets(table: pa.Table, labels: pa.Array) -> tuple[tuple, dict[str, int]]:
    """(series_labels entries, label -> series) for the distinct (series, labels) of a backfill."""
    has = pc.not_equal(labels, "")
    if not pc.any(has).as_py():
        return (), {}
    cols = [table.column(c).combine_chunks().filter(has) for c in ("cluster", "host", "component", "metric")]
    codes = pc.dictionary_encode(pc.binary_join_element_wise(*cols, labels.filter(has), "\x00"))
    entries = []
    for text in codes.dictionary.to_pylist():
        cluster, host, component, metric, pairs = text.split("\x00")
        entries.append(series_labels.entry(cluster, host, component, metric, tuple(map(tuple, json.loads(pairs)))))
    return tuple(entries), label_rules.tally([[k for k, _ in e.fields] for e in entries], [1] * len(entries))


def _resolve_metric_names(table: pa.Table) -> tuple[pa.Table, dict[str, str], list[str]]:
    names = pc.unique(table.column("metric")).to_pylist()
    canonical, scales, aliases, unknown = [], [], {}, []
    for name in names:
        metric = catalog.resolve(name)
        if metric is None:
            canonical.append(name)
            scales.append(1.0)
            unknown.append(name)
            continue
        canonical.append(metric.name)
        scales.append(float(metric.scale_for(name)))
        if metric.name != name:
            aliases[name] = metric.name
    if not aliases:
        return table, {}, sorted(unknown)
    idx = pc.index_in(table.column("metric"), value_set=pa.array(names, pa.string()))
    metric = pa.array(canonical, pa.string()).take(idx)
    value = table.column("value")
    if any(x != 1.0 for x in scales):
        value = pc.multiply(value, pa.array(scales, pa.float64()).take(idx))
    table = table.set_column(table.schema.get_field_index("metric"), "metric", metric)
    table = table.set_column(table.schema.get_field_index("value"), "value", value)
    return table, aliases, sorted(unknown)


def write_bulk(parsed: BulkParsed, fmt: str, table: str = "samples", *, cluster: str,
               skip_expired: bool = False) -> IngestReport:
    conformed, expired = parsed.table, 0
    if table in ("samples", "events"):
        conformed, expired = _retained(conformed, table, skip_expired)
    written = writer.write(table, conformed, tag=f"ingest:{fmt}")
    rows = {table: written.rows, **inventory.write(parsed.kept)}  # the labels column's values
    return IngestReport(format=fmt, cluster=cluster.strip(), rows=rows,
                        dropped_blank=parsed.dropped_blank, expired=expired, time_zone=parsed.time_zone,
                        aliases=parsed.aliases, unknown_metrics=parsed.unknown_metrics,
                        labels_not_stored=dict(parsed.labels_not_stored))


def ingest_bulk(path_or_bytes: str | Path | bytes, fmt: str, table: str = "samples", *,
                cluster: str, skip_expired: bool = False, tz: str | None = None) -> IngestReport:
    """A CSV / JSON Lines / Parquet file in the documented schema (see ``telemetry.ingestion.bulk``);
    ``cluster`` fills rows whose cluster column is absent or empty."""
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    parsed = parse_bulk(data, fmt, table, cluster=cluster, tz=tz)
    return write_bulk(parsed, fmt, table, cluster=cluster, skip_expired=skip_expired)
