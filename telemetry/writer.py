"""The one way rows get into the telemetry store.

Every ingestion path (HTTP endpoints, the ``ingest`` command, the fleet
simulator) hands Arrow tables in the schemas of ``telemetry.schema`` to
``write``. Tables are validated and cast before anything is sent, and each
insert carries a de-duplication token derived from its content, so a retried
identical batch does not duplicate rows (ClickHouse drops the repeated blocks).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

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


def content_token(table: pa.Table) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for batch in table.to_batches():
        for column in batch.columns:
            for buffer in column.buffers():
                if buffer is not None:
                    digest.update(memoryview(buffer))
    digest.update(str(table.num_rows).encode())
    return digest.hexdigest()


def write(table_name: str, table: pa.Table, *, token: str | None = None, tag: str = "writer") -> WriteResult:
    table = conform(table_name, table)
    if table.num_rows == 0:
        return WriteResult(table_name, 0, "")
    token = token or content_token(table)
    settings = {
        "insert_deduplication_token": f"{table_name}:{token}",
        "deduplicate_blocks_in_dependent_materialized_views": 1,
        "log_comment": tag,
    }
    store.get_client().insert_arrow(table_name, table, settings=settings)
    return WriteResult(table_name, table.num_rows, token)
