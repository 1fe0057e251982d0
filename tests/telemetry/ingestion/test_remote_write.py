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


# --- fast scanner (scan_write_request) ----------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import os  # noqa: E402

import numpy as np  # noqa: E402

from telemetry.ingestion import remote_write  # noqa: E402
from telemetry.ingestion.remote_write import (  # noqa: E402
    decompress,
    labels_key,
    parse_label_fields,
    scan_write_request,
    scan_write_request_numpy,
)


def _compiled(raw):
    if remote_write._rwscan is None:
        if os.environ.get("CI") == "true":  # CI builds it: a missing scanner there is a broken install
            pytest.fail("the compiled scanner telemetry.ingestion._rwscan was not built")
        pytest.skip("the compiled scanner is not in use (not built at install: no C compiler?, "
                    "or PRECURSOR_COMPILED_SCANNER=0)")
    return remote_write._scan_compiled(raw)


# Every scanner test runs against both: the compiled scanner and the numpy one it replaces.
SCANNERS = pytest.mark.parametrize("scan_fn", [_compiled, scan_write_request_numpy], ids=["compiled", "numpy"])

TS_MS = 1_760_000_000_000


def raw_of(series_list):
    return decompress(encode_write_request(series_list))


def scanned_series(raw, scan_fn=scan_write_request):
    """The scan's view of a request, as (labels, timestamps, value bits) per series.

    ``None`` when the scan or the label check declines (the caller's fallback).
    """
    scan = scan_fn(raw)
    if scan is None:
        return None
    out, at = [], 0
    for i, count in enumerate(scan.counts.tolist()):
        section = raw[int(scan.label_start[i]) : int(scan.label_end[i])]
        parsed = parse_label_fields(section, i)
        if parsed is None:
            return None
        vals = scan.values[at : at + count]
        out.append((dict(parsed[1]), scan.timestamps[at : at + count].tolist(), vals.view("<u8").tolist()))
        at += count
    assert at == len(scan.values)
    return out


def reference_series(raw_series):
    return [
        (dict(s.labels), list(s.timestamps), [struct.unpack("<Q", struct.pack("<d", v))[0] for v in s.values])
        for s in raw_series
    ]


@SCANNERS
def test_scan_matches_the_reference_decoder_for_plain_requests(scan_fn):
    lab = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "gpu-a017"}
    series_list = [
        RWSeries(lab, [TS_MS], [41.0]),
        RWSeries({**lab, "gpu": "1"}, [TS_MS, TS_MS + 15000, TS_MS + 30000], [0.0, STALE, -2.5]),  # 0.0: no value field
        RWSeries({"__name__": "node_load1", "instance": "n1:9100"}, [0], [1.5]),  # ts 0: no timestamp field
        RWSeries({"__name__": "node_load1", "instance": "n2:9100"}, [1], [0.0]),
    ]
    raw = raw_of(series_list)
    assert scanned_series(raw, scan_fn) == reference_series(decode_write_request(encode_write_request(series_list)))


@pytest.mark.parametrize(
    "series_list",
    [
        [RWSeries({"__name__": "m", "instance": "h"}, [-5], [1.0])],  # negative: 10-byte varint
        [RWSeries({"__name__": "m", "instance": "h"}, [2**60], [1.0])],  # beyond 7 varint bytes
        [RWSeries({"__name__": "m", "instance": "h"}, [], [])],  # a series without samples
        [RWSeries({"__name__": "m", "instance": "h"}, [0], [0.0])],  # empty Sample message
    ],
)
@SCANNERS
def test_scan_declines_what_it_does_not_handle(series_list, scan_fn):
    assert scan_fn(raw_of(series_list)) is None


@SCANNERS
def test_scan_declines_metadata_and_fields_out_of_order(scan_fn):
    req = WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="metric_name_x")
    ts.labels.add(name="instance", value="host-1")
    ts.samples.add(value=1.0, timestamp=TS_MS)
    plain = req.SerializeToString()
    assert scan_fn(plain) is not None
    assert scan_fn(plain + b"\x1a\x02\x08\x01") is None  # metadata field 3
    series_bytes = ts.SerializeToString()
    label_part, sample_part = series_bytes[: len(series_bytes) - 18], series_bytes[-18:]
    swapped = sample_part + label_part  # samples before labels: valid protobuf, not the plain layout
    body = b"\x0a" + bytes([len(swapped)]) + swapped
    assert scan_fn(body) is None


@SCANNERS
def test_label_bytes_that_look_like_samples_do_not_fool_the_scan(scan_fn):
    tricky = "a\x12\x10\x09" + "\x00" * 8 + "\x10" + "\x7f"  # a sample-shaped label value
    series_list = [RWSeries({"__name__": "m", "instance": "h", "x": tricky}, [TS_MS], [3.0])] * 2
    raw = raw_of(series_list)
    got = scanned_series(raw, scan_fn)
    if got is not None:  # when the scan accepts it, it must be exactly right
        assert got == reference_series(decode_write_request(encode_write_request(series_list)))


def test_label_keys_are_unambiguous():
    # Two Label messages vs. one message holding the same bytes: a plain join would collide.
    one = b"\x0a\x01a\x12\x01b"
    two = b"\x0a\x01c\x12\x01d"
    assert labels_key([one, two]) != labels_key([one + two])


def test_parse_label_fields_refuses_sections_with_other_fields():
    section = labels_key([b"\x0a\x08__name__\x12\x01m"])
    assert parse_label_fields(section, 0)[1] == {"__name__": "m"}
    assert parse_label_fields(section + b"\x12\x02\x10\x01", 0) is None  # a sample inside
    assert parse_label_fields(section + b"\x18\x01", 0) is None  # unknown field 3
    assert parse_label_fields(b"\x0a\x80\x00" + section[2:], 0) is None  # non-minimal length varint


ts_ms = st.one_of(st.integers(0, 2**49 - 1), st.integers(-(2**63), 2**63 - 1), st.just(0))
plain_series = st.builds(
    lambda name, labels, samples: RWSeries(
        {"__name__": name, **{k: v for k, v in labels.items() if v}}, [t for t, _ in samples], [v for _, v in samples]
    ),
    st.text(min_size=1, max_size=10),
    st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=6), st.text(max_size=12), max_size=5),
    st.lists(st.tuples(ts_ms, st.one_of(st.floats(allow_nan=True), st.just(0.0))), min_size=1, max_size=4),
)


@SCANNERS
@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_series, min_size=1, max_size=6))
def test_scan_agrees_with_the_reference_decoder_whenever_it_answers(scan_fn, series_list):
    raw = raw_of(series_list)
    got = scanned_series(raw, scan_fn)
    if got is not None:
        assert got == reference_series(decode_raw_write_request_(raw))


def decode_raw_write_request_(raw):
    from telemetry.ingestion.remote_write import decode_raw_write_request

    return decode_raw_write_request(raw)


@SCANNERS
@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_series, min_size=1, max_size=4), st.data())
def test_scan_of_corrupted_requests_never_raises_and_never_lies(scan_fn, series_list, data):
    raw = bytearray(raw_of(series_list))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw)
    scan = scan_fn(raw)  # must not raise
    if scan is None:
        return
    try:
        reference = reference_series(decode_raw_write_request_(raw))
    except IngestError:
        reference = None
    got = []
    at = 0
    for i, count in enumerate(scan.counts.tolist()):
        try:
            parsed = parse_label_fields(raw[int(scan.label_start[i]) : int(scan.label_end[i])], i)
        except IngestError:
            return  # labels invalid: the caller takes the reference path, which reports it
        if parsed is None:
            return
        got.append((dict(parsed[1]), scan.timestamps[at : at + count].tolist(),
                    scan.values[at : at + count].view("<u8").tolist()))
        at += count
    assert got == reference


@pytest.mark.parametrize("shift", range(1, 9))
@SCANNERS
def test_a_label_set_fingerprints_the_same_wherever_it_sits_in_the_body(shift, scan_fn):
    # proto3 omits zero values, so a label set's offset moves between pushes; the cache key must not.
    scan_write_request = scan_fn
    target = RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "3", "Hostname": "gpu-a017"}, [1000], [41.0])
    pad = RWSeries({"__name__": "pad", "instance": "x" * shift}, [1000], [1.0])
    plain = scan_write_request(bytes(cramjam.snappy.decompress_raw(encode_write_request([target]))))
    moved = scan_write_request(bytes(cramjam.snappy.decompress_raw(encode_write_request([pad, target]))))
    assert plain is not None and moved is not None
    assert moved.label_start[1] != plain.label_start[0]
    assert moved.fingerprint[1] == plain.fingerprint[0]
    assert moved.fingerprint[0] != moved.fingerprint[1]


def _same_scan(a, b):
    """Both scanners' answers, array for array and bit for bit (values compared as their bits)."""
    if a is None or b is None:
        return a is None and b is None
    return all(np.array_equal(x.view(np.uint64) if x.dtype.kind == "f" else x,
                              y.view(np.uint64) if y.dtype.kind == "f" else y) for x, y in zip(a, b))


def test_both_scanners_give_the_same_arrays_and_hash_lanes_for_a_fleet_shaped_request():
    # DCGM series as dcgm-exporter labels them, node_exporter series that differ only in their
    # last bytes (temp2 / temp5), one series with several samples and a stale marker.
    body = []
    for g in range(8):
        for field in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"):
            body.append(RWSeries({"__name__": field, "gpu": str(g), "UUID": f"GPU-5f2e-{g}",
                                  "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0", "device": f"nvidia{g}",
                                  "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-a017"},
                                 [TS_MS + g], [40.0 + g]))
    for sensor in ("temp2", "temp5"):
        body.append(RWSeries({"__name__": "node_hwmon_temp_celsius", "chip": "platform_coretemp_0",
                              "instance": "gpu-a017:9100", "job": "node", "sensor": sensor}, [TS_MS], [51.0]))
    body.append(RWSeries({"__name__": "node_load1", "instance": "gpu-a017:9100", "job": "node"},
                         [TS_MS, TS_MS + 15000, TS_MS + 30000], [1.5, STALE, 0.0]))
    raw = raw_of(body)
    compiled, numpy_scan = _compiled(raw), scan_write_request_numpy(raw)
    assert compiled is not None and numpy_scan is not None
    assert _same_scan(compiled, numpy_scan)
    temp2, temp5 = len(body) - 3, len(body) - 2
    assert compiled.fingerprint[temp2] != compiled.fingerprint[temp5]
    assert compiled.fingerprint2[temp2] != compiled.fingerprint2[temp5]
    assert scanned_series(raw, _compiled) == reference_series(decode_write_request(encode_write_request(body)))


def test_the_compiled_scanner_hashes_label_sets_longer_than_its_key_table():
    # Position keys past the table the caller passes are computed in C: same lanes as numpy's.
    long_labels = {"__name__": "m", "instance": "h", **{f"k{i:03d}": "v" * 40 for i in range(120)}}
    raw = raw_of([RWSeries(long_labels, [TS_MS], [1.0])])
    compiled = _compiled(raw)
    assert compiled is not None and compiled.label_end[0] - compiled.label_start[0] > 8 * 512
    assert _same_scan(compiled, scan_write_request_numpy(raw))


def _effective(scan, raw):
    """What the caller makes of a scan: ``None`` where it declines, or where a label section it
    returns is not label fields (the numpy scanner can return one holding an empty Sample; the
    caller's label check then takes the reference path, as the compiled scanner does at once)."""
    if scan is None:
        return None
    for i in range(len(scan.counts)):
        try:
            if parse_label_fields(raw[int(scan.label_start[i]) : int(scan.label_end[i])], i) is None:
                return None
        except IngestError:
            return None
    return scan


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_series, min_size=1, max_size=6), st.data())
def test_both_scanners_agree_on_plain_and_corrupted_requests(series_list, data):
    raw = raw_of(series_list)
    assert _same_scan(_effective(_compiled(raw), raw), _effective(scan_write_request_numpy(raw), raw))
    broken = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        broken[data.draw(st.integers(0, len(broken) - 1))] = data.draw(st.integers(0, 255))
    broken = bytes(broken)
    compiled = _effective(_compiled(broken), broken)
    numpy_scan = _effective(scan_write_request_numpy(broken), broken)
    if compiled is not None and numpy_scan is not None:
        assert _same_scan(compiled, numpy_scan)


def _root(arr):
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def test_the_compiled_scanner_returns_compact_arrays_not_views_of_its_scratch_buffers():
    # Its scratch buffers are sized for the worst case (a sample per 4 bytes of body); the stored
    # tables wrap the returned arrays without copying, and the rollup buffer keeps them a minute:
    # views would keep ~20x the rows' memory alive (bench ingest-fleet: peak RSS +900 MB).
    body = [RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(g), "Hostname": "gpu-a017",
                      "UUID": f"GPU-{g:08d}"}, [TS_MS], [40.0 + g]) for g in range(64)]
    raw = raw_of(body)
    scan = _compiled(raw)
    assert scan is not None and len(scan.values) == 64
    for arr in (scan.timestamps, scan.values):
        assert _root(arr).nbytes <= 2 * 8 * 64  # timestamps and values of 64 samples, nothing more
    for arr in (scan.label_start, scan.label_end, scan.fingerprint, scan.fingerprint2, scan.counts):
        assert _root(arr).nbytes <= 5 * 8 * 64
    assert len(raw) // 4 > 2 * 64  # (the scratch buffer would have been larger: the check can fail)
