"""The one way rows get into the telemetry store.

Every ingestion path (HTTP endpoints, the ``ingest`` command, the fleet
simulator) hands Arrow tables in the schemas of ``telemetry.schema`` to
``write``. Tables are validated and cast before anything is sent, and each
insert carries a de-duplication token derived from its content, so a retried
identical batch does not duplicate rows (ClickHouse drops the repeated blocks).
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from telemetry import schema, store


class SchemaMismatch(ValueError):
    pass


@dataclass
class WriteResult:
    table: str
    rows: int
    token: str


def conform(table_name: str, table: pa.Table) -> pa.Table:
    """Reorder and cast ``table`` to the declared schema; name what does not fit."""
    try:
        target = schema.TABLES[table_name]
    except KeyError:
        raise SchemaMismatch(f"unknown telemetry table {table_name!r}") from None
    if table.schema.equals(target):  # already as declared (every push, twice): nothing to do
        return table
    missing = [f.name for f in target if f.name not in table.column_names]
    extra = [name for name in table.column_names if target.get_field_index(name) < 0]
    if missing or extra:
        raise SchemaMismatch(
            f"{table_name}: " + "; ".join(
                part for part in (
                    f"missing column(s) {', '.join(missing)}" if missing else "",
                    f"unexpected column(s) {', '.join(extra)}" if extra else "",
                ) if part
            )
        )
    table = table.select(target.names)
    if table.schema.equals(target):
        return table
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatch(f"{table_name}: {exc}") from None


# ClickHouse refuses an insert block that touches more than max_partitions_per_insert_block
# (100) partitions, and samples are partitioned by day: a backfill of a year would fail with
# TOO_MANY_PARTS. Batches spanning more days go in as several inserts of at most this many
# days each (events, by month, then touch at most 4 partitions per insert).
DAYS_PER_INSERT = 90
_DAY_MS = 86_400_000


def split_by_days(table: pa.Table, days: int = DAYS_PER_INSERT) -> list[pa.Table]:
    """``table`` as pieces each within ``days`` distinct UTC days (in day order), or ``[table]``
    when it already is. Deterministic, so a retried batch splits the same way."""
    if "ts" not in table.column_names or table.num_rows == 0:
        return [table]
    day = table.column("ts").cast(pa.int64()).to_numpy() // _DAY_MS
    if int(day.max()) - int(day.min()) < days:
        return [table]
    order = np.argsort(day, kind="stable")  # rows of a day keep their order
    ordered = table.take(pa.array(order))
    sorted_days = day[order]
    unique_days = np.unique(sorted_days)
    cuts = np.searchsorted(sorted_days, unique_days[::days][1:]).tolist()
    starts, ends = [0, *cuts], [*cuts, table.num_rows]
    return [ordered.slice(a, b - a) for a, b in zip(starts, ends)]


def content_token(table: pa.Table) -> str:
    """A digest of the table's rows: the Arrow IPC form of each column's rows, copied out of any
    slice first (a slice's buffers are its parent's, so hashing them would give two halves of one
    table the same token, and the same rows cut from two tables different ones)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, column in zip(table.column_names, table.columns):
        # one compact array per column (a copy of the slice's rows), however the table is chunked
        values = pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
        digest.update(memoryview(pa.record_batch([values], [name]).serialize()))
    digest.update(str(table.num_rows).encode())
    return digest.hexdigest()


# Large batches are inserted as a few slices in parallel, each on its own thread's client:
# the rollup views make an insert CPU-bound, and one insert uses about one core. Each slice
# carries its own deterministic token, so a retry of the whole batch (same content, same
# split) is still stored once, even if only some slices had landed.
PARALLEL_MIN_ROWS = 50_000
PARALLEL_SLICES = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _insert_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(PARALLEL_SLICES, thread_name_prefix="telemetry-insert")
        return _pool


# A ClickHouse server merges small inserts from many web processes itself when asked to:
# async_insert buffers them server-side, wait_for_async_insert answers only once the buffer
# holding the rows is written (so a 2xx still means stored), async_insert_deduplicate keeps
# the de-duplication tokens working on Replicated tables. chDB ignores these settings.
ASYNC_INSERT_SETTINGS = {"async_insert": 1, "wait_for_async_insert": 1, "async_insert_deduplicate": 1}


def insert_settings(table_name: str, token: str, tag: str, *, async_insert: bool = False) -> dict:
    settings = {
        "insert_deduplication_token": f"{table_name}:{token}",
        "deduplicate_blocks_in_dependent_materialized_views": 1,
        "log_comment": tag,
    }
    if async_insert:
        settings.update(ASYNC_INSERT_SETTINGS)
    return settings


def _insert(table_name: str, table: pa.Table, token: str, tag: str, async_insert: bool = False) -> None:
    settings = insert_settings(table_name, token, tag, async_insert=async_insert)
    store.insert_arrow(table_name, table, settings=settings)  # with the store's client-side bounds


# A group insert this large is a block big enough for the view to roll on its own: feeding it
# later would be a second insert of as many rows (bench ingest, 102,400-row text bodies: 382,000
# -> 313,000 rows/s when they were deferred too).
DEFER_MAX_ROWS = PARALLEL_MIN_ROWS


def write(table_name: str, table: pa.Table, *, token: str | None = None, tag: str = "writer",
          async_insert: bool = False, defer_rollup: bool = False) -> WriteResult:
    """Conform and insert ``table`` (``async_insert``: let a ClickHouse server batch it further,
    answering once stored; see ``ASYNC_INSERT_SETTINGS``). ``defer_rollup`` (samples only): the
    rollup view skips these rows and this process's ``telemetry.rollup`` buffer feeds them to the
    rollup later with other pushes (the group commit's streaming inserts in the embedded store),
    unless the table holds ``DEFER_MAX_ROWS`` or more."""
    table = conform(table_name, table)
    if table.num_rows == 0:
        return WriteResult(table_name, 0, "")
    if defer_rollup and table_name == "samples" and table.num_rows < DEFER_MAX_ROWS:
        from telemetry import rollup

        held = rollup.buffer()
        lines = held.note(table)  # journalled first: a crash after the insert still rolls them at restart
        result = write(table_name, table, token=token, tag=rollup.deferred_tag(tag), async_insert=async_insert)
        held.add(table, lines)  # only once every piece is stored (a failed write is retried whole)
        return result
    token = token or content_token(table)
    pieces = split_by_days(table)
    if len(pieces) > 1:  # a backfill: one insert per span of days, each with its own token
        for k, piece in enumerate(pieces):
            write(table_name, piece, token=f"{token}:d{k}/{len(pieces)}", tag=tag, async_insert=async_insert)
        return WriteResult(table_name, table.num_rows, token)
    n = table.num_rows
    if n < PARALLEL_MIN_ROWS or async_insert:
        _insert(table_name, table, token, tag, async_insert)
        return WriteResult(table_name, n, token)
    size = -(-n // PARALLEL_SLICES)
    parts = [(table.slice(i, size), f"{token}:{k}/{PARALLEL_SLICES}") for k, i in enumerate(range(0, n, size))]
    futures = [_insert_pool().submit(_insert, table_name, part, part_token, tag) for part, part_token in parts]
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return WriteResult(table_name, n, token)
