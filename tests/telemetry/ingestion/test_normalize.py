"""Normaliser: host/component/metric mapping, blanks, scale, remote-write path."""
import math
import struct
from pathlib import Path

import pytest

from telemetry import catalog, schema
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.normalize import component_of, prom_samples_to_table, rw_series_to_table
from telemetry.ingestion.prometheus_text import PromSample, parse_exposition
from telemetry.ingestion.remote_write import RWSeries, decode_write_request, encode_write_request

FIXTURES = Path(__file__).parent / "fixtures"
TS = 1_710_000_000_000
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def rows(result):
    return result.table.to_pylist()


def test_dcgm_fixture_maps_host_component_metric_and_drops_blank_sentinels():
    samples = parse_exposition((FIXTURES / "dcgm_h100_scrape.txt").read_text(), default_ts_ms=TS)
    res = prom_samples_to_table(samples, cluster="c1")
    assert res.table.schema == schema.SAMPLES
    assert res.dropped_blank == 3  # int64 and int32 memory-temp sentinels, fp64 power sentinel
    got = {(r["component"], r["metric"]): r["value"] for r in rows(res)}
    temp = catalog.resolve("DCGM_FI_DEV_GPU_TEMP").name
    power = catalog.resolve("DCGM_FI_DEV_POWER_USAGE").name
    assert got[("gpu0", temp)] == 41.0 and got[("gpu1", temp)] == 43.0
    assert got[("gpu0", power)] == pytest.approx(312.447)
    assert ("gpu1", power) not in got
    assert {r["host"] for r in rows(res)} == {"gpu-a017"}  # Hostname and the newer hostname label
    assert {r["cluster"] for r in rows(res)} == {"c1"}
    assert res.table.column("ts").to_pylist()[0].timestamp() * 1000 == TS


def test_node_exporter_fixture_keeps_ib_bytes_unscaled_and_unknown_names():
    samples = parse_exposition((FIXTURES / "node_exporter_ib.txt").read_text(), default_ts_ms=TS)
    res = prom_samples_to_table(samples, cluster="c1", default_host="gpu-a017")
    got = {(r["component"], r["metric"]): r["value"] for r in rows(res)}
    rcv = catalog.resolve("node_infiniband_port_data_received_bytes_total")
    assert got[("mlx5_0/1", rcv.name)] == pytest.approx(9.22159499729932e14 * rcv.scale_for(
        "node_infiniband_port_data_received_bytes_total"))
    assert ("platform_coretemp_0/temp1", catalog.resolve("node_hwmon_temp_celsius").name) in got
    assert res.unknown_metrics == {"node_precursor_fixture_only"}
    assert got[("nvme0n1", "node_precursor_fixture_only")] == 7.0
    assert ("", catalog.resolve("node_load1").name if catalog.resolve("node_load1") else "node_load1") in got


def test_raw_ib_word_counters_are_multiplied_by_the_catalog_scale():
    metric = catalog.resolve("port_xmit_data")
    if metric is None:
        pytest.skip("catalog has no raw port_xmit_data alias")
    res = prom_samples_to_table([PromSample("port_xmit_data", (("device", "mlx5_0"), ("port", "1")), 10.0, TS)],
                                cluster="c", default_host="h")
    assert rows(res)[0]["value"] == 10.0 * metric.scale_for("port_xmit_data") == 40.0


def test_host_falls_back_to_instance_without_port_then_default_then_error():
    s = [PromSample("m", (("instance", "node7:9100"),), 1.0, TS), PromSample("m", (("instance", "[fe80::1]:9100"),), 1.0, TS)]
    assert [r["host"] for r in rows(prom_samples_to_table(s, cluster="c"))] == ["node7", "fe80::1"]
    assert rows(prom_samples_to_table([PromSample("m", (), 1.0, TS)], cluster="c", default_host="d"))[0]["host"] == "d"
    with pytest.raises(IngestError) as exc:
        prom_samples_to_table([PromSample("m", (("gpu", "0"),), 1.0, TS)], cluster="c")
    assert exc.value.field == "host" and 'm{gpu="0"}' in exc.value.reason


def test_a_cluster_label_overrides_the_argument():
    res = prom_samples_to_table([PromSample("m", (("cluster", "east"), ("instance", "h")), 1.0, TS)], cluster="c")
    assert rows(res)[0]["cluster"] == "east"


def test_nan_values_are_dropped_and_counted_but_dcgm_ranges_apply_only_to_dcgm():
    s = [
        PromSample("m", (("instance", "h"),), math.nan, TS),
        PromSample("node_big", (("instance", "h"),), 2147483640.0, TS),
        PromSample("DCGM_FI_DEV_GPU_TEMP", (("instance", "h"), ("gpu", "0")), 2147483640.0, TS),
    ]
    res = prom_samples_to_table(s, cluster="c")
    assert res.dropped_blank == 2 and [r["value"] for r in rows(res)] == [2147483640.0]


@pytest.mark.parametrize(
    "labels, component",
    [
        ({"gpu": "3", "UUID": "GPU-x"}, "gpu3"),
        ({"gpu": "0", "GPU_I_ID": "5"}, "gpu0/mig5"),
        ({"UUID": "GPU-abc"}, "GPU-abc"),
        ({"nvswitch": "2"}, "nvswitch2"),
        ({"device": "mlx5_0", "port": "1"}, "mlx5_0/1"),
        ({"device": "nvme0n1"}, "nvme0n1"),
        ({"device": "eth0"}, "eth0"),
        ({"chip": "platform_coretemp_0", "sensor": "temp1"}, "platform_coretemp_0/temp1"),
        ({"bus": "01", "device": "00", "function": "0", "segment": "0000"}, "0000:01:00.0"),
        ({"controller": "0", "csrow": "1", "channel": "0"}, "mc0/csrow1/ch0"),
        ({"instance": "h"}, ""),
    ],
)
def test_component_from_labels(labels, component):
    assert component_of(labels) == component


def test_remote_write_rows_match_the_text_path_and_drop_stale_markers():
    series = [
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "h1"}, [1000, 2000, 3000], [40.0, STALE, 42.0]),
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1", "hostname": "h1", "cluster": "east"}, [1000], [9.223372036854775794e18]),
        RWSeries({"__name__": "node_precursor_fixture_only", "instance": "h2:9100", "device": "eth0"}, [1000], [5.0]),
    ]
    res = rw_series_to_table(decode_write_request(encode_write_request(series)), cluster="c")
    assert res.table.schema == schema.SAMPLES
    assert res.dropped_blank == 2
    temp = catalog.resolve("DCGM_FI_DEV_GPU_TEMP").name
    assert [(r["host"], r["component"], r["metric"], r["value"]) for r in rows(res)] == [
        ("h1", "gpu0", temp, 40.0), ("h1", "gpu0", temp, 42.0), ("h2", "eth0", "node_precursor_fixture_only", 5.0)
    ]
    assert [r["ts"].timestamp() for r in rows(res)] == [1.0, 3.0, 1.0]
    assert res.unknown_metrics == {"node_precursor_fixture_only"}


def test_remote_write_series_without_host_is_rejected():
    with pytest.raises(IngestError):
        rw_series_to_table([RWSeries({"__name__": "m"}, [1], [1.0])], cluster="c")


def test_empty_inputs_give_empty_tables_with_the_schema():
    assert prom_samples_to_table([], cluster="c").table.schema == schema.SAMPLES
    assert rw_series_to_table([], cluster="c").table.num_rows == 0


# --- decode_to_table: the remote-write fast path ----------------------------------------------

import cramjam  # noqa: E402
import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from telemetry.ingestion import normalize  # noqa: E402
from telemetry.ingestion.normalize import decode_to_table  # noqa: E402
from telemetry.ingestion.remote_write import decompress, scan_write_request  # noqa: E402

NOW = 1_760_000_000_000


def reference(body, cluster="c"):
    try:
        return rw_series_to_table(decode_write_request(body), cluster=cluster)
    except IngestError as exc:
        return exc


def outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except IngestError as exc:
        return exc


def assert_same(got, want):
    if isinstance(want, IngestError):
        assert isinstance(got, IngestError), f"expected IngestError({want}), got {got!r}"
        return
    assert not isinstance(got, Exception), got
    assert got.table.schema == schema.SAMPLES
    assert got.table.equals(want.table), (got.table.to_pylist()[:5], want.table.to_pylist()[:5])
    assert got.dropped_blank == want.dropped_blank and got.unknown_metrics == want.unknown_metrics
    assert got.labels_not_stored == want.labels_not_stored


def dcgm_series(hosts=3, gpus=2, ts=NOW, spp=1):
    out = []
    for h in range(hosts):
        for g in range(gpus):
            for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS", "node_precursor_x"):
                labels = {"__name__": name, "gpu": str(g), "Hostname": f"gpu-a{h:03d}", "UUID": f"GPU-{h:04d}-{g}"}
                vals = [0.0 if "XID" in name else 40.0 + g + 0.5 * k for k in range(spp)]
                out.append(RWSeries(labels, [ts + 15000 * k for k in range(spp)], vals))
    return out


@pytest.mark.parametrize("spp", [1, 3])
def test_fast_path_equals_the_reference_cold_and_warm(spp):
    normalize._templates.clear()
    body = encode_write_request(dcgm_series(spp=spp))
    assert scan_write_request(decompress(body)) is not None  # the plain layout takes the fast path
    assert_same(decode_to_table(body, cluster="c"), reference(body))  # cold: every label set is new
    assert normalize._templates["c"].size == len(dcgm_series())
    body2 = encode_write_request(dcgm_series(ts=NOW + 60_000, spp=spp)[::-1])  # next push, other order
    assert_same(decode_to_table(body2, cluster="c"), reference(body2))  # warm
    assert normalize._templates["c"].size == len(dcgm_series())


def test_fast_path_drops_blanks_and_stale_markers_and_names_unknown_metrics():
    series = [
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "h1"}, [NOW, NOW + 1, NOW + 2], [40.0, STALE, 42.0]),
        RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1", "hostname": "h1", "cluster": "east"}, [NOW], [9.223372036854775794e18]),
        RWSeries({"__name__": "node_precursor_fixture_only", "instance": "h2:9100", "device": "eth0"}, [NOW], [math.nan]),
    ]
    body = encode_write_request(series)
    got = decode_to_table(body, cluster="c")
    assert_same(got, reference(body))
    assert got.dropped_blank == 3 and got.unknown_metrics == {"node_precursor_fixture_only"}
    assert [r["value"] for r in rows(got)] == [40.0, 42.0]


def test_the_cluster_argument_gets_its_own_resolution():
    body = encode_write_request([RWSeries({"__name__": "m_x", "instance": "h"}, [NOW], [1.0])])
    assert rows(decode_to_table(body, cluster="a"))[0]["cluster"] == "a"
    assert rows(decode_to_table(body, cluster="b"))[0]["cluster"] == "b"


def test_a_fingerprint_that_matches_other_bytes_is_not_trusted():
    normalize._templates.clear()
    real = [RWSeries({"__name__": "m_real", "instance": "h1"}, [NOW], [1.0])]
    other = [RWSeries({"__name__": "m_fake", "instance": "h2"}, [NOW], [1.0])]
    raw_real, raw_other = decompress(encode_write_request(real)), decompress(encode_write_request(other))
    scan_real, scan_other = scan_write_request(raw_real), scan_write_request(raw_other)
    # Poison the cache: another label set registered under the real series' first hash lane
    # (a 64-bit collision); only both lanes together identify a label set.
    res = normalize._resolve("m_fake", {"__name__": "m_fake", "instance": "h2"}, "c", None)
    normalize._templates["c"] = normalize._Templates()
    normalize._templates["c"].add(int(scan_real.fingerprint[0]), int(scan_other.fingerprint2[0]), res)
    got = decode_to_table(encode_write_request(real), cluster="c")
    assert [(r["host"], r["metric"]) for r in rows(got)] == [("h1", "m_real")]
    assert normalize._templates["c"].size == 2  # the real one was resolved on its own
    normalize._templates.clear()


def hwmon_pair(ts=NOW):
    """Label sets that differ only in their last bytes (the old fingerprint's blind spot)."""
    base = {"__name__": "node_hwmon_temp_celsius", "chip": "platform_coretemp_0", "instance": "node-0001:9100",
            "job": "node"}
    return [RWSeries({**base, "sensor": f"temp{k}"}, [ts], [40.0 + k]) for k in (2, 5)]


def test_label_sets_differing_only_in_their_last_bytes_decode_exactly_on_the_fast_path(monkeypatch):
    normalize._templates.clear()
    body = encode_write_request(hwmon_pair())
    scan = scan_write_request(decompress(body))
    assert scan is not None
    assert (scan.fingerprint[0], scan.fingerprint2[0]) != (scan.fingerprint[1], scan.fingerprint2[1])

    def no_reference(*a, **k):
        raise AssertionError("the request left the fast path")

    monkeypatch.setattr(normalize.remote_write, "decode_raw_write_request", no_reference)
    cold = decode_to_table(body, cluster="c")
    warm = decode_to_table(encode_write_request(hwmon_pair(NOW + 15_000)), cluster="c")
    monkeypatch.undo()
    assert_same(cold, reference(body))
    assert [(r["component"], r["value"]) for r in rows(cold)] == [
        ("platform_coretemp_0/temp2", 42.0), ("platform_coretemp_0/temp5", 45.0)]
    assert [(r["component"], r["value"]) for r in rows(warm)] == [
        ("platform_coretemp_0/temp2", 42.0), ("platform_coretemp_0/temp5", 45.0)]
    assert normalize._templates["c"].size == 2


def test_every_node_exporter_and_dcgm_label_set_of_a_mixed_push_stays_on_the_fast_path(monkeypatch):
    normalize._templates.clear()
    series = []
    for h in range(20):
        for s in range(1, 40):
            series.append(RWSeries({"__name__": "node_hwmon_temp_celsius", "chip": "platform_coretemp_0",
                                    "instance": f"n{h:04d}:9100", "sensor": f"temp{s}"}, [NOW], [30.0 + s]))
    series += dcgm_series(hosts=20, gpus=8)
    body = encode_write_request(series)
    monkeypatch.setattr(normalize.remote_write, "decode_raw_write_request", lambda *a: 1 / 0)
    got = decode_to_table(body, cluster="c")
    monkeypatch.undo()
    assert_same(got, reference(body))
    assert normalize._templates["c"].size == len(series)


@pytest.mark.slow
def test_a_million_label_sets_stay_within_the_documented_bytes_per_series():
    t = normalize._Templates()
    res = normalize._resolve("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "Hostname": "gpu-0001"}, "c", None)
    rng = np.random.default_rng(1)
    n = 1_000_000
    h1 = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    h2 = rng.integers(0, 2**63, n, dtype=np.uint64)
    for i in range(n // 1000):  # as requests add them, a thousand new label sets at a time
        t.add_many(h1[i * 1000 : (i + 1) * 1000], h2[i * 1000 : (i + 1) * 1000], [res] * 1000)
    assert t.size == n
    assert t.nbytes() <= n * normalize.BYTES_PER_SERIES
    assert np.array_equal(t.lookup(h1, h2), np.arange(n))  # all still found
    assert (t.lookup(h1, h2 ^ np.uint64(1)) == -1).all()  # lane 1 alone finds nothing


def test_the_cache_starts_over_at_its_limit(monkeypatch):
    normalize._templates.clear()
    monkeypatch.setattr(normalize, "TEMPLATES_MAX", 50)
    series = dcgm_series(hosts=10, gpus=2)  # 80 label sets
    for k in range(0, 80, 20):
        body = encode_write_request(series[k : k + 20])
        assert_same(decode_to_table(body, cluster="c"), reference(body))
    assert normalize._templates["c"].size <= 50 + 20
    normalize._templates.clear()


def test_label_errors_are_the_reference_path_errors():
    no_host = encode_write_request([RWSeries({"__name__": "m_nohost", "gpu": "0"}, [NOW], [1.0])])
    with pytest.raises(IngestError) as exc:
        decode_to_table(no_host, cluster="c")
    assert exc.value.field == "host"
    twice = WriteRequestCls()
    ts = twice.timeseries.add()
    for name, value in (("__name__", "m_twice"), ("a", "1"), ("a", "2")):
        ts.labels.add(name=name, value=value)
    ts.samples.add(value=1.0, timestamp=NOW)
    with pytest.raises(IngestError) as exc:
        decode_to_table(bytes(cramjam.snappy.compress_raw(twice.SerializeToString())), cluster="c")
    assert "given twice" in exc.value.reason


def test_corrupt_bodies_raise_ingest_error():
    with pytest.raises(IngestError) as exc:
        decode_to_table(b"not snappy" * 3, cluster="c")
    assert exc.value.field == "body"
    with pytest.raises(IngestError):
        decode_to_table(bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\x0f")), cluster="c")


from telemetry.ingestion.remote_write import WriteRequest as WriteRequestCls  # noqa: E402

host_labels = st.sampled_from([{}, {"instance": "n1:9100"}, {"Hostname": "gpu-a001"}, {"hostname": "h"}])
extra_labels = st.dictionaries(
    st.sampled_from(["gpu", "device", "port", "cluster", "UUID", "job", "chip", "sensor"]),
    st.text(alphabet="ab01_\x12\x10\x09", min_size=1, max_size=4), max_size=3,
)
names = st.sampled_from(["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "node_load1", "port_xmit_data", "zz_unknown"])
values = st.one_of(
    st.floats(allow_nan=True), st.just(0.0), st.just(STALE), st.just(2147483640.0), st.just(140737488355330.0)
)
fast_series = st.builds(
    lambda name, host, extra, samples: RWSeries(
        {"__name__": name, **host, **extra}, [t for t, _ in samples], [v for _, v in samples]
    ),
    names, host_labels, extra_labels,
    st.lists(st.tuples(st.one_of(st.integers(NOW, NOW + 10**6), st.integers(-(2**63), 2**63 - 1)), values),
             min_size=0, max_size=3),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fast_series, min_size=0, max_size=6), st.sampled_from(["c", "d"]))
def test_fast_path_always_agrees_with_the_reference(series, cluster):
    body = encode_write_request(series)
    assert_same(outcome(decode_to_table, body, cluster=cluster), reference(body, cluster))
    # Twice: the second run goes through the warm cache.
    assert_same(outcome(decode_to_table, body, cluster=cluster), reference(body, cluster))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fast_series, min_size=1, max_size=4), st.data())
def test_corrupted_requests_agree_with_the_reference(series, data):
    raw = bytearray(decompress(encode_write_request(series)))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    body = bytes(cramjam.snappy.compress_raw(bytes(raw)))
    assert_same(outcome(decode_to_table, body, cluster="c"), reference(body))


def test_many_series_take_the_fast_path_and_match():
    normalize._templates.clear()
    series = dcgm_series(hosts=40, gpus=8)
    body = encode_write_request(series)
    assert_same(decode_to_table(body, cluster="c"), reference(body))
    assert_same(decode_to_table(body, cluster="c"), reference(body))
    assert normalize._templates["c"].size == len(series)
    tid = normalize._templates["c"].lookup(*(lambda sc: (sc.fingerprint, sc.fingerprint2))(
        scan_write_request(decompress(body))))
    assert sorted(tid.tolist()) == list(range(len(series)))  # one template per label set, each found


# --- text exposition fast path (prometheus_text_to_table) ---------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from telemetry.ingestion.normalize import prometheus_text_to_table  # noqa: E402


def exposition_reference(text, cluster, default_host=None):
    """(result, error) of the reference path: parse_exposition then prom_samples_to_table."""
    try:
        samples = parse_exposition(text, default_ts_ms=TS)
        return prom_samples_to_table(samples, cluster=cluster, default_host=default_host), None
    except IngestError as exc:
        return None, exc.as_dict()


def exposition_fast(text, cluster, default_host=None):
    try:
        return prometheus_text_to_table(text, cluster=cluster, default_host=default_host, default_ts_ms=TS), None
    except IngestError as exc:
        return None, exc.as_dict()


def assert_same_text(text, cluster="c", default_host=None):
    ref, ref_err = exposition_reference(text, cluster, default_host)
    for _ in range(3):  # cold, with every cache warm (and the host's template), then through the template
        got, err = exposition_fast(text, cluster, default_host)
        assert err == ref_err
        if ref is not None:
            assert got.table.equals(ref.table), (got.table.to_pylist()[:3], ref.table.to_pylist()[:3])
            assert got.dropped_blank == ref.dropped_blank
            assert got.unknown_metrics == ref.unknown_metrics
            assert got.labels_not_stored == ref.labels_not_stored
    return ref, ref_err


def test_text_fast_path_equals_the_reference_on_the_fixtures():
    for name, host in (("dcgm_h100_scrape.txt", None), ("node_exporter_ib.txt", "gpu-a017")):
        ref, err = assert_same_text((FIXTURES / name).read_text(), default_host=host)
        assert err is None and ref.table.num_rows > 0


def test_text_fast_path_values_timestamps_blanks_and_bare_names():
    head = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h1"}'
    text = (
        f"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n{head} 41\n{head} NaN\n{head} {0x7FFFFFF0}\n{head}\t+Inf\r\n"
        f"{head} 7 1700000000123\n{head} 8 {TS}\nnode_load1 0.5\nnode_load1 0.25 1700000000000\n"
        f'\n  \n{head} 9  \nno_such_metric{{instance="n1:9100"}} 3\n'
    )
    ref, err = assert_same_text(text, default_host="d")
    assert err is None
    assert ref.dropped_blank == 3 and ref.unknown_metrics == {"no_such_metric"}  # NaN, sentinel, +Inf (DCGM)
    got = rows(prometheus_text_to_table(text, cluster="c", default_host="d", default_ts_ms=TS))
    assert [r["value"] for r in got] == [41, 7, 8, 0.5, 0.25, 9, 3]
    assert [int(r["ts"].timestamp() * 1000) for r in got][:5] == [TS, 1700000000123, TS, TS, 1700000000000]


@pytest.mark.parametrize(
    "rest",
    [" 1_000", "5", " 5\x0c", " \x0b5", " ١", " 5 1.5", " 5 99999999999999999999", "", " 5 # {a=\"b\"} 1", " \r5"],
)
def test_text_fast_path_gives_the_reference_answer_for_odd_values(rest):
    # The first line puts the series in the caches, so the odd second line meets a known head.
    head = 'm{gpu="0",Hostname="h1"}'
    assert_same_text(f"{head} 1\n{head}{rest}\n")
    assert_same_text(f"m 1\nm{rest}\n", default_host="d")


@pytest.mark.parametrize(
    "text",
    [
        "# TYPE m gauge\nm{Hostname=\"h\"} 1\n# TYPE m counter\nm{Hostname=\"h\"} 2\n",
        "# HELP m ok\n# HELP m bad \\x\n",
        'm{Hostname="h"} 1\n# EOF\n',
        'm{Hostname="h"} 1\n# EOF\nm{Hostname="h"} 2\n',
        'm{Hostname="h"} 1\nm{gpu="1"} 2\n',
        'm{Hostname="h",a="}{"} 1\n{"dotted.name", Hostname="h"} 2\n',
        'm{Hostname="h"} 1\nm{Hostname="h",Hostname="x"} 2\n',
    ],
)
def test_text_fast_path_gives_the_reference_answer_or_error(text):
    assert_same_text(text)


def test_text_fast_path_keeps_clusters_and_default_hosts_apart():
    text = "m 1\n"
    assert rows(prometheus_text_to_table(text, cluster="a", default_host="h1", default_ts_ms=TS))[0]["host"] == "h1"
    assert rows(prometheus_text_to_table(text, cluster="b", default_host="h2", default_ts_ms=TS))[0] | {"ts": None} == {
        "ts": None, "cluster": "b", "host": "h2", "component": "", "metric": "m", "value": 1.0}
    with pytest.raises(IngestError) as exc:
        prometheus_text_to_table(text, cluster="a", default_ts_ms=TS)
    assert exc.value.field == "host"


_prom_lines = st.lists(st.one_of(
    st.sampled_from(['m{gpu="0",Hostname="h"}', 'm{gpu="1",Hostname="h"}', "m", "DCGM_FI_DEV_GPU_TEMP{Hostname=\"h\"}",
                     '  m{gpu="0",Hostname="h"}', "# TYPE m gauge", "# TYPE m counter", "# HELP m x", "# EOF", ""]),
    st.text(alphabet=list('m{}="h,# \t.+-015eINaf_\r\x0c'), max_size=12),
), max_size=12)
_prom_values = st.sampled_from([" 1", "\t2.5", " NaN", " 1 5", " +Inf", "", " 1_0", "x", " 2147483632", " 3 "])


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_prom_lines, st.lists(_prom_values, min_size=12, max_size=12))
def test_text_fast_path_always_agrees_with_the_reference(lines, values):
    text = "\n".join(line + (values[i] if not line.startswith("#") else "") for i, line in enumerate(lines))
    assert_same_text(text, default_host="d")


def test_relayed_scrapes_of_many_hosts_share_one_text_context():
    normalize._text_contexts.clear()
    body = ('node_load1 0.5\nnode_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp2"} 41\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-0007"} 55\n')
    for h in range(300):  # more hosts than contexts used to be kept
        got = prometheus_text_to_table(body, cluster="c", default_host=f"node-{h:04d}", default_ts_ms=TS)
        want, _ = exposition_reference(body, "c", f"node-{h:04d}")
        assert got.table.equals(want.table)
        assert [r["host"] for r in got.table.to_pylist()] == [f"node-{h:04d}", f"node-{h:04d}", "gpu-0007"]
    assert list(normalize._text_contexts) == ["c"]
    assert normalize._text_contexts["c"].size == 3  # the host-less series are resolved once, not per host
    with pytest.raises(IngestError) as exc:
        prometheus_text_to_table(body, cluster="c", default_host=None, default_ts_ms=TS)
    assert exc.value.field == "host" and "node_load1" in str(exc.value)
    assert exposition_reference(body, "c")[1]["field"] == "host"


def test_labels_not_stored_are_counted_per_series_on_both_paths_whether_or_not_they_merge():
    series = [RWSeries({"__name__": "node_cpu_seconds_total", "cpu": "0", "mode": m, "instance": "n1:9100",
                        "job": "node"}, [NOW, NOW + 1000], [1.0, 2.0]) for m in ("idle", "user")]
    series.append(RWSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "UUID": "GPU-1", "Hostname": "n1",
                            "modelName": "H100", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
                            "pod": "train-7", "job": "dcgm"}, [NOW], [40.0]))
    body = encode_write_request(series)
    want = {"job": 3, "mode": 2, "pod": 1}  # identity labels the inventory keeps are not reported
    assert reference(body).labels_not_stored == want
    for _ in range(2):  # cold, then every label set cached
        assert normalize.decode_to_table(body, cluster="c").labels_not_stored == want
    text = ('node_cpu_seconds_total{cpu="0",mode="idle",instance="n1:9100",job="node"} 1\n'
            'node_cpu_seconds_total{cpu="0",mode="user",instance="n1:9100",job="node"} 2\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1",pod="train-7",container=""} 40\n')
    ref, err = assert_same_text(text)
    assert err is None and ref.labels_not_stored == {"job": 2, "mode": 2, "pod": 1}  # empty values are no label


def test_a_host_label_names_the_host_where_no_exporter_label_does():
    def host(**labels):
        res = prom_samples_to_table([PromSample("m", tuple(sorted(labels.items())), 1.0, NOW)], cluster="c",
                                    default_host="relay")
        return rows(res)[0]["host"]

    assert host(host="n9") == "n9"
    assert host(host="n9", instance="10.0.0.9:9100") == "n9"  # the machine's name, not the scrape target
    assert host(hostname="gpu-a1", host="n9") == "gpu-a1" and host(Hostname="gpu-a2", host="n9") == "gpu-a2"
    assert host(instance="10.0.0.9:9100") == "10.0.0.9" and host() == "relay"


def test_a_text_series_costs_under_a_kilobyte_once_resolved():
    """4,000 relayed hosts x 200 DCGM series is 800,000 text series held in one context: each
    keeps its line head and its label set, with every label pair stored once for the context
    (a GPU's 25 fields share them) -- measured ~0.6 KB per series, ~2 KB when each series kept
    its own pairs."""
    import tracemalloc

    from telemetry.ingestion import inventory

    fields = [f"DCGM_FI_DEV_FIELD_{k}" for k in range(25)]

    def scrape(h: int) -> str:
        lines = []
        for name in fields:
            for g in range(8):
                lines.append(
                    f'{name}{{gpu="{g}",UUID="GPU-{h:04x}{g:04x}-5f2c-4b1e-9a3d-0c7e6b5a{g:04x}",'
                    f'pci_bus_id="00000000:{0x18 + g:02X}:00.0",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
                    f'Hostname="mem-{h:04d}",DCGM_FI_DRIVER_VERSION="550.54.15"}} {g}')
        return "\n".join(lines) + "\n"

    bodies = [scrape(h) for h in range(41)]
    cluster = "mem-text"
    normalize._text_contexts.pop(cluster, None)
    with inventory.collecting():
        normalize.prometheus_text_to_table(bodies[0], cluster=cluster, default_ts_ms=1_764_000_000_000)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for body in bodies[1:]:
                normalize.prometheus_text_to_table(body, cluster=cluster, default_ts_ms=1_764_000_000_000)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    series = normalize._text_contexts[cluster].size - 200
    normalize._text_contexts.pop(cluster, None)
    assert series == 40 * 200
    assert grown / series < 1000, f"{grown / series:.0f} bytes per text series"



# --- per-host templates (a steady scrape reads only its values) -------------------------

import itertools  # noqa: E402

from telemetry.ingestion.prometheus_text import first_head  # noqa: E402

_clusters = itertools.count()
TEMPLATE_BODY = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a1",Hostname="gpu-0007",modelName="NVIDIA H100 80GB HBM3"} 41\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-a2",Hostname="gpu-0007",modelName="NVIDIA H100 80GB HBM3"} 43\n'
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
    'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a1",Hostname="gpu-0007",err_code="0",err_msg="No Error"} 0\n'
    "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
    "\n"
    'node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp2"} 41\n'
    'node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp3"} 42\n'
    'node_cpu_seconds_total{cpu="0",mode="idle"} 1.5e6\nnode_cpu_seconds_total{cpu="0",mode="user"} 2.5e5\n'
    'port_xmit_data{device="mlx5_0",port="1"} 10\n'
    'no_such_metric{instance="n1:9100"} 3\n'
)


def through_template(then, first=TEMPLATE_BODY, default_host="d"):
    """``then`` read on a context whose template for ``default_host`` was made from ``first``:
    the answer (rows, drops, unknown names, labels not stored, or the error) must be the reference
    path's. Returns whether the template read it."""
    cluster = f"tmpl{next(_clusters)}"
    for _ in range(2):  # a full scan that leaves the host's template, then a read through it
        prometheus_text_to_table(first, cluster=cluster, default_host=default_host, default_ts_ms=TS)
    ctx = normalize._text_contexts[cluster]
    assert (default_host, first_head(first)) in ctx.templates
    hits = ctx.template_hits
    got, err = exposition_fast(then, cluster, default_host)
    used = ctx.template_hits > hits
    ref, ref_err = exposition_reference(then, cluster, default_host)
    assert err == ref_err
    if ref is not None:
        assert got.table.equals(ref.table), (got.table.to_pylist(), ref.table.to_pylist())
        assert (got.dropped_blank, got.unknown_metrics, dict(got.labels_not_stored)) == (
            ref.dropped_blank, ref.unknown_metrics, dict(ref.labels_not_stored))
        assert sorted(got.label_sets()) == sorted(ref.label_sets())
    return used


def test_a_steady_scrape_is_read_through_its_template_with_any_values():
    assert through_template(TEMPLATE_BODY)
    values = iter(["NaN", "+Inf", "-Inf", str(0x7FFFFFF0), "1e400", "-0", "Infinity", "nan", "7.25e-3", "+12",
                   "1e308", "0"])
    changed = "\n".join(
        line.rsplit(" ", 1)[0] + " " + next(values) if line and not line.startswith("#") else line
        for line in TEMPLATE_BODY.split("\n"))
    assert through_template(changed)


def test_timestamps_present_or_absent_no_final_newline_and_crlf_stay_on_the_template():
    with_ts = "\n".join(line + (f" {TS - 15_000 + i}" if line and not line.startswith("#") else "")
                        for i, line in enumerate(TEMPLATE_BODY.split("\n")))
    assert through_template(with_ts)
    assert through_template(TEMPLATE_BODY, first=with_ts)
    some = TEMPLATE_BODY.replace("node_load1 0.5\n", f"node_load1 0.5 {TS - 1}\n")
    assert through_template(some)
    assert through_template(TEMPLATE_BODY.rstrip("\n"))
    crlf = TEMPLATE_BODY.replace("\n", "\r\n")
    assert through_template(crlf, first=crlf)
    assert through_template(crlf.replace(" 41\r\n", " 40\t\r\n"), first=crlf)


def test_a_label_value_changed_in_its_last_byte_is_never_mapped_to_the_old_series():
    for old, new in (('sensor="temp2"', 'sensor="temp5"'), ('UUID="GPU-a2"', 'UUID="GPU-a3"'),
                     ('HBM3"} 43', 'HBM4"} 43'), ('Hostname="gpu-0007",err', 'Hostname="gpu-0008",err'),
                     ('mode="user"', 'mode="usex"')):
        assert old in TEMPLATE_BODY
        assert not through_template(TEMPLATE_BODY.replace(old, new, 1))
    # the same length elsewhere in the line, the metric name, a label name
    assert not through_template(TEMPLATE_BODY.replace("node_load1 0.5", "node_load5 0.5"))
    assert not through_template(TEMPLATE_BODY.replace('chip="platform_coretemp_0",sensor="temp3"',
                                                      'chip="platform_coretemp_0",senzor="temp3"'))


def test_series_added_removed_or_reordered_take_the_full_scan():
    lines = TEMPLATE_BODY.split("\n")
    hwmon = [i for i, line in enumerate(lines) if line.startswith("node_hwmon")]
    reordered = list(lines)
    reordered[hwmon[0]], reordered[hwmon[1]] = lines[hwmon[1]], lines[hwmon[0]]
    assert not through_template("\n".join(reordered))
    assert not through_template("\n".join(line for i, line in enumerate(lines) if i != hwmon[0]))
    assert not through_template(TEMPLATE_BODY + 'node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp4"} 4\n')
    assert not through_template(TEMPLATE_BODY.replace("node_load1 0.5\n", "node_load1 0.5\nnode_load1 0.5\n"))


def test_comment_help_and_type_changes_take_the_full_scan_and_keep_its_errors():
    assert not through_template(TEMPLATE_BODY.replace("1m load average.", "1m load average!"))
    assert not through_template(TEMPLATE_BODY.replace("\n\n", "\n# a new comment\n"))
    assert not through_template(TEMPLATE_BODY.replace("\n\n", "\n"))
    assert not through_template(TEMPLATE_BODY + "# TYPE node_load1 counter\n")  # conflicting TYPE: the error
    assert not through_template(TEMPLATE_BODY + "# EOF\n")


@pytest.mark.parametrize("rest", [" 1_000", " 0x10", " 5 # {a=\"b\"} 1", " abc", " 5 99999999999999999999",
                                  " 5 +7", "\x0c5", " 5\x0b", "", "  5", " 5 6 7", " 5 1.5"])
def test_odd_values_leave_the_template_for_the_reference_answer(rest):
    assert not through_template(TEMPLATE_BODY.replace("node_load1 0.5\n", f"node_load1{rest}\n"))


def test_a_timestamp_outside_the_window_is_the_reference_error():
    assert not through_template(TEMPLATE_BODY.replace("node_load1 0.5\n", "node_load1 0.5 1000\n"))


def test_each_default_host_has_its_own_template_and_a_changing_page_is_retried_rarely():
    cluster = f"tmpl{next(_clusters)}"
    for host in ("h1", "h2"):  # the first scrape of each leaves its template
        prometheus_text_to_table(TEMPLATE_BODY, cluster=cluster, default_host=host, default_ts_ms=TS)
    ctx = normalize._text_contexts[cluster]
    page = first_head(TEMPLATE_BODY)
    assert set(ctx.templates) == {("h1", page), ("h2", page)} and ctx.template_hits == 0
    got = prometheus_text_to_table(TEMPLATE_BODY, cluster=cluster, default_host="h2", default_ts_ms=TS)
    assert ctx.template_hits == 1 and {r["host"] for r in got.table.to_pylist()} == {"h2", "gpu-0007", "n1"}
    builds = 0
    for k in range(40):  # a page whose last series changes every scrape
        body = TEMPLATE_BODY.replace("no_such_metric{", f'no_such_metric{{k="{k}",')
        had = ("h1", page) in ctx.templates
        prometheus_text_to_table(body, cluster=cluster, default_host="h1", default_ts_ms=TS)
        builds += ("h1", page) in ctx.templates and not had
    assert 2 <= builds <= 6  # rebuilt after 2, 4, 8, 16 ... full scans, not every scrape


_MUTATIONS = list("0123456789aZ\"}{=, \t\n#.-+_") + ["", "\r", "é"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(TEMPLATE_BODY) - 1), st.sampled_from(_MUTATIONS), st.booleans())
def test_any_one_character_change_gives_the_reference_answer(at, char, insert):
    through_template(TEMPLATE_BODY[:at] + char + TEMPLATE_BODY[at + (0 if insert else 1):])


def test_pages_of_one_sender_each_keep_their_template():
    """A relay posting each node's page without a default host, or one host's dcgm-exporter and
    node_exporter pages apart: one template per page (its first sample line tells them apart)."""
    cluster = f"tmpl{next(_clusters)}"
    dcgm, node = TEMPLATE_BODY.split("# HELP node_load1")
    node = "# HELP node_load1" + node
    pages = [dcgm.replace("gpu-0007", f"gpu-{k:04d}") for k in range(3)]
    for _ in range(3):
        for body in pages:
            got, err = exposition_fast(body, cluster)
            assert err is None and got.table.equals(exposition_reference(body, cluster)[0].table)
        for body in (dcgm, node):
            got, err = exposition_fast(body, cluster, "h")
            assert err is None and got.table.equals(exposition_reference(body, cluster, "h")[0].table)
    assert normalize._text_contexts[cluster].template_hits == 2 * 5


def test_steady_scrapes_read_side_by_side_give_the_reference_rows():
    """Scrapes of 8 hosts posted from 8 threads at once (as relays do), values changing every
    round, each give exactly the reference rows, and every scrape after a host's template was
    made is read through it."""
    import threading

    cluster = f"tmpl{next(_clusters)}"
    hosts = [f"h{k}" for k in range(8)]
    for h in hosts:  # a full scan that leaves each host's template
        for _ in range(2):
            prometheus_text_to_table(TEMPLATE_BODY, cluster=cluster, default_host=h, default_ts_ms=TS)
    ctx = normalize._text_contexts[cluster]
    hits, rounds = ctx.template_hits, 25
    start, failures = threading.Barrier(len(hosts)), []

    def scrape(h: str, k: int) -> None:
        start.wait()
        for r in range(rounds):
            body = TEMPLATE_BODY.replace("} 41\n", f"}} {k}.{r}\n").replace("node_load1 0.5", f"node_load1 {r}e-3")
            got, err = exposition_fast(body, cluster, h)
            ref, ref_err = exposition_reference(body, cluster, h)
            if err != ref_err or not got.table.equals(ref.table):
                failures.append((h, r, err, ref_err))

    threads = [threading.Thread(target=scrape, args=(h, k)) for k, h in enumerate(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert ctx.template_hits - hits == len(hosts) * rounds


def test_row_key_merges_of_a_template_are_found_at_its_making_and_stay_exact():
    """Two series that differ only in a label that is not stored share a row key: the scan that
    makes the host's template already carries the merges, and each read through the template
    carries the same, which is what the service's rule finds on the reference rows; a scrape
    whose timestamps are its own takes no remembered merges."""
    from telemetry.ingestion.service import _merges

    cluster = f"tmpl{next(_clusters)}"
    body = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",slot="3"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="0",slot="4"} 41\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="1"} 42\n')
    expected = _merges(exposition_reference(body, cluster, "h")[0].table)
    assert expected[0] == 1 and expected[1] == frozenset({"gpu.temp"})
    for _ in range(3):  # full scans until one leaves the template: that scan's result has the merges
        made = prometheus_text_to_table(body, cluster=cluster, default_host="h", default_ts_ms=TS)
        ctx = normalize._text_contexts[cluster]
        if ("h", first_head(body)) in ctx.templates:
            break
    assert ctx.template_hits == 0 and made.merged == expected
    for v in ("43", "44.5"):
        hits = normalize._text_contexts[cluster].template_hits
        got = prometheus_text_to_table(body.replace("42", v), cluster=cluster, default_host="h", default_ts_ms=TS)
        assert normalize._text_contexts[cluster].template_hits == hits + 1 and got.merged == expected
    own = body.replace(" 42\n", f" 42 {TS - 1000}\n")
    assert prometheus_text_to_table(own, cluster=cluster, default_host="h", default_ts_ms=TS).merged is None
