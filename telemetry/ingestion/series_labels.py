"""Labels kept beside the series: what no ``samples`` column or inventory row stores.

A series' labels name its host and component (``telemetry.ingestion.labels``) and some feed the
inventory; every other label with a value (``slot="3"``, node_cpu_seconds_total's ``mode``) is
not part of the row key. Its value is kept in the ``series_labels`` table (migration 0009): one
row per distinct label set per series (cluster, host, component, metric), so series that merged
into one row key because they differ only in such labels still show each label set.

Where ingestion resolves a label set for the first time (``normalize._resolve``; backfills per
distinct row, ``service.parse_bulk``) it notes an ``inventory.Entry`` of table
``series_labels`` (the kept labels in ``fields``, the stored metric in ``metric``); the noted
entries travel with the inventory's (per request, per default host for host-less text series)
and ``write`` stores them: label sets this process already knows cost nothing (a warm cache
resolves nothing, so it notes nothing either); the rest are written together with what
concurrent requests noted meanwhile, one read and one insert per group
(``group_commit.Batcher``). A set already stored keeps its row (``first_seen``); ``last_seen``
is moved on when a process meets the set again after ``REFRESH_MS`` (its first sight in that
process: the samples say when the series last reported, not this column).
"""
from __future__ import annotations

import threading
import time

import pyarrow as pa

from telemetry import schema, store, writer
from telemetry.ingestion import group_commit

TABLE = "series_labels"
REFRESH_MS = 86_400_000  # last_seen moves on at most once a day per process
_KNOWN_MAX = 1_000_000  # keys this process knows are stored (~200 B each); starts over past that
_known: set[tuple] = set()
_known_lock = threading.Lock()


def entry(cluster: str, host: str, component: str, metric: str, kept: tuple[tuple[str, str], ...]):
    """The inventory entry noting ``kept`` (label, value) pairs, sorted, for one series."""
    from telemetry.ingestion.inventory import Entry  # inventory dispatches its write here

    return Entry(TABLE, cluster, host, component, kept, metric)


def key_of(e) -> tuple:
    return (e.cluster, e.host, e.component, e.metric, tuple(e.fields))


def forget() -> None:
    with _known_lock:
        _known.clear()


def write(entries, *, now_ms: int | None = None) -> dict[str, int]:
    """Store the label sets of ``entries`` this process does not know to be stored; {table: rows}."""
    with _known_lock:
        keys = {key_of(e) for e in entries} - _known
    if not keys:
        return {}
    n = _batcher.submit(group_commit.Entry("", (keys, now_ms), weight=len(keys)))
    return {TABLE: n} if n else {}


def _flush(batch) -> None:
    keys = set().union(*(e.table[0] for e in batch))
    stamps = [now for _, now in (e.table for e in batch) if now is not None]
    written = _write_rows(keys, max(stamps) if stamps else int(time.time() * 1000))
    for e in batch:
        e.result = len(e.table[0] & written)


_batcher = group_commit.Batcher(_flush, max_weight=50_000)


def _write_rows(keys: set[tuple], now_ms: int) -> set[tuple]:
    stored = _stored(keys)
    rows = []
    for key in keys:
        first, last = stored.get(key, (None, None))
        if first is None or now_ms - last >= REFRESH_MS:
            rows.append((key, first if first is not None else now_ms))
    if rows:
        stamp = pa.array([now_ms] * len(rows), pa.int64()).cast(schema.TS)
        table = pa.table({
            "cluster": [k[0] for k, _ in rows], "host": [k[1] for k, _ in rows],
            "component": [k[2] for k, _ in rows], "metric": [k[3] for k, _ in rows],
            "labels": pa.array([list(k[4]) for k, _ in rows], pa.map_(pa.string(), pa.string())),
            "first_seen": pa.array([f for _, f in rows], pa.int64()).cast(schema.TS),
            "last_seen": stamp,
        })
        writer.write(TABLE, writer.conform(TABLE, table), tag="ingest:series-labels")
    with _known_lock:
        if len(_known) + len(keys) > _KNOWN_MAX:
            _known.clear()
        _known.update(keys)
    return {k for k, _ in rows}


def _stored(keys: set[tuple]) -> dict[tuple, tuple[int, int]]:
    """key -> (first_seen, last_seen) in ms of the rows already stored for ``keys``' series."""
    rows = store.query_rows(
        "SELECT cluster, host, component, metric, labels, toUnixTimestamp64Milli(first_seen), "
        "toUnixTimestamp64Milli(last_seen) FROM series_labels FINAL "
        "WHERE cluster IN {c:Array(String)} AND host IN {h:Array(String)} AND metric IN {m:Array(String)}",
        {"c": sorted({k[0] for k in keys}), "h": sorted({k[1] for k in keys}), "m": sorted({k[3] for k in keys})},
        tag="ingest:series-labels:current")
    out = {}
    for cluster, host, component, metric, labels, first, last in rows:
        pairs = tuple(sorted(labels.items() if isinstance(labels, dict) else labels))
        out[(cluster, host, component, metric, pairs)] = (int(first), int(last))
    return out


def for_host(cluster: str, host: str) -> dict[tuple[str, str], list[dict[str, str]]]:
    """(metric, component) -> the label sets kept for that series of ``host`` (sorted)."""
    rows = store.query_rows(
        "SELECT metric, component, labels FROM series_labels FINAL "
        "WHERE cluster = {c:String} AND host = {h:String} ORDER BY metric, component, labels",
        {"c": cluster, "h": host}, tag="host.series-labels")
    out: dict[tuple[str, str], list[dict[str, str]]] = {}
    for metric, component, labels in rows:
        out.setdefault((metric, component), []).append(dict(labels))
    return out
