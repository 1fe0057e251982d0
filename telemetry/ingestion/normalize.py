"""Turn parsed Prometheus series (text scrapes or remote-write) into rows of
the ``samples`` table (``telemetry.schema.SAMPLES``).

Per series (name + labels), once:

- **host**: label ``Hostname`` (dcgm-exporter before 2026-05), ``hostname``
  (after), ``host``, ``instance`` without ``:port``, else ``default_host``, else
  ``IngestError`` naming the series (``telemetry.ingestion.labels``).
- **cluster**: a ``cluster`` label when present, else the argument.
- **component**: ``gpu`` -> ``gpu3`` (MIG instance -> ``gpu3/mig5``, NVLink ->
  ``gpu3/nvlink2``); ``nvswitch`` -> ``nvswitch1``; a GPU ``UUID`` only when there
  is no ``gpu`` label; hwmon ``chip``/``sensor`` -> ``chip/sensor``; node_exporter
  PCI devices -> ``0000:01:00.0``; ``device`` + ``port`` (InfiniBand) ->
  ``mlx5_0/1``; ``device`` alone (disks, interfaces, ethtool) as is; EDAC
  ``controller``/``csrow``/``channel`` -> ``mc0/csrow1/ch0``; ``cpu`` -> ``cpu3``;
  ``interface``/``hca``/``disk`` as is, ``nic``/``psu``/``fan``/``nvme`` numbers
  -> ``psu0``; a ``component`` label wins over all of these (it is taken as is);
  otherwise '' (host level) (``telemetry.ingestion.labels.component_of``). Other
  labels are not stored: every result counts them per label
  (``labels_not_stored``: label -> series of the batch that carried it), on the
  text and the remote-write path alike; series that differ only in them (e.g.
  node_cpu_seconds_total's ``mode``) share a row key (``telemetry.ingestion.service``
  counts those merges).
- **metric**: ``catalog.resolve(name)`` -> canonical name, value multiplied by
  the metric's scale for that source name. Names the catalog does not know are
  kept under their own name and reported in ``unknown_metrics``.

Per sample: "no data" values are dropped and counted in ``dropped_blank``:
every NaN (including the Prometheus stale marker 0x7ff0000000000002) and, for
``DCGM_*`` series only, the DCGM blank sentinels (int32 0x7ffffff0..0x7fffffff,
int64 >= 0x7ffffffffffffff0, fp64 >= 2**47 within the sentinel range). The
sentinel ranges are only applied to DCGM series because other sources report
legitimate values there (an IB byte counter passes 2**47 within days).

``decode_to_table(body, cluster=)`` is the remote-write fast path: body bytes
straight to the table, equal to ``rw_series_to_table(decode_write_request(body))``.
``remote_write.scan_write_request`` finds series and samples with numpy and
hashes each series' exact label bytes to 128 bits (two independent seeded
lanes); a label set resolved earlier (senders push the same label sets every
time) is found by lane 1 and confirmed by lane 2, so sets that differ only in
their last bytes (``sensor="temp2"`` / ``"temp5"``) are told apart and never
decline a request. New label sets are parsed and resolved once, per request in
bulk. The cache holds up to ``TEMPLATES_MAX`` label sets (default 4 M,
``PRECURSOR_INGEST_SERIES_CACHE``) at ``BYTES_PER_SERIES`` (100) bytes each
plus each distinct host/component/metric string once, and starts over past
that. Anything the scanner cannot vouch for goes through the reference
decoder, which also gives the errors.
"""
from __future__ import annotations

import os
import sys
import threading
from itertools import chain
from typing import Callable, Iterable, Mapping, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry import catalog, schema
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.prometheus_text import PromSample
from telemetry.ingestion import inventory, labels as label_rules, limits, prometheus_text, remote_write, series_labels
from telemetry.ingestion.labels import component_of, strip_port as _strip_port  # noqa: F401 (callers' names)
from telemetry.ingestion.remote_write import RWSeries

# go-dcgm dcgm_structs.h: BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED = BLANK + 0..3;
# DCGM_*_IS_BLANK() treats everything from BLANK up as blank.
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT32_MAX = 0x7FFFFFFF
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0
_FP64_BLANK_END = DCGM_FP64_BLANK + 16  # real fp64 fields never get near 2**47
STALE_NAN_BITS = 0x7FF0000000000002


class NormalizeResult(NamedTuple):
    table: pa.Table  # schema telemetry.schema.SAMPLES
    dropped_blank: int  # NaN, stale markers and DCGM blank sentinels
    unknown_metrics: set[str]
    inventory: tuple = ()  # telemetry.ingestion.inventory entries of label sets first seen here
    labels_not_stored: Mapping[str, int] = {}  # label -> series of this batch carrying it (never mutated)
    label_sets: Callable[[], list[tuple]] | None = None  # text: (name, labels) of the batch's series
    merged: tuple | None = None  # text template: the row-key merges (service._merges), when known
    # What is known of the rows without reading them again (a text template's steady scrape): the
    # lowest and highest ``ts`` (ms), and whether every value is finite (nothing for drop_no_data)
    ts_span: tuple[int, int] | None = None
    finite: bool = False


class _Series(NamedTuple):
    cluster: str
    host: str
    component: str
    metric: str
    scale: float
    dcgm: bool
    unknown: bool
    extra: tuple = ()  # labels not stored (telemetry.ingestion.labels.not_stored)


def prom_samples_to_table(
    samples: Iterable[PromSample], *, cluster: str, default_host: str | None = None
) -> NormalizeResult:
    """Rows for parsed exposition samples; ``IngestError`` when a series has no host."""
    with _text_lock:
        t = _text_series(cluster)
        by_labels, intern = t.by_labels, t.intern
        idx: list[int] = []
        ts: list[int] = []
        vals: list[float] = []
        for s in samples:
            i = by_labels.get((s.name, s.labels))
            if i is None:
                i = intern(s.name, s.labels)
            idx.append(i)
            ts.append(s.ts_ms)
            vals.append(s.value)
        idx_a = np.array(idx, dtype=np.int64)
        return _build_coded(t, idx_a, np.array(ts, dtype=np.int64), np.array(vals, dtype=np.float64),
                            host_for_default=t.default_host_for(idx_a, default_host))._replace(
                                label_sets=t.label_sets(idx_a))


def prometheus_text_to_table(
    text: str, *, cluster: str, default_host: str | None = None, default_ts_ms: int
) -> NormalizeResult:
    """Exposition body -> rows, equal to ``prom_samples_to_table(parse_exposition(text, ...))``
    (same rows in the same order, same drops, same unknown names, same errors), fast.

    ``prometheus_text.scan_exposition`` gives a series number per sample from
    the per-line caches kept here per (cluster, default host); the columns are
    then gathered with numpy from the resolved series. Bodies the scanner does
    not vouch for (bad input, ``# EOF``) take the reference path.

    A scanned body also leaves its default host's template (``_TextTemplate``): the
    host's next scrape, if it differs only in its values (checked on every byte
    but the value texts, ``prometheus_text.template_values``), is read with numpy
    and its rows built from what the template holds (~1 ms instead of ~2.3 ms for
    a 500-sample dcgm-exporter + node_exporter page). Any other difference takes
    the scan (and the template is made again after 2, 4, ... 64 scans).
    """
    with _text_lock:
        t = _text_series(cluster)
        page = (default_host, prometheus_text.first_head(text))
        template = t.templates.get(page)
        if template is not None:
            got = prometheus_text.template_values(template.shape, text, default_ts_ms=default_ts_ms)
            if got is not None:
                found = template.rows(t, *got, default_ts_ms)
                if found is not None:
                    t.template_hits += 1
                    return found
            else:  # the scrape changed: rebuilt from a later full scan, later the more often it changes
                t.changed(page)
        try:
            ids, values, stamps = prometheus_text.scan_exposition(
                text, default_ts_ms=default_ts_ms, heads=t.heads, names=t.names, intern=t.intern
            )
        except prometheus_text.Unsupported:
            pass
        else:
            ts = np.full(len(ids), default_ts_ms, dtype=np.int64)
            if stamps:
                rows, own = zip(*stamps)
                ts[list(rows)] = own
            idx = np.array(ids, dtype=np.int64)
            host = t.default_host_for(idx, default_host)
            vals = np.array(values, dtype=np.float64)
            result = _build_coded(t, idx, ts, vals, host_for_default=host)._replace(label_sets=t.label_sets(idx))
            made = t.remember_template(text, page, idx, host) if page[1] is not None else None
            if (made is not None and not stamps and result.table.num_rows == len(idx)
                    and np.isfinite(result.table.column("value").to_numpy()).all()):  # nothing for drop_no_data
                # The row-key merges of every later scrape the template reads in full (its key
                # columns at one timestamp), found once here instead of on its first read.
                from telemetry.ingestion.service import _merges  # the service's own rule

                made.merged = _merges(result.table)
                result = result._replace(merged=made.merged)
            return result
    samples = prometheus_text.parse_exposition(text, default_ts_ms=default_ts_ms)
    return prom_samples_to_table(samples, cluster=cluster, default_host=default_host)


class _TextSeries:
    """Resolved exposition series under one ``cluster`` argument: numbered, with
    the per-series columns ``_build_coded`` gathers from (numpy arrays grown by
    doubling, strings as codes into pools), and the keys that lead to a number.

    One context serves every host of the cluster: a series without its own host
    label (a node_exporter scrape relayed with ``?host=``) is resolved once with
    the placeholder host ``DEFAULT_HOST`` and gets the request's default host when
    its rows are built, so 4,000 nodes behind a few relays share their ~500
    node_exporter series instead of each needing (and evicting) a context.
    """

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.heads: dict[str, int] = {}  # exposition line text up to its last '}'
        self.names: dict[str, int] = {}  # bare metric name (lines without labels)
        self.by_labels: dict[tuple, int] = {}  # (name, sorted labels)
        self.keys: list[tuple] = []  # series number -> (name, sorted labels)
        self.pairs: dict[tuple[str, str], tuple[str, str]] = {}  # each label pair once
        self.hostless: dict[int, tuple] = {}  # series without a host label -> (name, labels)
        self.hostless_inventory: dict[int, list] = {}  # such series' inventory entries (placeholder host)
        self.inventory_noted: set[tuple[str, int]] = set()  # (default host, series) already noted
        self.size = 0
        self.dcgm = np.empty(0, dtype=bool)
        self.scale = np.empty(0, dtype=np.float64)
        self.unknown = np.empty(0, dtype=bool)
        self.extra = np.empty(0, dtype=np.uint16)  # code into extra_pool: the labels not stored
        self.extra_pool: dict[tuple, int] = {(): 0}
        self.codes = {c: np.empty(0, dtype=np.int32) for c in _Templates.COLUMNS}
        self.pools: dict[str, dict[str, int]] = {c: {} for c in _Templates.COLUMNS}
        self.pool_arrays: dict[str, pa.Array | None] = {c: None for c in _Templates.COLUMNS}
        self.templates: dict[tuple, _TextTemplate] = {}  # (default host, first sample head) -> page shape
        self.waits: dict[tuple, list[int]] = {}  # page -> [full scans to wait, last wait]
        self.template_hits = 0  # scrapes read through a template (tests, benchmarks)
        self.shared_columns: dict[tuple, pa.DictionaryArray] = {}  # equal template columns, one copy

    def default_host_for(self, idx: np.ndarray, default_host: str | None) -> str | None:
        """The host for this request's host-less series (``None`` when it has none); raises the
        reference path's ``IngestError`` (for its first such sample) when it cannot have one."""
        code = self.pools["host"].get(DEFAULT_HOST)
        if code is None or not self.hostless:
            return None
        rows = np.flatnonzero(self.codes["host"][idx] == code)
        if not len(rows):
            return None
        name, labels = self.hostless[int(idx[rows[0]])]
        host = _resolve(name, dict(labels), self.cluster, default_host or None).host
        if self.hostless_inventory:  # e.g. node_infiniband_info: the NIC belongs to this request's host
            if len(self.inventory_noted) > 1_000_000:
                self.inventory_noted.clear()
            for i in np.unique(idx[rows]).tolist():
                entries = self.hostless_inventory.get(i)
                if entries and (host, i) not in self.inventory_noted:
                    inventory.note([e._replace(host=host) for e in entries])
                    self.inventory_noted.add((host, i))
        return host

    def intern(self, name: str, labels: tuple[tuple[str, str], ...]) -> int:
        """Number of the series; resolves it the first time (``IngestError`` when it has no host)."""
        key = (name, labels)
        i = self.by_labels.get(key)
        if i is not None:
            return i
        # Kept for the context's life: one copy of each label pair (a GPU's 25 DCGM fields share
        # their pairs, every host its model and driver pairs): ~0.8 instead of ~2 KB per series.
        pairs = self.pairs
        key = (sys.intern(name), tuple([pairs.setdefault(p, p) for p in labels]))
        try:
            res = _resolve(name, dict(labels), self.cluster, None)
        except IngestError as exc:
            if exc.field != "host":
                raise
            # No host label: the request's default host is filled in per request. A label that
            # is there but unusable raises again here, whatever the default.
            with inventory.collecting() as found:  # noted per host instead (default_host_for)
                res = _resolve(name, dict(labels), self.cluster, "default-host")._replace(host=DEFAULT_HOST)
            self.hostless[self.size] = key
            if found:
                self.hostless_inventory[self.size] = found
        if self.size == len(self.dcgm):
            cap = max(1024, 2 * self.size)

            def grow(arr: np.ndarray) -> np.ndarray:
                out = np.zeros(cap, dtype=arr.dtype)
                out[: self.size] = arr[: self.size]
                return out

            self.dcgm, self.scale, self.unknown = grow(self.dcgm), grow(self.scale), grow(self.unknown)
            self.extra = grow(self.extra)
            self.codes = {c: grow(v) for c, v in self.codes.items()}
        i = self.size
        self.dcgm[i], self.scale[i], self.unknown[i] = res.dcgm, res.scale, res.unknown
        self.extra[i] = _extra_code(self.extra_pool, res.extra)
        _intern_codes(self, i, res)
        self.by_labels[key] = i
        self.keys.append(key)
        self.size += 1
        return i

    def remember_template(self, text: str, page: tuple, idx: np.ndarray, host: str | None) -> _TextTemplate | None:
        """After a full scan: the page's shape (``_TextTemplate``) for its next scrapes (returned,
        or None when none was made); a page is (default host, head of its first sample line). A
        page that changed waits ``waits[page]`` full scans before it is tried again."""
        wait = self.waits.get(page)
        if wait is not None and wait[0] > 0:
            wait[0] -= 1
            return None
        shape = prometheus_text.template_of(text, len(idx))
        if shape is None:
            self.changed(page)
            return None
        if len(self.templates) >= _TEMPLATES_MAX:
            self.templates.clear()
        made = self.templates[page] = _TextTemplate(self, shape, idx, host)
        return made

    def changed(self, page: tuple) -> None:
        """The page's template no longer fits (or cannot be made): dropped, and the next try
        is 2, 4, ... 64 full scans away (a page that changes every scrape costs a build rarely)."""
        self.templates.pop(page, None)
        wait = self.waits.get(page)
        if wait is None:
            if len(self.waits) >= _TEMPLATES_MAX:
                self.waits.clear()
            wait = self.waits[page] = [0, 1]
        wait[1] = min(2 * wait[1], 64)
        wait[0] = wait[1]

    def label_sets(self, idx: np.ndarray) -> Callable[[], list[tuple]]:
        """(name, labels) of the series numbered in ``idx``, when asked (no second parse)."""
        keys = self.keys
        return lambda: [keys[i] for i in np.unique(idx).tolist()]

    def pool_array(self, col: str) -> pa.Array:
        arr = self.pool_arrays[col]
        if arr is None:
            arr = self.pool_arrays[col] = pa.array(list(self.pools[col]), type=pa.string())
        return arr

    def value_of(self, col: str, code: int) -> str:
        return self.pool_array(col)[code].as_py()


class _TextTemplate:
    """A default host's steady scrape (``prometheus_text.Template``) with everything about its
    rows that does not depend on the values: series number, DCGM flag and scale per sample, the
    cluster/host/component/metric columns (dictionary-coded; equal ones shared across hosts),
    unknown names, labels not stored and, once known, the row-key merges at one timestamp. Valid
    for the life of its ``_TextSeries`` (series numbers never change within one)."""

    __slots__ = ("shape", "idx", "dcgm", "scale", "unknown", "not_stored", "columns", "label_sets", "merged")

    def __init__(self, t: _TextSeries, shape: prometheus_text.Template, idx: np.ndarray,
                 host: str | None) -> None:
        self.shape = shape
        self.idx = idx.astype(np.int32)
        dcgm = t.dcgm[idx]
        self.dcgm = dcgm if dcgm.any() else None
        scale = t.scale[idx]
        self.scale = scale if (scale != 1.0).any() else None
        row_unknown = t.unknown[idx]
        codes = np.unique(t.codes["metric"][idx[row_unknown]]) if row_unknown.any() else np.empty(0, np.int32)
        self.unknown = frozenset(t.pool_array("metric").take(pa.array(codes, type=pa.int32())).to_pylist())
        self.not_stored = _not_stored_coded(t, idx)
        columns = []
        for col in _Templates.COLUMNS:
            used, local = np.unique(t.codes[col][idx], return_inverse=True)
            values = t.pool_array(col).take(pa.array(used, type=pa.int32())).to_pylist()
            if col == "host" and host is not None:
                values = [host if v == DEFAULT_HOST else v for v in values]
            key = (col, tuple(values), local.astype(np.int32).tobytes())
            arr = t.shared_columns.get(key) if col != "host" else None
            if arr is None:
                arr = pa.DictionaryArray.from_arrays(pa.array(local, type=pa.int32()), pa.array(values, type=pa.string()))
                if col != "host":  # the same exporter's pages share these (the host column is the host's own)
                    if len(t.shared_columns) >= _TEMPLATES_MAX:
                        t.shared_columns.clear()
                    t.shared_columns[key] = arr
            columns.append(arr)
        self.columns = tuple(columns)
        self.label_sets = t.label_sets(self.idx)
        self.merged: tuple | None = None

    def rows(self, t: _TextSeries, vals: np.ndarray, own_ts: np.ndarray | None, default_ts_ms: int
             ) -> NormalizeResult | None:
        """``_build_coded``'s result for these values; None when a timestamp is outside the
        accepted window (the full path names it)."""
        n = len(vals)
        keep = ~np.isnan(vals)
        if self.dcgm is not None:
            keep &= ~(self.dcgm & _dcgm_blank(vals))
        if self.scale is not None:
            with np.errstate(over="ignore"):  # a huge value times a unit scale is +-inf, as in Python
                vals = vals * self.scale
        kept = int(np.count_nonzero(keep))
        first, last = limits.ts_window()
        if own_ts is None:
            if not first <= default_ts_ms <= last:
                return None
        elif len(own_ts) and (int(own_ts.min()) < first or int(own_ts.max()) > last):
            return None
        columns = [c.dictionary.take(c.indices) for c in self.columns]  # plain strings (half a cast's time)
        if kept == n:
            ts = pa.array(np.full(n, default_ts_ms, dtype=np.int64) if own_ts is None else own_ts, type=pa.int64())
            value = pa.array(vals, type=pa.float64())
        else:
            take = pa.array(np.flatnonzero(keep).astype(np.int32))
            columns = [c.take(take) for c in columns]
            ts = pa.array(np.full(kept, default_ts_ms, dtype=np.int64) if own_ts is None else own_ts[keep],
                          type=pa.int64())
            value = pa.array(vals[keep], type=pa.float64())
        table = pa.Table.from_arrays([ts.cast(schema.TS), *columns, value], schema=schema.SAMPLES)
        merged = None
        finite = False
        if kept == n and own_ts is None and np.isfinite(vals).all():  # nothing for limits.drop_no_data either
            if self.merged is None:
                from telemetry.ingestion.service import _merges  # the service's own rule
                self.merged = _merges(table)
            merged, finite = self.merged, True
        return NormalizeResult(table, n - kept, set(self.unknown), labels_not_stored=self.not_stored,
                               label_sets=self.label_sets, merged=merged, finite=finite,
                               ts_span=(default_ts_ms, default_ts_ms) if own_ts is None else None)


# Host templates per context before they start over: ~26 bytes per sample line of the host's scrape
# (line number, head length, series number, DCGM flag, scale, host column code) + ~0.5 KB, i.e.
# ~13 KB for a 500-sample scrape, ~210 MB at the bound (measured, README).
_TEMPLATES_MAX = 16_384
_TEXT_SERIES_MAX = 1_000_000  # series (or keys) per context before it starts over
DEFAULT_HOST = "\x00default host"  # placeholder, never stored: replaced by the request's host
_text_contexts: dict[str, _TextSeries] = {}
_text_lock = threading.Lock()  # web requests are threads; the tables grow in place


def _text_series(cluster: str) -> _TextSeries:
    """The context for this call; only swapped between calls, so numbers stay valid within one."""
    t = _text_contexts.get(cluster)
    if t is None or max(t.size, len(t.heads), len(t.names)) > _TEXT_SERIES_MAX:
        if len(_text_contexts) >= 64:
            _text_contexts.clear()
        t = _text_contexts[cluster] = _TextSeries(cluster)
    return t


# (raw label key, cluster) -> resolved series; label sets repeat in every push.
_RW_CACHE_MAX = 500_000
_rw_cache: dict[tuple[bytes, str], _Series] = {}


def rw_series_to_table(series: Iterable[RWSeries], *, cluster: str) -> NormalizeResult:
    """Rows for decoded remote-write series (vectorised: per-series work once, per-sample in numpy)."""
    series = series if isinstance(series, list) else list(series)
    cache = _rw_cache
    local: dict[int, int] = {}  # id(resolved) -> index in `uniq`
    uniq: list[_Series] = []
    per_series = np.empty(len(series), dtype=np.int32)
    counts = np.empty(len(series), dtype=np.int64)
    unknown: set[str] = set()
    for n, s in enumerate(series):
        ck = (s.key, cluster)
        res = cache.get(ck) if s.key else None
        if res is None:
            labels = s.labels
            name = labels.get("__name__")
            if not name:
                raise IngestError(f"series {n} has no __name__ label", field="__name__")
            res = _resolve(name, labels, cluster, None)
            if s.key:
                if len(cache) >= _RW_CACHE_MAX:
                    cache.clear()
                cache[ck] = res
        j = local.get(id(res))
        if j is None:
            j = local[id(res)] = len(uniq)
            uniq.append(res)
            if res.unknown:
                unknown.add(res.metric)
        per_series[n] = j
        counts[n] = len(s.timestamps)
    total = int(counts.sum())
    ts = np.fromiter(chain.from_iterable(s.timestamps for s in series), dtype=np.int64, count=total)
    vals = np.fromiter(chain.from_iterable(s.values for s in series), dtype=np.float64, count=total)
    extra = label_rules.tally([uniq[j].extra for j in per_series.tolist()], [1] * len(series))
    return _build(uniq, np.repeat(per_series, counts), ts, vals, unknown)._replace(labels_not_stored=extra)


def decode_to_table(body: bytes, *, cluster: str) -> NormalizeResult:
    """Remote-write body -> rows: ``rw_series_to_table(decode_write_request(body), cluster=)``, fast.

    ``IngestError`` exactly when the reference path raises one.
    """
    raw = remote_write.decompress(body)
    scan = remote_write.scan_write_request(raw)
    if scan is not None:
        with _templates_lock:
            result = _scan_to_table(raw, scan, cluster)
        if result is not None:
            return result
    return rw_series_to_table(remote_write.decode_raw_write_request(raw), cluster=cluster)


class _Templates:
    """Label sets seen under one ``cluster`` argument, keyed by the 128-bit hash of their exact
    wire bytes (``remote_write.label_hash``), with their resolved columns.

    Per label set: both hash lanes, the resolved numbers and string codes into per-column
    pools, all in numpy arrays grown by doubling (a request costs numpy gathers, no Python
    work per series), and an open-addressing slot table (template ids, linear probing, at most
    half full) found by lane 1 and confirmed by lane 2. Nothing per series is a Python object,
    so the size is known: ``BYTES_PER_SERIES`` bounds it, plus each distinct
    cluster/host/component/metric string once (``nbytes``).
    """

    COLUMNS = ("cluster", "host", "component", "metric")

    def __init__(self) -> None:
        self.size = 0  # label sets
        self.h1 = np.empty(0, dtype=np.uint64)
        self.h2 = np.empty(0, dtype=np.uint64)
        self.dcgm = np.empty(0, dtype=bool)
        self.scale = np.empty(0, dtype=np.float64)
        self.unknown = np.empty(0, dtype=bool)
        self.extra = np.empty(0, dtype=np.uint16)  # code into extra_pool: the labels not stored
        self.extra_pool: dict[tuple, int] = {(): 0}
        self.codes = {c: np.empty(0, dtype=np.int32) for c in self.COLUMNS}
        self.pools: dict[str, dict[str, int]] = {c: {} for c in self.COLUMNS}
        self.pool_arrays: dict[str, pa.Array | None] = {c: None for c in self.COLUMNS}
        self.slots = np.full(1024, -1, dtype=np.int32)

    def _grow(self) -> None:
        cap = max(1024, 2 * len(self.h1))

        def grow(arr: np.ndarray) -> np.ndarray:
            out = np.zeros(cap, dtype=arr.dtype)
            out[: self.size] = arr[: self.size]
            return out

        self.h1, self.h2 = grow(self.h1), grow(self.h2)
        self.dcgm, self.scale, self.unknown = grow(self.dcgm), grow(self.scale), grow(self.unknown)
        self.extra = grow(self.extra)
        self.codes = {c: grow(v) for c, v in self.codes.items()}

    def _place(self, ids: np.ndarray) -> None:
        """Put template ids into free slots (linear probing from lane 1), vectorised."""
        slots, mask = self.slots, len(self.slots) - 1
        pos = (self.h1[ids] & np.uint64(mask)).astype(np.int64)
        while len(ids):
            free = np.flatnonzero(slots[pos] < 0)
            if len(free):
                taken, first = np.unique(pos[free], return_index=True)
                slots[taken] = ids[free[first]]
                placed = np.zeros(len(ids), dtype=bool)
                placed[free[first]] = True
                ids, pos = ids[~placed], pos[~placed]
            pos = (pos + 1) & mask

    def add(self, h1: int, h2: int, res: _Series) -> int:
        """Register a label set by its hash lanes (resolved as ``res``); its template id."""
        return int(self.add_many(np.array([h1], np.uint64), np.array([h2], np.uint64), [res])[0])

    def add_many(self, h1: np.ndarray, h2: np.ndarray, resolved: list[_Series]) -> np.ndarray:
        """``add`` for many label sets at once (vectorised); their template ids."""
        ids = self.lookup(h1, h2)
        new = np.flatnonzero(ids < 0)
        if not len(new):
            return ids
        _, first, inverse = np.unique(np.stack([h1[new], h2[new]], axis=1), axis=0,
                                      return_index=True, return_inverse=True)
        order = np.argsort(first)  # template ids in order of first appearance
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        src = new[first[order]]
        k, i0 = len(src), self.size
        while i0 + k > len(self.h1):
            self._grow()
        self.h1[i0 : i0 + k], self.h2[i0 : i0 + k] = h1[src], h2[src]
        picked = [resolved[j] for j in src.tolist()]
        self.dcgm[i0 : i0 + k] = [r.dcgm for r in picked]
        self.scale[i0 : i0 + k] = [r.scale for r in picked]
        self.unknown[i0 : i0 + k] = [r.unknown for r in picked]
        self.extra[i0 : i0 + k] = [_extra_code(self.extra_pool, r.extra) for r in picked]
        for col in self.COLUMNS:
            pool = self.pools[col]
            before = len(pool)
            self.codes[col][i0 : i0 + k] = [pool.setdefault(v, len(pool)) for v in
                                            [getattr(r, col) for r in picked]]
            if len(pool) != before:
                self.pool_arrays[col] = None
        self.size += k
        ids[new] = i0 + rank[inverse.reshape(-1)]
        if 2 * self.size > len(self.slots):  # at most half full: short probes
            cap = len(self.slots)
            while 2 * self.size > cap:
                cap *= 2
            self.slots = np.full(cap, -1, dtype=np.int32)
            self._place(np.arange(self.size, dtype=np.int64))
        else:
            self._place(np.arange(i0, i0 + k, dtype=np.int64))
        return ids

    def lookup(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Template id per (lane 1, lane 2), -1 where unknown. Both lanes must match."""
        out = np.full(len(h1), -1, dtype=np.int64)
        if not self.size:
            return out
        slots, mask = self.slots, np.uint64(len(self.slots) - 1)
        pending = np.arange(len(h1))
        pos = (h1 & mask).astype(np.int64)
        while len(pending):
            t = slots[pos]
            occupied = t >= 0
            ti = np.where(occupied, t, 0)
            hit = occupied & (self.h1[ti] == h1[pending]) & (self.h2[ti] == h2[pending])
            out[pending[hit]] = t[hit]
            more = occupied & ~hit
            pending, pos = pending[more], (pos[more] + 1) & int(mask)
        return out

    def value_of(self, col: str, code: int) -> str:
        return self.pool_array(col)[code].as_py()

    def pool_array(self, col: str) -> pa.Array:
        arr = self.pool_arrays[col]
        if arr is None:
            arr = self.pool_arrays[col] = pa.array(list(self.pools[col]), type=pa.string())
        return arr

    def nbytes(self) -> int:
        """Memory held: the arrays (capacity, not just size), plus the string pools
        (each distinct value once: the str, its dict entry, its Arrow copy)."""
        arrays = [self.h1, self.h2, self.dcgm, self.scale, self.unknown, self.extra, self.slots,
                  *self.codes.values()]
        total = sum(a.nbytes for a in arrays)
        for col in self.COLUMNS:
            pool = self.pools[col]
            total += sys.getsizeof(pool) + sum(sys.getsizeof(v) + len(v.encode()) + 4 for v in pool)
        return total


# Per label set: lanes 2 x 8, dcgm 1, scale 8, unknown 1, labels not stored 2, codes 4 x 4 = 44
# bytes, at most twice that while the arrays wait for their next doubling (88); slot table 4 bytes
# at 2-4 slots per label set (16). Strings (hosts, components, metrics) come on top, once per
# distinct value.
BYTES_PER_SERIES = 104
# Label sets per cluster argument before that cache starts over (a fleet has 1-4 M series):
# 4 M x 100 B = 400 MB at most.
TEMPLATES_MAX = int(os.environ.get("PRECURSOR_INGEST_SERIES_CACHE", "4000000") or 4_000_000)
_templates: dict[str, _Templates] = {}
_templates_lock = threading.Lock()  # web and worker threads share the cache


def _templates_for(cluster: str) -> _Templates:
    t = _templates.get(cluster)
    if t is None or t.size >= TEMPLATES_MAX:
        if t is None and sum(x.size for x in _templates.values()) >= TEMPLATES_MAX:
            _templates.clear()  # the budget is for all cluster arguments together
        t = _templates[cluster] = _Templates()
    return t


def _scan_to_table(raw: bytes, scan: remote_write.RWScan, cluster: str) -> NormalizeResult | None:
    """Rows for a scanned request, or ``None`` to send it through the reference path.

    A label set is recognised by both 128-bit hash lanes of its exact bytes; a new one is
    parsed (canonical label fields only) and resolved once. Label sets that differ only in
    their last bytes have unrelated hashes, so they never decline a request.
    """
    t = _templates_for(cluster)
    start, end, h1, h2 = scan.label_start, scan.label_end, scan.fingerprint, scan.fingerprint2
    tid = t.lookup(h1, h2)
    miss = np.flatnonzero(tid < 0)
    if len(miss):
        pairs = np.stack([h1[miss], h2[miss]], axis=1)
        _, first = np.unique(pairs, axis=0, return_index=True)
        new = miss[np.sort(first)]
        resolved = []
        for i in new.tolist():
            section = raw[int(start[i]) : int(end[i])]
            try:
                parsed = remote_write.parse_label_fields(section, i)
                if parsed is None:
                    return None
                labels = parsed[1]
                resolved.append(_resolve(labels["__name__"], labels, cluster, None))
            except IngestError:
                return None  # the reference path reports it, naming the series
        t.add_many(h1[new], h2[new], resolved)
        tid[miss] = t.lookup(h1[miss], h2[miss])
        if (tid < 0).any():
            return None
    idx = tid if len(scan.values) == len(tid) else np.repeat(tid, scan.counts)
    return _build_coded(t, idx, scan.timestamps, scan.values, series=tid)


def _build_coded(t: _Templates, idx: np.ndarray, ts: np.ndarray, vals: np.ndarray, *,
                 host_for_default: str | None = None, series: np.ndarray | None = None) -> NormalizeResult:
    """``_build`` for template ids: same rows, drops, unknown names and labels not stored
    (``host_for_default`` stands in for the ``DEFAULT_HOST`` placeholder of a text context;
    ``series``: the batch's template id per series when ``idx`` has one per sample)."""
    not_stored = _not_stored_coded(t, idx) if series is None else _not_stored_coded(t, series, distinct=False)
    n = len(vals)
    keep = ~np.isnan(vals)
    row_dcgm = t.dcgm[idx]
    if row_dcgm.any():
        blank = _dcgm_blank(vals)
        keep &= ~(row_dcgm & blank)
    unknown: set[str] = set()
    row_unknown = t.unknown[idx]
    if row_unknown.any():  # named even when all their samples were blank, like the reference path
        codes = np.unique(t.codes["metric"][np.unique(idx[row_unknown])])
        unknown = {t.value_of("metric", c) for c in codes.tolist()}
    kept = int(keep.sum())
    dropped = n - kept
    if dropped:
        idx, ts, vals = idx[keep], ts[keep], vals[keep]
    if not kept:
        return NormalizeResult(schema.SAMPLES.empty_table(), dropped, unknown, labels_not_stored=not_stored)
    scale = t.scale[idx]
    if (scale != 1.0).any():
        vals = vals * scale

    def column(col: str) -> pa.Array:
        codes = pa.array(t.codes[col][idx], type=pa.int32())
        pool = t.pool_array(col)
        if col == "host" and host_for_default is not None:
            pool = pc.if_else(pc.equal(pool, DEFAULT_HOST), host_for_default, pool)
        return pa.DictionaryArray.from_arrays(codes, pool).cast(pa.string())

    table = pa.Table.from_arrays(
        [pa.array(ts, type=pa.int64()).cast(schema.TS), *(column(c) for c in _Templates.COLUMNS),
         pa.array(vals, type=pa.float64())],
        schema=schema.SAMPLES,
    )
    return NormalizeResult(table, dropped, unknown, labels_not_stored=not_stored)


def _not_stored_coded(t, ids: np.ndarray, *, distinct: bool = True) -> dict[str, int]:
    """label -> series that carry it: the distinct template ids among ``ids`` (text: one id per
    sample), or every entry of ``ids`` (remote-write: one per series of the request, counted as
    the reference path counts them; no sort on the hot path)."""
    codes = t.extra[ids]
    if not codes.any():
        return {}
    if distinct:
        codes = t.extra[np.unique(ids[codes > 0])]
    counts = np.bincount(codes)
    found = np.flatnonzero(counts[1:]) + 1
    names = list(t.extra_pool)  # code -> label names (dicts keep insertion order)
    return label_rules.tally([names[c] for c in found.tolist()], counts[found].tolist())


_OVERFLOW = ("(more distinct sets of label names than itemised)",)


def _extra_code(pool: dict[tuple, int], extra: tuple) -> int:
    """The uint16 code of a set of labels not stored (the last code is shared past 65,535 sets)."""
    code = pool.get(extra)
    if code is None:
        if len(pool) >= 65_535:
            code = pool.get(_OVERFLOW)
            if code is not None:
                return code
            extra = _OVERFLOW
        code = pool[extra] = len(pool)
    return code


def _build(
    series: list[_Series], idx: np.ndarray, ts: np.ndarray, vals: np.ndarray, unknown: set[str]
) -> NormalizeResult:
    n = len(vals)
    not_stored = label_rules.tally([s.extra for s in series], [1] * len(series))
    if not series or n == 0:
        return NormalizeResult(schema.SAMPLES.empty_table(), 0, unknown, labels_not_stored=not_stored)
    dcgm = np.fromiter((s.dcgm for s in series), dtype=bool, count=len(series))
    scale = np.fromiter((s.scale for s in series), dtype=np.float64, count=len(series))
    keep = ~np.isnan(vals)
    if dcgm.any():
        row_dcgm = dcgm[idx]
        blank = _dcgm_blank(vals)
        keep &= ~(row_dcgm & blank)
    dropped = n - int(keep.sum())
    if dropped:
        idx, ts, vals = idx[keep], ts[keep], vals[keep]
    if (scale != 1.0).any():
        with np.errstate(over="ignore"):  # a huge value times a unit scale is +-inf, as in Python
            vals = vals * scale[idx]
    take = pa.array(idx, type=pa.int32())

    def column(values: list[str]) -> pa.Array:
        # A dictionary array keeps the per-row work in C; cast back to plain strings.
        return pa.DictionaryArray.from_arrays(take, pa.array(values, type=pa.string())).cast(pa.string())

    table = pa.Table.from_arrays(
        [
            pa.array(ts, type=pa.int64()).cast(schema.TS),
            column([s.cluster for s in series]),
            column([s.host for s in series]),
            column([s.component for s in series]),
            column([s.metric for s in series]),
            pa.array(vals, type=pa.float64()),
        ],
        schema=schema.SAMPLES,
    )
    return NormalizeResult(table, dropped, unknown, labels_not_stored=not_stored)


def _resolve(name: str, labels: Mapping[str, str], cluster: str, default_host: str | None) -> _Series:
    host = label_rules.host_of(labels, default_host)
    if not host:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        raise IngestError(
            f"no host for sample {name}{{{shown}}}: no Hostname/hostname/host/instance label and no default host",
            field="host",
        )
    metric = catalog.resolve(name)
    if metric is None:
        canonical, scale, unknown = name, 1.0, True
    else:
        scale_for = getattr(metric, "scale_for", None)
        canonical, unknown = metric.name, False
        scale = float(scale_for(name)) if scale_for is not None else float(metric.scale)
    component = component_of(labels)
    series_cluster = labels.get("cluster") or cluster
    # The name grammar, once per label set (resolved sets are cached): ingest stores only what
    # the pages can chart (telemetry/names.py).
    limits.check_names(host=host, component=component, metric=canonical, cluster=series_cluster)
    noted = inventory.from_labels(name, labels, series_cluster, host, component)
    extra = label_rules.not_stored(name, labels)
    if extra:  # their values are kept beside the series (telemetry.ingestion.series_labels)
        noted.append(series_labels.entry(series_cluster, host, component, canonical,
                                         tuple((k, labels[k]) for k in extra)))
    inventory.note(noted)
    return _Series(
        cluster=series_cluster,
        host=host,
        component=component,
        metric=canonical,
        scale=scale,
        dcgm=name.startswith("DCGM_"),
        unknown=unknown,
        extra=extra,
    )


def forget_label_sets() -> None:
    """Drop every resolved label set, so the next request resolves (and notes the inventory of)
    each again: after its inventory could not be written."""
    with _text_lock:
        _text_contexts.clear()
    with _templates_lock:
        _templates.clear()
    _rw_cache.clear()
    inventory.forget()


def _intern_codes(cache, i: int, res) -> None:
    """Give row ``i`` of a label-set cache the dictionary codes of ``res``'s column values."""
    for col in _Templates.COLUMNS:
        pool = cache.pools[col]
        value = getattr(res, col)
        code = pool.get(value)
        if code is None:
            code = pool[value] = len(pool)
            cache.pool_arrays[col] = None
        cache.codes[col][i] = code


def _dcgm_blank(vals: np.ndarray) -> np.ndarray:
    """DCGM's "blank" sentinels (int32, int64 and fp64 ranges): no data, never a reading."""
    return (
        ((vals >= DCGM_INT32_BLANK) & (vals <= DCGM_INT32_MAX))
        | (vals >= float(DCGM_INT64_BLANK))
        | ((vals >= DCGM_FP64_BLANK) & (vals < _FP64_BLANK_END))
    )
