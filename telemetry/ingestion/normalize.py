"""Turn parsed Prometheus series (text scrapes or remote-write) into rows of
the ``samples`` table (``telemetry.schema.SAMPLES``).

Per series (name + labels), once:

- **host**: label ``Hostname`` (dcgm-exporter before 2026-05), ``hostname``
  (after), ``instance`` without ``:port``, else ``default_host``, else
  ``IngestError`` naming the series.
- **cluster**: a ``cluster`` label when present, else the argument.
- **component**: ``gpu`` -> ``gpu3`` (MIG instance -> ``gpu3/mig5``, NVLink ->
  ``gpu3/nvlink2``); ``nvswitch`` -> ``nvswitch1``; a GPU ``UUID`` only when there
  is no ``gpu`` label; hwmon ``chip``/``sensor`` -> ``chip/sensor``; node_exporter
  PCI devices -> ``0000:01:00.0``; ``device`` + ``port`` (InfiniBand) ->
  ``mlx5_0/1``; ``device`` alone (disks, interfaces, ethtool) as is; EDAC
  ``controller``/``csrow``/``channel`` -> ``mc0/csrow1/ch0``; ``cpu`` -> ``cpu3``;
  otherwise '' (host level). Other labels are not stored: series that differ
  only in them (e.g. node_cpu_seconds_total's ``mode``) share a row key.
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
``remote_write.scan_write_request`` finds series and samples with numpy; each
series' label bytes are matched to a label set resolved earlier (senders push
the same label sets every time) by fingerprint, then *compared byte for byte*
with that label set's bytes, so a match never rests on the hash. New label
sets are parsed and resolved once. Anything the scanner or the cache cannot
vouch for goes through the reference decoder, which also gives the errors.
"""
from __future__ import annotations

import threading
from itertools import chain
from typing import Iterable, Mapping, NamedTuple

import numpy as np
import pyarrow as pa

from telemetry import catalog, schema
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.prometheus_text import PromSample
from telemetry.ingestion import inventory, prometheus_text, remote_write
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


class _Series(NamedTuple):
    cluster: str
    host: str
    component: str
    metric: str
    scale: float
    dcgm: bool
    unknown: bool


def prom_samples_to_table(
    samples: Iterable[PromSample], *, cluster: str, default_host: str | None = None
) -> NormalizeResult:
    """Rows for parsed exposition samples; ``IngestError`` when a series has no host."""
    with _text_lock:
        t = _text_series(cluster, default_host)
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
        return _build_coded(
            t, np.array(idx, dtype=np.int64), np.array(ts, dtype=np.int64), np.array(vals, dtype=np.float64)
        )


def prometheus_text_to_table(
    text: str, *, cluster: str, default_host: str | None = None, default_ts_ms: int
) -> NormalizeResult:
    """Exposition body -> rows, equal to ``prom_samples_to_table(parse_exposition(text, ...))``
    (same rows in the same order, same drops, same unknown names, same errors), fast.

    ``prometheus_text.scan_exposition`` gives a series number per sample from
    the per-line caches kept here per (cluster, default host); the columns are
    then gathered with numpy from the resolved series. Bodies the scanner does
    not vouch for (bad input, ``# EOF``) take the reference path.
    """
    with _text_lock:
        t = _text_series(cluster, default_host)
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
            return _build_coded(t, np.array(ids, dtype=np.int64), ts, np.array(values, dtype=np.float64))
    samples = prometheus_text.parse_exposition(text, default_ts_ms=default_ts_ms)
    return prom_samples_to_table(samples, cluster=cluster, default_host=default_host)


class _TextSeries:
    """Resolved exposition series under one (cluster, default host): numbered, with
    the per-series columns ``_build_coded`` gathers from (numpy arrays grown by
    doubling, strings as codes into pools), and the keys that lead to a number."""

    def __init__(self, cluster: str, default_host: str | None) -> None:
        self.cluster, self.default_host = cluster, default_host
        self.heads: dict[str, int] = {}  # exposition line text up to its last '}'
        self.names: dict[str, int] = {}  # bare metric name (lines without labels)
        self.by_labels: dict[tuple, int] = {}  # (name, sorted labels)
        self.size = 0
        self.dcgm = np.empty(0, dtype=bool)
        self.scale = np.empty(0, dtype=np.float64)
        self.unknown = np.empty(0, dtype=bool)
        self.codes = {c: np.empty(0, dtype=np.int32) for c in _Templates.COLUMNS}
        self.pools: dict[str, dict[str, int]] = {c: {} for c in _Templates.COLUMNS}
        self.pool_arrays: dict[str, pa.Array | None] = {c: None for c in _Templates.COLUMNS}
        self.metric_names: list[str] = []

    def intern(self, name: str, labels: tuple[tuple[str, str], ...]) -> int:
        """Number of the series; resolves it the first time (``IngestError`` when it has no host)."""
        key = (name, labels)
        i = self.by_labels.get(key)
        if i is not None:
            return i
        res = _resolve(name, dict(labels), self.cluster, self.default_host)
        if self.size == len(self.dcgm):
            cap = max(1024, 2 * self.size)

            def grow(arr: np.ndarray) -> np.ndarray:
                out = np.zeros(cap, dtype=arr.dtype)
                out[: self.size] = arr[: self.size]
                return out

            self.dcgm, self.scale, self.unknown = grow(self.dcgm), grow(self.scale), grow(self.unknown)
            self.codes = {c: grow(v) for c, v in self.codes.items()}
        i = self.size
        self.dcgm[i], self.scale[i], self.unknown[i] = res.dcgm, res.scale, res.unknown
        _intern_codes(self, i, res)
        self.metric_names.append(res.metric)
        self.by_labels[key] = i
        self.size += 1
        return i

    def pool_array(self, col: str) -> pa.Array:
        arr = self.pool_arrays[col]
        if arr is None:
            arr = self.pool_arrays[col] = pa.array(list(self.pools[col]), type=pa.string())
        return arr


_TEXT_SERIES_MAX = 1_000_000  # series (or keys) per context before it starts over
_text_contexts: dict[tuple[str, str | None], _TextSeries] = {}
_text_lock = threading.Lock()  # web requests are threads; the tables grow in place


def _text_series(cluster: str, default_host: str | None) -> _TextSeries:
    """The context for this call; only swapped between calls, so numbers stay valid within one."""
    key = (cluster, default_host)
    t = _text_contexts.get(key)
    if t is None or max(t.size, len(t.heads), len(t.names)) > _TEXT_SERIES_MAX:
        if len(_text_contexts) >= 64:
            _text_contexts.clear()
        t = _text_contexts[key] = _TextSeries(cluster, default_host)
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
    return _build(uniq, np.repeat(per_series, counts), ts, vals, unknown)


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
    """Label sets seen under one ``cluster`` argument: their exact bytes and resolved columns.

    Per-template numbers live in numpy arrays grown by doubling, strings as
    codes into per-column pools, so a request costs numpy gathers, not Python
    work per series.
    """

    COLUMNS = ("cluster", "host", "component", "metric")

    def __init__(self) -> None:
        self.size = 0  # label sets
        self.raw = np.empty(0, dtype=object)
        self.length = np.empty(0, dtype=np.int64)
        self.dcgm = np.empty(0, dtype=bool)
        self.scale = np.empty(0, dtype=np.float64)
        self.unknown = np.empty(0, dtype=bool)
        self.codes = {c: np.empty(0, dtype=np.int32) for c in self.COLUMNS}
        self.pools: dict[str, dict[str, int]] = {c: {} for c in self.COLUMNS}
        self.pool_arrays: dict[str, pa.Array | None] = {c: None for c in self.COLUMNS}
        self.metric_names: list[str] = []
        self.by_bytes: dict[bytes, int] = {}
        # Fingerprints depend on the label bytes' offset modulo 8, so one label set may have
        # several: fingerprint -> label set id.
        self.by_fp: dict[int, int] = {}
        self._sorted_fp = np.empty(0, dtype=np.uint64)
        self._sorted_tid = np.empty(0, dtype=np.int64)
        self._dirty = False

    def _grow(self) -> None:
        cap = max(1024, 2 * len(self.length))

        def grow(arr: np.ndarray) -> np.ndarray:
            out = np.zeros(cap, dtype=arr.dtype) if arr.dtype != object else np.empty(cap, dtype=object)
            out[: self.size] = arr[: self.size]
            return out

        self.raw, self.length = grow(self.raw), grow(self.length)
        self.dcgm, self.scale, self.unknown = grow(self.dcgm), grow(self.scale), grow(self.unknown)
        self.codes = {c: grow(v) for c, v in self.codes.items()}

    def add(self, fp: int, raw: bytes, res: _Series | None) -> None:
        """Register label bytes (resolved as ``res``) under fingerprint ``fp``."""
        i = self.by_bytes.get(raw)
        if i is None:
            if self.size == len(self.length):
                self._grow()
            i = self.size
            self.raw[i], self.length[i] = raw, len(raw)
            self.dcgm[i], self.scale[i], self.unknown[i] = res.dcgm, res.scale, res.unknown
            _intern_codes(self, i, res)
            self.metric_names.append(res.metric)
            self.by_bytes[raw] = i
            self.size += 1
        self.by_fp[fp] = i
        self._dirty = True

    def known(self, raw: bytes) -> bool:
        return raw in self.by_bytes

    def lookup(self, fps: np.ndarray) -> np.ndarray:
        """Label set id per fingerprint, -1 where unknown."""
        if self._dirty:
            keys = np.fromiter(self.by_fp.keys(), dtype=np.uint64, count=len(self.by_fp))
            ids = np.fromiter(self.by_fp.values(), dtype=np.int64, count=len(self.by_fp))
            order = np.argsort(keys)
            self._sorted_fp, self._sorted_tid = keys[order], ids[order]
            self._dirty = False
        if not len(self._sorted_fp):
            return np.full(len(fps), -1, dtype=np.int64)
        pos = np.searchsorted(self._sorted_fp, fps)
        np.minimum(pos, len(self._sorted_fp) - 1, out=pos)
        return np.where(self._sorted_fp[pos] == fps, self._sorted_tid[pos], -1)

    def pool_array(self, col: str) -> pa.Array:
        arr = self.pool_arrays[col]
        if arr is None:
            arr = self.pool_arrays[col] = pa.array(list(self.pools[col]), type=pa.string())
        return arr


_TEMPLATES_MAX = 500_000  # label sets per cluster argument before the cache starts over
_templates: dict[str, _Templates] = {}
_templates_lock = threading.Lock()  # web and worker threads share the cache


def _scan_to_table(raw: bytes, scan: remote_write.RWScan, cluster: str) -> NormalizeResult | None:
    """Rows for a scanned request, or ``None`` to send it through the reference path."""
    t = _templates.get(cluster)
    if t is None or len(t.by_fp) > _TEMPLATES_MAX:
        if len(_templates) > 64:
            _templates.clear()
        t = _templates[cluster] = _Templates()
    start, end, fps = scan.label_start, scan.label_end, scan.fingerprint
    tid = t.lookup(fps)
    miss = np.flatnonzero(tid < 0)
    if len(miss):
        new_fp, first = np.unique(fps[miss], return_index=True)
        for fp, i in zip(new_fp.tolist(), miss[first].tolist()):
            section = raw[int(start[i]) : int(end[i])]
            if t.known(section):  # a known label set at another offset modulo 8
                t.add(fp, section, None)
                continue
            try:
                parsed = remote_write.parse_label_fields(section, i)
                if parsed is None:
                    return None
                labels = parsed[1]
                res = _resolve(labels["__name__"], labels, cluster, None)
            except IngestError:
                return None  # the reference path reports it, naming the series
            t.add(fp, section, res)
        tid = t.lookup(fps)
        if (tid < 0).any():
            return None
    # The fingerprint only proposes a label set; the bytes decide.
    if not np.array_equal(t.length[tid], end - start):
        return None
    if not all(map(raw.startswith, t.raw[tid].tolist(), start.tolist())):
        return None
    idx = tid if len(scan.values) == len(tid) else np.repeat(tid, scan.counts)
    return _build_coded(t, idx, scan.timestamps, scan.values)


def _build_coded(t: _Templates, idx: np.ndarray, ts: np.ndarray, vals: np.ndarray) -> NormalizeResult:
    """``_build`` for template ids: same rows, drops and unknown names."""
    n = len(vals)
    keep = ~np.isnan(vals)
    row_dcgm = t.dcgm[idx]
    if row_dcgm.any():
        blank = _dcgm_blank(vals)
        keep &= ~(row_dcgm & blank)
    unknown: set[str] = set()
    row_unknown = t.unknown[idx]
    if row_unknown.any():  # named even when all their samples were blank, like the reference path
        unknown = {t.metric_names[i] for i in np.unique(idx[row_unknown]).tolist()}
    kept = int(keep.sum())
    dropped = n - kept
    if dropped:
        idx, ts, vals = idx[keep], ts[keep], vals[keep]
    if not kept:
        return NormalizeResult(schema.SAMPLES.empty_table(), dropped, unknown)
    scale = t.scale[idx]
    if (scale != 1.0).any():
        vals = vals * scale

    def column(col: str) -> pa.Array:
        codes = pa.array(t.codes[col][idx], type=pa.int32())
        return pa.DictionaryArray.from_arrays(codes, t.pool_array(col)).cast(pa.string())

    table = pa.Table.from_arrays(
        [pa.array(ts, type=pa.int64()).cast(schema.TS), *(column(c) for c in _Templates.COLUMNS),
         pa.array(vals, type=pa.float64())],
        schema=schema.SAMPLES,
    )
    return NormalizeResult(table, dropped, unknown)


def _build(
    series: list[_Series], idx: np.ndarray, ts: np.ndarray, vals: np.ndarray, unknown: set[str]
) -> NormalizeResult:
    n = len(vals)
    if not series or n == 0:
        return NormalizeResult(schema.SAMPLES.empty_table(), 0, unknown)
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
    return NormalizeResult(table, dropped, unknown)


def _resolve(name: str, labels: Mapping[str, str], cluster: str, default_host: str | None) -> _Series:
    host = labels.get("Hostname") or labels.get("hostname") or _strip_port(labels.get("instance")) or default_host
    if not host:
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        raise IngestError(
            f"no host for sample {name}{{{shown}}}: no Hostname/hostname/instance label and no default host",
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
    inventory.note(inventory.from_labels(name, labels, labels.get("cluster") or cluster, host, component))
    return _Series(
        cluster=labels.get("cluster") or cluster,
        host=host,
        component=component,
        metric=canonical,
        scale=scale,
        dcgm=name.startswith("DCGM_"),
        unknown=unknown,
    )


def forget_label_sets() -> None:
    """Drop every resolved label set, so the next request resolves (and notes the inventory of)
    each again: after its inventory could not be written."""
    with _text_lock:
        _text_contexts.clear()
    with _templates_lock:
        _templates.clear()
    _rw_cache.clear()


def _strip_port(instance: str | None) -> str | None:
    if not instance:
        return None
    if instance.startswith("["):  # [ipv6]:port
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    if instance.count(":") == 1:
        return instance.rsplit(":", 1)[0]
    return instance  # bare IPv6 or host


def component_of(labels: Mapping[str, str]) -> str:
    """Component string for one series' labels ('' = host level)."""
    get = labels.get
    gpu = get("gpu")
    if gpu:
        comp = f"gpu{gpu}"
        if get("GPU_I_ID"):
            comp += f"/mig{get('GPU_I_ID')}"
        if get("nvlink"):
            comp += f"/nvlink{get('nvlink')}"
        return comp
    switch = get("nvswitch")
    if switch:
        return f"nvswitch{switch}" + (f"/nvlink{get('nvlink')}" if get("nvlink") else "")
    uuid = get("UUID") or get("uuid") or get("gpu_uuid")
    if uuid:
        return uuid
    chip, sensor = get("chip"), get("sensor")
    if chip or sensor:
        return "/".join(x for x in (chip, sensor) if x)
    if get("bus") and get("function") and get("device"):
        return f"{get('segment') or '0000'}:{get('bus')}:{get('device')}.{get('function')}".lower()
    device = get("device")
    if device:
        port = get("port")
        return f"{device}/{port}" if port else device
    controller = get("controller")
    if controller:
        comp = f"mc{controller}"
        if get("csrow"):
            comp += f"/csrow{get('csrow')}"
        if get("channel"):
            comp += f"/ch{get('channel')}"
        return comp
    cpu = get("cpu")
    if cpu:
        return f"cpu{cpu}" + (f"/core{get('cpucore')}" if get("cpucore") else "")
    return ""


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
