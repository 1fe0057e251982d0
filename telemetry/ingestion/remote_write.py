"""Decoder (and test encoder) for Prometheus remote-write 1.0 request bodies.

A body is a Snappy *block*-compressed protobuf ``prometheus.WriteRequest``::

    WriteRequest { repeated TimeSeries timeseries = 1; }   // 2, 3 reserved (metadata: ignored)
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    Label        { string name = 1; string value = 2; }
    Sample       { double value = 1; int64 timestamp = 2; }  // ms since epoch

The message classes are built at import time from a hand-written
``FileDescriptorProto`` (no protoc step), so parsing runs in the protobuf C
runtime (upb). Labels are declared there as ``repeated bytes`` rather than
``Label`` messages: the wire bytes are identical, and the raw encoding of a
series' label set is then a hashable key. Identical label sets repeat in every
request a sender pushes, so labels are decoded into a dict once per distinct
set (module-level cache) instead of once per series.

``RWSeries`` is columnar: ``labels`` (a read-only mapping shared by every
series with the same label set: do not mutate), ``timestamps`` (ms) and
``values`` as parallel lists, and ``key`` (the label fields exactly as on the
wire, tags and lengths included, so distinct label sets never share a key: a
cache key for the normaliser). Values keep their exact bits, so the Prometheus
stale marker NaN (0x7ff0000000000002) survives decoding.

``scan_write_request`` is the fast path used by ``normalize.decode_to_table``:
it locates every series and sample of a *plainly encoded* request with numpy
(no Python work per series) and returns column arrays plus, per series, the
byte range of its label fields and a 128-bit hash of those bytes (``label_hash``:
two independent, process-seeded 64-bit lanes; label sets differing in any byte,
even only the last, get unrelated values). It returns
``None`` for anything it does not fully understand (fields out of order or
unknown, zero-sample series, exemplars, odd varints, ...): callers then use
``decode_write_request``, which stays the reference decoder. Two implementations give the
same arrays and hash lanes: the compiled scanner (``_rwscan.c``: one sequential pass, without
the GIL, so concurrent pushes decode on both cores) and the numpy one (``scan_write_request_numpy``),
the fallback where no C compiler built the other. What it does
return is exact: every series and sample boundary is checked against the
length prefixes, so a match can only be the real protobuf parse; the label
bytes themselves are validated by the caller (see ``decode_to_table``).
"""
from __future__ import annotations

import os
import types
from typing import Mapping, NamedTuple

import cramjam
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from telemetry.ingestion import limits
from telemetry.ingestion.errors import IngestError

try:  # the compiled scanner (see scan_write_request); optional at install
    from telemetry.ingestion import _rwscan
except ImportError:  # pragma: no cover - an install without a C compiler
    _rwscan = None
if os.environ.get("PRECURSOR_COMPILED_SCANNER", "1") == "0":
    _rwscan = None
COMPILED_SCANNER = _rwscan is not None

MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024  # a sender batch is ~MBs; refuse snappy bombs


class RWSeries(NamedTuple):
    labels: Mapping[str, str]
    timestamps: list[int]
    values: list[float]
    key: bytes = b""


def _build_messages():
    f = descriptor_pb2.FileDescriptorProto(name="precursor_prompb.proto", package="precursor.prompb", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    rep, opt = T.LABEL_REPEATED, T.LABEL_OPTIONAL

    def msg(name, *fields):
        m = f.message_type.add(name=name)
        for fname, num, label, ftype, tname in fields:
            fd = m.field.add(name=fname, number=num, label=label, type=ftype)
            if tname:
                fd.type_name = tname

    msg("Label", ("name", 1, opt, T.TYPE_STRING, None), ("value", 2, opt, T.TYPE_STRING, None))
    msg("Sample", ("value", 1, opt, T.TYPE_DOUBLE, None), ("timestamp", 2, opt, T.TYPE_INT64, None))
    msg("TimeSeries", ("labels", 1, rep, T.TYPE_MESSAGE, ".precursor.prompb.Label"),
        ("samples", 2, rep, T.TYPE_MESSAGE, ".precursor.prompb.Sample"))
    msg("WriteRequest", ("timeseries", 1, rep, T.TYPE_MESSAGE, ".precursor.prompb.TimeSeries"))
    # Decoding view: same wire format, labels kept as raw bytes (see module doc).
    msg("RawTimeSeries", ("labels", 1, rep, T.TYPE_BYTES, None),
        ("samples", 2, rep, T.TYPE_MESSAGE, ".precursor.prompb.Sample"))
    msg("RawWriteRequest", ("timeseries", 1, rep, T.TYPE_MESSAGE, ".precursor.prompb.RawTimeSeries"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"precursor.prompb.{n}"))  # noqa: E731
    return get("WriteRequest"), get("RawWriteRequest"), get("RawTimeSeries"), get("Label")


WriteRequest, _RawWriteRequest, _RawTimeSeries, _Label = _build_messages()

_LABELS_CACHE_MAX = 500_000
_labels_cache: dict[bytes, Mapping[str, str]] = {}


def decompress(body: bytes) -> bytes:
    """The protobuf bytes of a snappy block-compressed body; ``IngestError`` when it is not one."""
    limits.check_snappy_size(body, MAX_DECOMPRESSED_BYTES)  # before inflating: a bomb declares its size
    try:
        raw = cramjam.snappy.decompress_raw(body)
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise IngestError(f"body is not snappy block-compressed data ({exc})", field="body") from None
    if len(raw) > MAX_DECOMPRESSED_BYTES:
        raise IngestError(f"decompressed body too large ({len(raw)} bytes)", field="body")
    return bytes(raw)


def decode_write_request(body: bytes) -> list[RWSeries]:
    """Decompress and decode one remote-write body; ``IngestError`` when it is not one."""
    return decode_raw_write_request(decompress(body))


def decode_raw_write_request(raw: bytes) -> list[RWSeries]:
    """``decode_write_request`` for already decompressed protobuf bytes."""
    req = _RawWriteRequest()
    try:
        req.ParseFromString(raw)
    except DecodeError as exc:
        raise IngestError(f"body is not a protobuf WriteRequest ({exc})", field="body") from None
    cache = _labels_cache
    out: list[RWSeries] = []
    append = out.append
    for i, ts in enumerate(req.timeseries):
        raw_labels = list(ts.labels)
        key = labels_key(raw_labels)
        labels = cache.get(key)
        if labels is None:
            labels = _decode_labels(raw_labels, i)
            if len(cache) >= _LABELS_CACHE_MAX:
                cache.clear()
            cache[key] = labels
        samples = ts.samples
        append(RWSeries(labels, [s.timestamp for s in samples], [s.value for s in samples], key))
    return out


def labels_key(raw_labels: list[bytes]) -> bytes:
    """The canonical wire encoding of a series' label fields (unambiguous, unlike a plain join)."""
    return b"".join([b"\x0a" + varint(len(x)) + x for x in raw_labels])


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def parse_label_fields(section: bytes, index: int) -> tuple[list[bytes], Mapping[str, str]] | None:
    """Raw Label messages and decoded labels of a bytes range that must hold label fields only.

    ``None`` when the range holds anything else or is not canonically encoded
    (the caller then takes the reference path); ``IngestError`` for the same
    label problems ``decode_write_request`` reports.
    """
    ts = _RawTimeSeries()
    try:
        ts.ParseFromString(section)
    except DecodeError:
        return None
    raw_labels = list(ts.labels)
    if len(ts.samples) or labels_key(raw_labels) != section:
        return None  # samples, unknown fields or odd encodings in between: not plain labels
    return raw_labels, _decode_labels(raw_labels, index)


def _decode_labels(raw_labels: list[bytes], index: int) -> Mapping[str, str]:
    where = f"timeseries[{index}]"
    out: dict[str, str] = {}
    lab = _Label()
    for raw in raw_labels:
        try:
            lab.ParseFromString(raw)
        except DecodeError:
            raise IngestError(f"{where}: a label is not a valid Label message", field="labels") from None
        name, value = lab.name, lab.value
        if not name:
            raise IngestError(f"{where}: label with an empty name", field="labels")
        if name in out:
            raise IngestError(f"{where}: label {name!r} given twice", field=f"label {name}")
        out[name] = value
    if not out.get("__name__"):
        shown = ",".join(f"{k}={v!r}" for k, v in sorted(out.items()))[:200]
        raise IngestError(f"{where}: series without a __name__ label ({{{shown}}})", field="__name__")
    return types.MappingProxyType(out)


def encode_write_request(series: list[RWSeries]) -> bytes:
    """Encode series as a snappy-compressed WriteRequest (tests, benchmarks, senders)."""
    req = WriteRequest()
    for s in series:
        ts = req.timeseries.add()
        for name in sorted(s.labels):  # the spec wants names sorted
            ts.labels.add(name=name, value=s.labels[name])
        for t, v in zip(s.timestamps, s.values):
            ts.samples.add(value=v, timestamp=t)
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


# --- fast path ------------------------------------------------------------------------------


class RWScan(NamedTuple):
    """Columns of a plainly encoded request (see module doc); series in request order."""

    label_start: np.ndarray  # int64 [series]: first byte of the series' label fields
    label_end: np.ndarray  # int64 [series]: one past the last label byte (= first sample tag)
    fingerprint: np.ndarray  # uint64 [series]: lane 1 of the label bytes' 128-bit hash
    counts: np.ndarray  # int64 [series]: samples per series (>= 1)
    timestamps: np.ndarray  # int64 [samples]
    values: np.ndarray  # float64 [samples], exact bits
    fingerprint2: np.ndarray | None = None  # uint64 [series]: lane 2 (independent key)


_MAX_SCAN_ROUNDS = 8
# Two independent keys per process (a sender cannot aim at a collision it cannot compute).
_SEEDS = np.frombuffer(os.urandom(16), dtype=np.uint64).copy()
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_positions: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.uint64), np.empty(0, np.uint64))


def _fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijection in which every input bit moves every output bit."""
    x = x ^ (x >> np.uint64(33))
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


def _position_keys(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per word position and lane, a key mixed in before the word (grown on demand)."""
    global _positions
    a, b = _positions
    if len(a) < n:
        size = max(n, 2 * len(a), 256)
        k = np.arange(size, dtype=np.uint64) * _GOLDEN
        _positions = a, b = _fmix(k ^ _SEEDS[0]), _fmix(k ^ _SEEDS[1] ^ np.uint64(0x5555555555555555))
    return a, b


class _Words:
    """Unaligned little-endian 8-byte reads from a byte buffer, zeros past its end.

    One view of the (zero-padded) buffer with a stride of one byte holds the 8-byte word
    starting at every offset, so a read is a single gather.
    """

    def __init__(self, a: np.ndarray) -> None:
        n = len(a)
        self.n = n
        padded = np.zeros(n + 16, dtype=np.uint8)
        padded[:n] = a
        self._buf = padded  # keeps the memory of the view alive
        self.at = np.ndarray(shape=(n + 8,), dtype="<u8", buffer=padded, offset=0, strides=(1,))

    def read(self, pos: np.ndarray) -> np.ndarray:
        return self.at[pos]


def _byte(word: np.ndarray, k: int) -> np.ndarray:
    return ((word >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64)


def scan_write_request(raw: bytes) -> RWScan | None:
    """Decode of plainly encoded requests; ``None`` -> use ``decode_raw_write_request``.

    The compiled scanner (``_rwscan``, built at install when a C compiler is there) where it is
    importable and not switched off (``PRECURSOR_COMPILED_SCANNER=0``), else the numpy scanner:
    the same arrays and hash lanes for every request either accepts (tests compare them).
    """
    if _rwscan is not None:
        return _scan_compiled(raw)
    return scan_write_request_numpy(raw)


def _scan_compiled(raw: bytes) -> RWScan | None:
    n = len(raw)
    if n < 16:
        return None
    # A series takes at least 22 bytes (header 2, labels 16, one sample 4), a sample 4.
    cap_series, cap_samples = n // 22 + 1, n // 4 + 1
    series = np.empty((5, cap_series), dtype=np.int64)
    samples = np.empty((2, cap_samples), dtype=np.int64)
    ka, kb = _position_keys(512)
    got = _rwscan.scan(raw, ka, kb, int(_SEEDS[0]), int(_SEEDS[1]),
                       series[0], series[1], series[2], series[3], series[4], samples[0], samples[1])
    if got is None:
        return None
    ns, nm = got
    # Compact copies: views would keep the whole over-sized buffers alive as long as the rows
    # (Arrow wraps numeric arrays without copying; the rollup buffer holds them for a minute).
    s = series[:, :ns].copy()
    m = samples[:, :nm].copy()
    return RWScan(s[0], s[1], s[2].view(np.uint64), s[4], m[0], m[1].view("<f8"), s[3].view(np.uint64))


def scan_write_request_numpy(raw: bytes) -> RWScan | None:
    """The numpy scanner (vectorised; no compiled code): ``scan_write_request``'s fallback."""
    n = len(raw)
    if n < 16:
        return None
    a = np.frombuffer(raw, dtype=np.uint8)
    # Sample fields: tag 0x12, length, then the value (0x09 + 8 bytes, omitted when 0.0) and/or the
    # timestamp (0x10 + varint, omitted when 0). Label values may contain the same bytes: such
    # candidates cannot satisfy the length-prefix chain checked below.
    cand = np.flatnonzero(a[:-2] == 0x12)
    size = a[cand + 1].astype(np.int64)
    first = a[cand + 2]
    has_v = first == 0x09
    ok = (has_v & (size >= 9) & (size <= 20)) | ((first == 0x10) & (size >= 2) & (size <= 11))
    cand, size, has_v = cand[ok], size[ok], has_v[ok]
    end = cand + 2 + size
    for _ in range(_MAX_SCAN_ROUNDS):  # drop candidates inside an earlier one's bytes
        inside = np.zeros(len(cand), dtype=bool)
        if len(cand) > 1:
            inside[1:] = cand[1:] < end[:-1]
        if not inside.any():
            break
        keep = ~inside
        cand, size, has_v, end = cand[keep], size[keep], has_v[keep], end[keep]
    else:
        return None
    if len(cand) == 0 or end[-1] != n:
        return None
    words = _Words(a)
    # Values: exact bits (NaN payloads such as the stale marker survive).
    values = np.where(has_v, words.read(cand + 3), np.uint64(0)).view("<f8")
    # Timestamps: optional 0x10 + varint of exactly the remaining length (7 bytes at most here:
    # ms since 1970 need 6; negative or far-future values take the reference path).
    ts_at = cand + 2 + np.where(has_v, 9, 0)
    rest = size - np.where(has_v, 9, 0)
    has_t = rest > 0
    vlen = np.where(has_t, rest - 1, 0)
    if (vlen > 7).any() or (has_t & (vlen < 1)).any():
        return None
    tw = words.read(ts_at)
    if not (_byte(tw, 0)[has_t] == 0x10).all():
        return None
    timestamps = np.zeros(len(cand), dtype=np.uint64)
    for k in range(7):
        b = _byte(tw, k + 1)
        inside = k < vlen
        cont = b >= 0x80
        last = vlen == k + 1
        if (inside & ~last & ~cont).any() or (last & cont).any():
            return None
        timestamps |= np.where(inside, (b & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
    timestamps = timestamps.view(np.int64)
    # Series: runs of adjacent samples; each run closes a TimeSeries field that starts right
    # after the previous one with tag 0x0a and a length reaching exactly to the run's end.
    new_run = np.ones(len(cand), dtype=bool)
    new_run[1:] = cand[1:] != end[:-1]
    run_first = np.flatnonzero(new_run)
    run_last = np.append(run_first[1:], len(cand)) - 1
    series_end = end[run_last]
    series_start = np.concatenate([np.zeros(1, np.int64), series_end[:-1]])
    hw = words.read(series_start)
    if not (_byte(hw, 0) == 0x0A).all():
        return None
    h0, h1, h2 = _byte(hw, 1), _byte(hw, 2), _byte(hw, 3)
    one, two = h0 < 0x80, (h0 >= 0x80) & (h1 < 0x80)
    three = (h0 >= 0x80) & (h1 >= 0x80) & (h2 < 0x80)
    if not (one | two | three).all():
        return None  # series above 2 MiB: not the plain case
    length = np.where(one, h0, np.where(two, (h0 & 0x7F) | (h1 << 7), (h0 & 0x7F) | ((h1 & 0x7F) << 7) | (h2 << 14)))
    label_start = series_start + 1 + np.where(one, 1, np.where(two, 2, 3))
    if not (label_start + length == series_end).all():
        return None
    label_end = cand[run_first]
    lab_len = label_end - label_start
    if (lab_len < 16).any():
        return None  # even a bare __name__ label is longer: something else is going on
    counts = run_last - run_first + 1
    h1, h2 = label_hash(a, words, label_start, label_end)
    return RWScan(label_start, label_end, h1, counts, timestamps, values, h2)


def label_hash(a: np.ndarray, words: _Words, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each byte range (128 bits per label set).

    Each 8-byte word, read from the range's own start (so the result does not depend on where
    the range sits in the body: proto3 omits zero values, so offsets move between pushes) and
    with the bytes past the range's end masked off, is keyed by its position and the lane's
    process-random seed and passed through a bijective mixer; a lane is the sum of those terms,
    mixed again with the length. Ranges that differ in any byte -- including only the last, as
    ``sensor="temp2"`` and ``"temp5"`` do -- differ in a lane with probability 1 - 2**-64, and
    in both with probability 1 - 2**-128: at 4 M distinct label sets the chance that any two
    share both lanes is below 2**-84. The caches key on both lanes (see ``normalize._Templates``).
    """
    del a
    length = end - start
    nwords = (length + 7) // 8
    offsets = np.zeros(len(nwords), dtype=np.int64)
    np.cumsum(nwords[:-1], out=offsets[1:])
    total = int(nwords.sum())
    if total == 0:
        z = np.zeros(len(nwords), np.uint64)
        return z, z.copy()
    ka, kb = _position_keys(int(nwords.max()))
    k = np.arange(total, dtype=np.int64) - np.repeat(offsets, nwords)
    w = words.read(np.repeat(start, nwords) + 8 * k)
    # The last word of a range holds (length % 8) of its bytes, or 8: zero the rest.
    last = offsets + nwords - 1
    rem = (length - 8 * (nwords - 1)).astype(np.uint64)
    keep_bits = rem * np.uint64(8)
    mask = np.where(rem >= 8, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(keep_bits, np.uint64(63))) - np.uint64(1))
    w[last] &= mask
    ln = length.astype(np.uint64)
    h1 = np.add.reduceat(_fmix(w ^ ka[k]), offsets)
    h2 = np.add.reduceat(_fmix(w ^ kb[k]), offsets)
    h1 = _fmix(h1 ^ _fmix(ln ^ _SEEDS[0]))
    h2 = _fmix(h2 ^ _fmix(ln + _SEEDS[1]))
    return h1, h2
