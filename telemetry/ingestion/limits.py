"""Bounds on what one ingest batch may expand into, and the one rule for readings.

Every ingestion path (the HTTP endpoints, the ``ingest`` command) goes through
these checks, so a body cannot make the server do unbounded work and every path
stores, drops or refuses the same values:

- **compressed bodies** are decoded to their very end (a gzip stream cut short
  is refused, not stored as far as it went) and never past the body limit
  (``decode_gzip``); a snappy body's declared size is checked before it is
  decompressed (``check_snappy_size``).
- **Slurm node lists**: ``NodeList=x[0-999][0-999]`` is one million hosts in 21
  bytes; a job may expand to at most ``MAX_HOSTS_PER_JOB`` hosts and a batch to
  ``MAX_HOSTS_PER_BATCH`` job -> host rows, counted *before* anything is
  expanded.
- **readings** (``apply_rules``): a value that is NaN (incl. Prometheus stale
  markers), +Inf or -Inf (incl. a number too large for a float64, such as
  ``1e400``, which reads as infinite) is "no data": dropped and counted in the
  report's ``dropped_blank``. A time before 2000-01-01 or more than one day
  ahead of the receiving clock is a sender's broken clock: the batch is refused
  (400 naming the row and ``ts``), as is a name outside ``telemetry.names``
  (checked once per label set in ``normalize`` for scrapes and remote-write,
  where a per-row check of 100,000 rows cost ~40 ms; per batch elsewhere).

A refusal is an ``IngestError`` (400); a body or an expansion past a size limit
is ``TooLarge`` (413), both naming the field and the limit.
"""
from __future__ import annotations

import time
import zlib
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from telemetry import names
from telemetry.ingestion.errors import IngestError

MAX_HOSTS_PER_JOB = 100_000  # 800,000 GPUs at 8 per host: beyond any cluster built
MAX_HOSTS_PER_BATCH = 250_000  # job -> host rows per sacct batch (about 100 MB while parsed)
TS_MIN_MS = int(datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
TS_MAX_AHEAD_MS = 86_400_000  # one day: clocks drift, time zones get confused; years do not
CLUSTER_MAX = 200

LIMITS_DOC = {  # shown in the README's limits table; a test keeps the two in step
    "hosts per job (sacct NodeList, NNodes)": MAX_HOSTS_PER_JOB,
    "job -> host rows per sacct batch": MAX_HOSTS_PER_BATCH,
}


class TooLarge(IngestError):
    """The body, or what it expands into, is over a size limit: HTTP 413."""


def now_ms() -> int:
    return int(time.time() * 1000)


def ts_window(now: int | None = None) -> tuple[int, int]:
    """[first, last] accepted reading time in ms since the epoch."""
    return TS_MIN_MS, (now if now is not None else now_ms()) + TS_MAX_AHEAD_MS


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms since the epoch"


def check_ts(ms: int, field: str, line: int | None = None) -> int:
    """``ms`` if it lies in the readings window, else an ``IngestError`` naming ``field``."""
    first, last = ts_window()
    if not first <= ms <= last:
        raise IngestError(
            f"time {_iso(ms)} is outside the accepted window [2000-01-01, now + 1 day]", line=line, field=field
        )
    return ms


# --- compressed bodies ---------------------------------------------------------------------


def decode_gzip(data: bytes, limit: int) -> bytes:
    """The whole content of a gzip body (one or more members), at most ``limit`` bytes.

    ``zlib`` happily returns what it could inflate from a stream cut short; only
    ``eof`` says the member's end (and its CRC and length) was reached."""
    out = bytearray()
    rest = data
    while True:
        dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += dec.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise IngestError(f"body is not valid gzip: {exc}", field="Content-Encoding") from None
        if len(out) > limit or dec.unconsumed_tail:
            raise TooLarge(f"decompressed body is over the limit of {limit} bytes: split the batch", field="body")
        if not dec.eof:
            raise IngestError(
                f"gzip body is truncated: the stream ends after {len(data)} bytes without its end marker "
                "(nothing stored; resend the whole body)", field="body",
            )
        rest = dec.unused_data
        if not rest:
            return bytes(out)


def check_snappy_size(body: bytes, limit: int) -> None:
    """Refuse a snappy block whose header declares more than ``limit`` bytes, before inflating it."""
    size = 0
    for shift, byte in zip(range(0, 35, 7), body[:5]):
        size |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
    if size > limit:
        raise TooLarge(f"snappy body declares {size} bytes decompressed, over the limit of {limit} bytes",
                       field="body")


# --- Slurm node lists ----------------------------------------------------------------------


def check_job_hosts(count: int, field: str, line: int | None) -> None:
    if count > MAX_HOSTS_PER_JOB:
        raise TooLarge(f"{count} hosts in one job is over the limit of {MAX_HOSTS_PER_JOB} hosts per job",
                       line=line, field=field)


def check_batch_hosts(count: int, line: int | None) -> None:
    if count > MAX_HOSTS_PER_BATCH:
        raise TooLarge(f"the batch allocates over {MAX_HOSTS_PER_BATCH} job -> host rows "
                       f"(limit per batch): split it", line=line, field="NodeList")


# --- readings and names ---------------------------------------------------------------------


_TS_COLUMNS = {"samples": ("ts",), "events": ("ts",), "jobs": ("submit_ts", "start_ts", "end_ts"),
               "job_hosts": ("start_ts", "end_ts")}
_NAME_COLUMNS = ("host", "component", "metric")


def _row_note(i: int) -> str:
    return f"row {i + 1} of the batch"


def drop_no_data(table: pa.Table) -> tuple[pa.Table, int]:
    """Samples without a finite value removed; (table, how many)."""
    if table.num_rows == 0:
        return table, 0
    finite = pc.fill_null(pc.is_finite(table.column("value")), False)
    kept = pc.sum(finite).as_py() or 0
    if kept == table.num_rows:
        return table, 0
    return table.filter(finite), table.num_rows - kept


_NAMES_OK: set[tuple[str, str]] = set()  # (field, value) found allowed: label sets repeat them
_NAMES_OK_MAX = 200_000


def check_names(**values: str) -> None:
    """Refuse a name outside the grammar: ``check_names(host=..., component=..., metric=..., cluster=...)``."""
    for field, value in values.items():
        if (field, value) in _NAMES_OK:
            continue
        if field == "cluster":
            if not (len(value) <= CLUSTER_MAX and names.is_host(value)):
                raise IngestError(f"cluster name {names.shown(value)} is not allowed (letters, digits and _ . : - "
                                  f"only, 1 to {CLUSTER_MAX} characters)", field="cluster")
        else:
            ok, rule = names.RULES[field]
            if not ok(value):
                raise IngestError(f"{field} name {names.shown(value)} is not allowed ({rule})", field=field)
        if len(_NAMES_OK) >= _NAMES_OK_MAX:
            _NAMES_OK.clear()
        _NAMES_OK.add((field, value))


def check_table(table_name: str, table: pa.Table, *, line_of=None, names_checked: bool = False,
                ts_span: tuple[int, int] | None = None) -> None:
    """Refuse a batch with a reading outside the time window or a name outside the grammar.

    ``line_of(row)`` gives the input line of a row when the format has lines. ``ts_span``: the
    lowest and highest ``ts`` where the caller knows them (a bound: the rows are read only when
    it leaves the window, to name the row)."""
    if table.num_rows == 0:
        return

    def where(i: int) -> dict:
        line = line_of(i) if line_of is not None else None
        return {"line": line}

    first, last = ts_window()
    known = ts_span is not None and first <= ts_span[0] and ts_span[1] <= last
    for col in _TS_COLUMNS.get(table_name, ()):
        if known and col == "ts":
            continue
        values = table.column(col).cast(pa.int64())
        lo_hi = pc.min_max(values).as_py()
        if lo_hi["min"] is None or (first <= lo_hi["min"] and lo_hi["max"] <= last):
            continue
        bad = pc.or_(pc.less(values, first), pc.greater(values, last))
        i = pc.index(bad, True).as_py()
        ms = values[i].as_py()
        raise IngestError(f"{_row_note(i)}: time {_iso(ms)} is outside the accepted window "
                          "[2000-01-01, now + 1 day]", field=col, **where(i))
    for col in () if names_checked else _NAME_COLUMNS:
        if col not in table.column_names:
            continue
        ok, rule = names.RULES[col]
        column = table.column(col)
        for value in pc.unique(column).to_pylist():
            if value is None or ok(value):
                continue
            i = pc.index(column, value).as_py()
            raise IngestError(f"{_row_note(i)}: {col} name {names.shown(value)} is not allowed ({rule})",
                              field=col, **where(i))
    if "cluster" in table.column_names and not names_checked:
        for value in pc.unique(table.column("cluster")).to_pylist():
            if value is not None and not (len(value) <= CLUSTER_MAX and names.is_host(value)):
                raise IngestError(f"cluster name {names.shown(value)} is not allowed "
                                  f"(letters, digits and _ . : - only, 1 to {CLUSTER_MAX} characters)",
                                  field="cluster")
