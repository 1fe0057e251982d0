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
``values`` as parallel lists, and ``key`` (the raw label bytes, a cheap cache
key for the normaliser). Values keep their exact bits, so the Prometheus stale
marker NaN (0x7ff0000000000002) survives decoding.
"""
from __future__ import annotations

import types
from typing import Mapping, NamedTuple

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from telemetry.ingestion.errors import IngestError

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
    return get("WriteRequest"), get("RawWriteRequest"), get("Label")


WriteRequest, _RawWriteRequest, _Label = _build_messages()

_LABELS_CACHE_MAX = 500_000
_labels_cache: dict[bytes, Mapping[str, str]] = {}


def decode_write_request(body: bytes) -> list[RWSeries]:
    """Decompress and decode one remote-write body; ``IngestError`` when it is not one."""
    try:
        raw = cramjam.snappy.decompress_raw(body)
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise IngestError(f"body is not snappy block-compressed data ({exc})", field="body") from None
    if len(raw) > MAX_DECOMPRESSED_BYTES:
        raise IngestError(f"decompressed body too large ({len(raw)} bytes)", field="body")
    req = _RawWriteRequest()
    try:
        req.ParseFromString(bytes(raw))
    except DecodeError as exc:
        raise IngestError(f"body is not a protobuf WriteRequest ({exc})", field="body") from None
    cache = _labels_cache
    out: list[RWSeries] = []
    append = out.append
    for i, ts in enumerate(req.timeseries):
        raw_labels = list(ts.labels)
        key = b"".join(raw_labels)
        labels = cache.get(key)
        if labels is None:
            labels = _decode_labels(raw_labels, i)
            if len(cache) >= _LABELS_CACHE_MAX:
                cache.clear()
            cache[key] = labels
        samples = ts.samples
        append(RWSeries(labels, [s.timestamp for s in samples], [s.value for s in samples], key))
    return out


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
