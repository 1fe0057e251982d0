"""Readers for bulk backfills in the documented schema: CSV, JSON Lines and Parquet.

A bulk file holds rows of one telemetry table (``samples`` by default) with the
column names of ``telemetry.schema`` (order free). ``read_bulk(data, fmt,
table, cluster=...)`` returns an Arrow table in that schema, or raises
``IngestError`` naming the line (CSV/JSONL: the file line; Parquet: the
1-based row), the column and the reason. Nothing is written here.

Columns:

- ``cluster`` may be left out (or empty): the ``cluster`` argument fills it.
- ``component`` (samples, events) may be left out: '' (host level).
- ``attributes`` (events) may be left out; in CSV it is a JSON object text.
- ``code`` (events) may be left out: 0. ``end_ts`` (jobs, job_hosts) and the
  other nullable job times may be empty.
- Samples may name their host and component with the labels the other paths read
  (``telemetry.ingestion.labels``) instead of ``host`` / ``component`` columns:
  ``hostname``, ``Hostname``, ``instance`` and the device labels (``gpu``, ``device``,
  ``port``, ``interface``, ``cpu``, ...), read row by row as a scrape's labels are
  (``gpu=3`` -> ``gpu3``, ``device=mlx5_0,port=1`` -> ``mlx5_0/1``; a non-empty
  ``component`` wins).
- Samples may carry the series' other labels (those the catalog does not map, e.g. ``slot``)
  in a ``labels`` column: a JSON object (CSV: its text; Parquet: text or a map). They are not
  part of the series key: their values are kept in ``series_labels``, one row per distinct
  label set per series (``telemetry.ingestion.series_labels``). A label the other columns
  read (``gpu``, ``hostname``, ``cluster``, ...) is refused there by name: give it as a column.
- Any other missing column, or a column the table does not have, rejects the
  file (a typo must not silently drop data).
- Identity columns (``host``, ``metric``, ``job_id``, ...) must not be empty.

Times (``ts``, ``*_ts``, ``updated``) are ISO-8601 text (``2025-01-21T04:41:44Z``,
``2025-01-21 04:41:44.283+02:00``; without a zone they are UTC unless ``tz`` names their zone) or numbers
since the Unix epoch, whose unit is read from the magnitude: below 1e11
seconds, below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds.
Parquet timestamp columns are taken as they are (naive = UTC). With ``local`` (the
``tz`` option) times without a zone are that zone's wall clock instead; see
``telemetry.ingestion.localtime``.

Samples whose ``value`` is NaN (or empty in CSV) are "no data": they are dropped
and counted, never stored.
"""
from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timezone
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from telemetry import schema
from telemetry.ingestion import labels as label_rules
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.localtime import Localizer

FORMATS = ("csv", "jsonl", "parquet")

_OPTIONAL_DEFAULTS = {
    "cluster": None,  # filled from the argument
    "component": "",
    "attributes": None,
    "code": 0,
    "reason": "",
    "name": "",
    "user": "",
    "partition": "",
    "exit_code": "",
    "submit_ts": None,
    "start_ts": None,
    "end_ts": None,
    "n_hosts": 0,
    "n_gpus": 0,
    "rack": "",
    "leaf": "",
    "spine": "",
    "gpu_model": "",
    "driver_version": "",
    "firmware_version": "",
    "model": "",
    "serial": "",
    "uuid": "",
    "pci_bus_id": "",
    "firmware": "",
    "peer": "",
    "severity": "info",
    "message": "",
}
_NONEMPTY = {"host", "metric", "job_id", "source", "kind"}
_NULLABLE_TIMES = {"submit_ts", "start_ts", "end_ts"}


class BulkResult(NamedTuple):
    table: pa.Table
    dropped_blank: int
    labels: pa.Array | None = None  # samples: per row, its kept labels as sorted JSON pairs ('' = none)


def read_bulk(data: bytes, fmt: str, table: str = "samples", *, cluster: str,
              local: Localizer | None = None) -> BulkResult:
    """``local`` reads times without a zone as its zone's wall clock (and notes the
    ambiguous and missing ones); without it they are UTC."""
    if fmt not in FORMATS:
        raise IngestError(f"unknown bulk format {fmt!r}; choose one of {', '.join(FORMATS)}", field="format")
    if table not in schema.TABLES:
        raise IngestError(f"unknown table {table!r}; choose one of {', '.join(schema.TABLES)}", field="table")
    if fmt == "csv":
        raw, first_line = _read_csv(data), 2  # line 1 is the header
    elif fmt == "jsonl":
        raw, first_line = _read_jsonl(data, schema.TABLES[table]), None
    else:
        raw, first_line = _read_parquet(data), 1
    if raw.table.num_columns == 0:
        return BulkResult(schema.TABLES[table].empty_table(), 0)  # an empty file: nothing to store
    lines = raw.line_numbers if first_line is None else None
    header_line = 1 if fmt == "csv" else None
    return _conform(raw.table, table, cluster, lambda i: lines[i] if lines is not None else i + first_line,
                    header_line, local)


class _Raw(NamedTuple):
    table: pa.Table
    line_numbers: list[int] | None = None


def _read_csv(data: bytes) -> _Raw:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise IngestError("not UTF-8 text", line=data[: err.start].count(b"\n") + 1) from None
    try:
        names = next(csv.reader(io.StringIO(text, newline="")), [])
    except csv.Error as err:
        raise IngestError(f"not a CSV header: {err}", line=1) from None
    if not any(n.strip() for n in names):
        raise IngestError("empty CSV: the first line must be a header naming the columns", line=1)
    if len(set(names)) != len(names):
        raise IngestError("the header names a column twice", line=1)
    try:
        t = pacsv.read_csv(
            io.BytesIO(data),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        _find_csv_error(data, len(names), exc)
        raise IngestError(f"not valid CSV: {exc}") from None
    return _Raw(t)


def _find_csv_error(data: bytes, width: int, exc: Exception) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise IngestError("not UTF-8 text", line=line) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if row and len(row) != width:
                raise IngestError(f"expected {width} comma-separated fields (as in the header), got {len(row)}",
                                  line=reader.line_num)
    except csv.Error as err:
        raise IngestError(f"not valid CSV: {err}", line=reader.line_num) from None


def _read_jsonl(data: bytes, target: pa.Schema) -> _Raw:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise IngestError("not UTF-8 text", line=data[: err.start].count(b"\n") + 1) from None
    columns: dict[str, list] = {}
    lines: list[int] = []
    n = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise IngestError(f"not a JSON object: {exc}", line=lineno) from None
        if not isinstance(obj, dict):
            raise IngestError("each line must be one JSON object", line=lineno)
        for key, value in obj.items():
            col = columns.get(key)
            if col is None:
                col = columns[key] = [None] * n
            if key == "attributes":
                if value is not None and not isinstance(value, dict):
                    raise IngestError("attributes must be a JSON object", line=lineno, field=key)
                value = None if value is None else [(str(k), _attr_text(v)) for k, v in value.items()]
            elif key == "labels" and isinstance(value, dict):  # read as the CSV text is (_kept_labels)
                value = json.dumps(value)
            elif isinstance(value, (dict, list)):
                raise IngestError("a nested value where a plain value belongs", line=lineno, field=key)
            elif isinstance(value, bool):
                raise IngestError("true/false where a number or text belongs", line=lineno, field=key)
            col.append(value)
        n += 1
        lines.append(lineno)
        for col in columns.values():
            if len(col) < n:
                col.append(None)
    arrays = {}
    for key, values in columns.items():
        arrays[key] = _jsonl_column(key, values, lines)
    return _Raw(pa.table(arrays) if arrays else pa.table({}), lines)


def _attr_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _jsonl_column(key: str, values: list, lines: list[int]) -> pa.Array:
    if key == "attributes":
        return pa.array(values, type=pa.map_(pa.string(), pa.string()))
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float}:
        if kinds == {int} and all(v is None or -(2**63) <= v < 2**63 for v in values):
            return pa.array(values, type=pa.int64())
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    # Mixed: keep as text, the conversion step parses (and names the line of) each value.
    return pa.array([None if v is None else (v if isinstance(v, str) else repr(v)) for v in values], type=pa.string())


def _read_parquet(data: bytes) -> _Raw:
    try:
        return _Raw(pq.read_table(io.BytesIO(data)))
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"not a readable Parquet file: {exc}") from None


# --- conversion to the table schema -------------------------------------------------------


def _conform(raw: pa.Table, table_name: str, cluster: str, line_of, header_line: int | None,
             local: Localizer | None = None) -> BulkResult:
    target = schema.TABLES[table_name]
    labels = None
    if table_name == "samples":
        raw = _label_columns(raw, line_of)
        if "labels" in raw.column_names:
            labels = _kept_labels(raw.column("labels").combine_chunks(), line_of)
            raw = raw.drop_columns(["labels"])
    extra = [c for c in raw.column_names if target.get_field_index(c) < 0]
    if extra:
        raise IngestError(
            f"column(s) {', '.join(map(repr, extra))} not in table {table_name} "
            f"(its columns: {', '.join(target.names)}"
            + ("; host and component may also come as labels: hostname, instance, gpu, device, port, "
               "interface, cpu, ... (telemetry.ingestion.labels); any other label in a labels column, a JSON "
               "object kept in series_labels)" if table_name == "samples" else ")"),
            line=header_line, field=extra[0],
        )
    n = raw.num_rows
    out = []
    for field in target:
        if field.name in raw.column_names:
            col = raw.column(field.name).combine_chunks() if n else pa.array([], type=raw.schema.field(field.name).type)
            out.append(_convert(col, field, table_name, cluster, line_of, local))
        elif field.name in _OPTIONAL_DEFAULTS:
            out.append(_default_column(field, n, cluster))
        else:
            raise IngestError(f"required column missing for table {table_name}", line=header_line,
                              field=field.name)
    result = pa.Table.from_arrays(out, schema=target)
    dropped = 0
    if table_name == "samples" and n:
        keep = pc.invert(pc.is_nan(pc.fill_null(result.column("value"), float("nan"))))
        dropped = n - pc.sum(keep).as_py() if n else 0
        if dropped:
            result = result.filter(keep)
            labels = labels.filter(keep) if labels is not None else None
    return BulkResult(result, dropped, labels)


_LABEL_COLUMNS = frozenset(label_rules.HOST_LABELS) | label_rules.DEVICE_LABELS


def _label_columns(raw: pa.Table, line_of) -> pa.Table:
    """Samples whose host / component are given as labels: ``host`` and ``component`` columns
    from them, as ``telemetry.ingestion.labels`` reads a series' labels (once per distinct row)."""
    names = [c for c in raw.column_names if c in _LABEL_COLUMNS]
    if not set(names) - {"host", "component"}:
        return raw
    cols = []
    for c in names:
        col = raw.column(c).combine_chunks() if raw.num_rows else pa.array([], pa.string())
        if not pa.types.is_string(col.type):
            col = pc.cast(col, pa.string()) if not pa.types.is_null(col.type) else pa.array([None] * len(col), pa.string())
        cols.append(pc.fill_null(col, ""))
    joined = pc.binary_join_element_wise(*cols, "\x00") if len(cols) > 1 else cols[0]
    codes = pc.dictionary_encode(joined)
    hosts, components = [], []
    for i, text in enumerate(codes.dictionary.to_pylist()):
        labels = dict(zip(names, text.split("\x00")))
        host = label_rules.host_of(labels)
        if not host:
            row = pc.index(codes.indices, i).as_py()
            raise IngestError(f"no host: none of the columns {', '.join(label_rules.HOST_LABELS)} has a value",
                              line=line_of(row), field="host")
        hosts.append(host)
        components.append(label_rules.component_of(labels))
    keep = [c for c in raw.column_names if c not in _LABEL_COLUMNS]
    out = raw.select(keep)
    out = out.append_column("host", pa.array(hosts, pa.string()).take(codes.indices))
    return out.append_column("component", pa.array(components, pa.string()).take(codes.indices))


def _kept_labels(col: pa.Array, line_of) -> pa.Array:
    """The ``labels`` column (JSON object text, or a map) as sorted JSON [label, value] pairs per
    row ('' for none), each distinct value read once; labels another column reads are refused."""
    if pa.types.is_map(col.type):
        col = pa.array([None if v is None else json.dumps(dict(v)) for v in col.to_pylist()], pa.string())
    elif pa.types.is_null(col.type):
        col = pa.array([None] * len(col), pa.string())
    elif not pa.types.is_string(col.type):
        raise IngestError(f"labels must be a JSON object text or a map, not {col.type}", field="labels")
    codes = pc.dictionary_encode(pc.fill_null(col, ""))
    out = []
    for i, text in enumerate(codes.dictionary.to_pylist()):
        obj = {}
        if text.strip():
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):
                row = pc.index(codes.indices, i).as_py()
                raise IngestError('labels must be a JSON object text, e.g. {"slot": "3"}', line=line_of(row),
                                  field="labels")
        pairs = sorted((str(k), _attr_text(v)) for k, v in obj.items() if v not in (None, ""))
        read = [k for k, _ in pairs if k in label_rules.READ]
        if read:
            row = pc.index(codes.indices, i).as_py()
            raise IngestError(f"label {read[0]!r} is read from its own column (host, component, cluster or "
                              f"inventory), not kept in labels: give it as a column", line=line_of(row), field="labels")
        out.append(json.dumps(pairs) if pairs else "")
    return pa.array(out, pa.string()).take(codes.indices)


def _default_column(field: pa.Field, n: int, cluster: str) -> pa.Array:
    if field.name == "cluster":
        return pa.array([cluster] * n, type=field.type)
    if field.name == "attributes":
        return pa.array([[]] * n, type=field.type)
    value = _OPTIONAL_DEFAULTS[field.name]
    return pa.array([value] * n, type=field.type)


def _convert(col: pa.Array, field: pa.Field, table_name: str, cluster: str, line_of,
             local: Localizer | None = None) -> pa.Array:
    name, typ = field.name, field.type
    default = _OPTIONAL_DEFAULTS.get(name)
    if default is not None and not pa.types.is_map(typ) and col.null_count:
        # A JSONL line that leaves out an optional key means the same as a missing column.
        if pa.types.is_string(col.type) or pa.types.is_null(col.type):
            col = pc.fill_null(col.cast(pa.string()), str(default))
        else:
            col = pc.fill_null(col, pa.scalar(default).cast(col.type))
    if pa.types.is_string(typ):
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            if pa.types.is_null(col.type):
                col = pa.array([None] * len(col), type=pa.string())
            else:
                col = pc.cast(col, pa.string())
        col = pc.fill_null(col.cast(pa.string()), "")
        if name == "cluster":
            col = pc.if_else(pc.equal(col, ""), cluster, col)
        elif name in _NONEMPTY or (name == "component" and table_name == "components"):
            empty = pc.equal(col, "")
            if pc.any(empty).as_py():
                i = pc.index(empty, True).as_py()
                raise IngestError("must not be empty", line=line_of(i), field=name)
        return col
    if pa.types.is_timestamp(typ):
        return _to_timestamp(col, name, line_of, nullable=name in _NULLABLE_TIMES, local=local)
    if pa.types.is_floating(typ):
        return _to_number(col, typ, name, line_of, allow_nan=True)
    if pa.types.is_integer(typ):
        return _to_number(col, typ, name, line_of, allow_nan=False)
    if pa.types.is_map(typ):
        return _to_map(col, typ, name, line_of)
    raise IngestError(f"no conversion for column type {typ}", field=name)


def _to_number(col: pa.Array, typ: pa.DataType, name: str, line_of, *, allow_nan: bool) -> pa.Array:
    if pa.types.is_string(col.type):
        if allow_nan:
            col = pc.if_else(pc.equal(col, ""), None, col)
        else:
            col = pc.if_else(pc.equal(col, ""), "0" if name in _OPTIONAL_DEFAULTS else None, col)
    if col.null_count and not allow_nan:
        i = pc.index(pc.is_null(col), True).as_py()
        raise IngestError("missing value", line=line_of(i), field=name)
    if col.null_count and allow_nan:
        col = pc.fill_null(col.cast(pa.float64()) if not pa.types.is_string(col.type) else col,
                           "NaN" if pa.types.is_string(col.type) else float("nan"))
    try:
        return pc.cast(col, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = col.to_pylist()
    out = []
    for i, v in enumerate(values):
        try:
            f = float(v)
            if pa.types.is_integer(typ):
                if not f.is_integer():
                    raise ValueError
                pa.scalar(int(f), type=typ)  # range check
                out.append(int(f))
            else:
                out.append(f)
        except (TypeError, ValueError, OverflowError, pa.ArrowInvalid):
            kind = "a number" if pa.types.is_floating(typ) else f"a whole number that fits {typ}"
            raise IngestError(f"not {kind}: {v!r}", line=line_of(i), field=name) from None
    return pa.array(out, type=typ)


_MIN_MS, _MAX_MS = -2_208_988_800_000, 10_413_792_000_000  # DateTime64(3) range: 1900 .. 2300
_UNIT_LIMITS = ((1e11, 1000.0), (1e14, 1.0), (1e17, 1e-3), (math.inf, 1e-6))  # value -> ms multiplier


def _to_timestamp(col: pa.Array, name: str, line_of, *, nullable: bool, local: Localizer | None = None) -> pa.Array:
    target = schema.TS
    if pa.types.is_timestamp(col.type):
        if col.type.tz is None:
            col = _assume_local(col, local, line_of)
        out = pc.cast(col, target, safe=False)
    elif pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        out = _epoch_to_ts(np.asarray(col.cast(pa.float64()).fill_null(np.nan)), name, line_of, nullable)
    elif pa.types.is_string(col.type):
        col = pc.if_else(pc.equal(col, ""), None, col)
        out = None
        for attempt in (lambda c: pc.cast(c, target),
                        lambda c: _assume_local(pc.cast(c, pa.timestamp("ms")), local, line_of)):
            try:
                out = attempt(col)
                break
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        if out is None:
            out = _parse_times_slow(col.to_pylist(), name, line_of, local)
    else:
        raise IngestError(f"a time column cannot have type {col.type}", field=name)
    if out.null_count and not nullable:
        i = pc.index(pc.is_null(out), True).as_py()
        raise IngestError("missing time", line=line_of(i), field=name)
    out = out.cast(target)
    as_ms = out.cast(pa.int64())
    bad = pc.or_(pc.less(as_ms, _MIN_MS), pc.greater_equal(as_ms, _MAX_MS))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise IngestError("time out of range (1900-01-01 .. 2299-12-31)", line=line_of(i), field=name)
    return out


def _assume_local(naive: pa.Array, local: Localizer | None, line_of) -> pa.Array:
    """Naive timestamps as wall-clock times of ``local``'s zone (UTC without one). Vectorised;
    the few rows a DST change makes ambiguous or missing go through ``local`` one by one, so
    the report names them."""
    if local is None or local.tz is None:
        return pc.assume_timezone(naive, "UTC")
    naive = naive.cast(pa.timestamp("ms"))
    early = pc.assume_timezone(naive, local.tz.key, ambiguous="earliest", nonexistent="earliest")
    late = pc.assume_timezone(naive, local.tz.key, ambiguous="latest", nonexistent="latest")
    local.localised += len(naive) - naive.null_count
    differ = pc.fill_null(pc.not_equal(early.cast(pa.int64()), late.cast(pa.int64())), False)
    if not pc.any(differ).as_py():
        return early
    ms = early.cast(pa.int64()).to_numpy(zero_copy_only=False).copy()
    wall = naive.cast(pa.int64())
    for i in np.flatnonzero(differ.to_numpy(zero_copy_only=False)):
        local.localised -= 1  # counted again by wall_ms_to_ms
        ms[i] = local.wall_ms_to_ms(wall[i].as_py(), line_of(int(i)))
    return pa.array(ms, type=pa.int64(), mask=pc.is_null(naive).to_numpy(zero_copy_only=False)).cast(schema.TS)


def _epoch_to_ts(values: np.ndarray, name: str, line_of, nullable: bool) -> pa.Array:
    nulls = np.isnan(values)
    if (np.isinf(values) | (values < 0)).any():
        i = int(np.argmax(np.isinf(values) | (values < 0)))
        raise IngestError(f"not a time since the epoch: {values[i]!r}", line=line_of(i), field=name)
    ms = np.zeros(len(values), dtype=np.float64)
    lower = 0.0
    for limit, mult in _UNIT_LIMITS:
        sel = (values >= lower) & (values < limit) & ~nulls
        ms[sel] = values[sel] * mult
        lower = limit
    too_big = ms >= _MAX_MS
    if too_big.any():
        i = int(np.argmax(too_big))
        raise IngestError(f"time out of range (after 2299): {values[i]!r}", line=line_of(i), field=name)
    arr = pa.array(np.round(ms).astype(np.int64), mask=nulls, type=pa.int64())
    return arr.cast(schema.TS)


def _parse_times_slow(values: list, name: str, line_of, local: Localizer | None = None) -> pa.Array:
    out: list[int | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        s = v.strip()
        try:
            if s.replace(".", "", 1).isdigit():
                out.append(_epoch_to_ts(np.array([float(s)]), name, lambda _: line_of(i), True)[0].value)
                continue
            frac = s.find(".")
            if frac > 0:  # Python 3.11 reads at most 6 fraction digits
                end = frac + 1
                while end < len(s) and s[end].isdigit():
                    end += 1
                s = s[: min(end, frac + 7)] + s[end:]
            dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
        except (ValueError, OverflowError):
            raise IngestError(
                f"not a time (ISO-8601 like 2025-01-21T04:41:44Z, or seconds/ms since the epoch): {v!r}",
                line=line_of(i), field=name) from None
        try:
            if dt.tzinfo is None and local is not None:
                out.append(local.naive_to_ms(dt, line_of(i)))
                continue
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            out.append(round(dt.timestamp() * 1000))
        except (OverflowError, ValueError):
            raise IngestError(f"time out of range: {v!r}", line=line_of(i), field=name) from None
    return pa.array(out, type=pa.int64()).cast(schema.TS)


def _to_map(col: pa.Array, typ: pa.DataType, name: str, line_of) -> pa.Array:
    if pa.types.is_map(col.type):
        return pc.cast(col, typ)
    if not pa.types.is_string(col.type):
        raise IngestError(f"{name} must be a JSON object text or a map, not {col.type}", field=name)
    out = []
    for i, v in enumerate(col.to_pylist()):
        if v in (None, ""):
            out.append([])
            continue
        try:
            obj = json.loads(v)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise IngestError('must be a JSON object text, e.g. {"pci_bus_id": "0000:38:00.0"}',
                              line=line_of(i), field=name)
        out.append([(str(k), _attr_text(x)) for k, x in obj.items()])
    return pa.array(out, type=typ)
