"""Remote-write 1.0 decoding: round trip, exact NaN bits, every kind of bad body."""
import math
import struct

import cramjam
import pytest

from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.remote_write import RWSeries, WriteRequest, decode_write_request, encode_write_request

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def series():
    return [
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "gpu-a017"}, [1000, 2000], [41.0, 42.5]),
        RWSeries({"__name__": "node_load1", "instance": "gpu-a017:9100", "job": "node"}, [1000], [0.0]),
        RWSeries({"__name__": "up", "instance": "x:1"}, [], []),
    ]


def test_round_trip_keeps_labels_timestamps_and_values():
    out = decode_write_request(encode_write_request(series()))
    assert [(dict(s.labels), s.timestamps, s.values) for s in out] == [
        (dict(s.labels), s.timestamps, s.values) for s in series()
    ]


def test_the_stale_marker_keeps_its_exact_bits():
    [s] = decode_write_request(encode_write_request([RWSeries({"__name__": "m", "instance": "h"}, [5], [STALE])]))
    assert struct.pack("<d", s.values[0]) == struct.pack("<Q", 0x7FF0000000000002)


def test_negative_timestamps_and_infinities_survive():
    [s] = decode_write_request(
        encode_write_request([RWSeries({"__name__": "m", "instance": "h"}, [-5, 0], [math.inf, -math.inf])])
    )
    assert s.timestamps == [-5, 0] and s.values == [math.inf, -math.inf]


def test_identical_label_sets_share_one_read_only_mapping_and_key():
    a, b = decode_write_request(encode_write_request([series()[0], series()[0]]))
    assert a.labels is b.labels and a.key == b.key and a.key
    with pytest.raises(TypeError):
        a.labels["gpu"] = "9"


def test_metadata_field_3_is_ignored():
    raw = WriteRequest()
    ts = raw.timeseries.add()
    ts.labels.add(name="__name__", value="m")
    ts.samples.add(value=1.0, timestamp=7)
    body = raw.SerializeToString() + b"\x1a\x03\x08\x01\x12"[:0] + b"\x1a\x02\x08\x01"  # field 3: a small message
    [s] = decode_write_request(bytes(cramjam.snappy.compress_raw(body)))
    assert s.values == [1.0]


def test_a_body_that_is_not_snappy_is_rejected():
    with pytest.raises(IngestError) as exc:
        decode_write_request(b"\xff\xff\xff\xff\xff garbage")
    assert "snappy" in exc.value.reason and exc.value.field == "body"


def test_snappy_framed_format_is_rejected():
    framed = bytes(cramjam.snappy.compress(WriteRequest().SerializeToString() + b"\x0a\x00"))
    with pytest.raises(IngestError):
        decode_write_request(framed)


def test_snappy_data_that_is_not_protobuf_is_rejected():
    with pytest.raises(IngestError) as exc:
        decode_write_request(bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\x0f")))
    assert "protobuf" in exc.value.reason


def test_a_series_without_name_is_rejected_naming_the_series():
    with pytest.raises(IngestError) as exc:
        decode_write_request(encode_write_request([series()[0], RWSeries({"instance": "h"}, [1], [1.0])]))
    assert exc.value.field == "__name__" and "timeseries[1]" in exc.value.reason


def test_a_repeated_label_name_is_rejected():
    raw = WriteRequest()
    ts = raw.timeseries.add()
    ts.labels.add(name="__name__", value="m")
    ts.labels.add(name="a", value="1")
    ts.labels.add(name="a", value="2")
    with pytest.raises(IngestError) as exc:
        decode_write_request(bytes(cramjam.snappy.compress_raw(raw.SerializeToString())))
    assert "given twice" in exc.value.reason


def test_an_empty_body_is_an_empty_request():
    assert decode_write_request(bytes(cramjam.snappy.compress_raw(b""))) == []
