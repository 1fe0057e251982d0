"""Prometheus text exposition parser: real scrapes, every rule, every error."""
import math
from pathlib import Path

import pytest

from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.prometheus_text import PromSample, parse_exposition

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "formats"
TS = 1_710_000_000_000


def reference(name: str) -> str:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip("../shared/reference not present (format samples live outside the repo)")
    return path.read_text()


def scrape_parts(text: str) -> str:
    """Exposition lines of the snippets file (it also holds exporter start-up logs)."""
    return "\n".join(l for l in text.splitlines() if l.startswith(("#", "DCGM_")) or not l.strip()) + "\n"


def test_it_parses_the_real_dcgm_exporter_scrape():
    samples = parse_exposition(reference("dcgm-exporter-metrics-sample.txt"), default_ts_ms=TS)
    by_name = {s.name: s for s in samples}
    assert by_name["DCGM_FI_DEV_SM_CLOCK"].value == 2310.0
    assert by_name["DCGM_FI_DEV_POWER_USAGE"].value == pytest.approx(40.979)
    labels = dict(by_name["DCGM_FI_DEV_SM_CLOCK"].labels)
    assert labels["Hostname"] == "lke529760-766837-0a634ab30000"
    assert labels["pod_uid"] == ""
    assert all(s.ts_ms == TS for s in samples)
    xid = [s for s in samples if s.name == "DCGM_FI_DEV_XID_ERRORS"]
    assert xid and "err_code" in dict(xid[0].labels)


def test_it_parses_both_real_t4_scrapes():
    samples = parse_exposition(reference("dcgm-exporter-metrics-sample-t4.txt"), default_ts_ms=TS)
    hosts = {dict(s.labels)["Hostname"] for s in samples}
    assert len(hosts) == 2
    assert any(dict(s.labels).get("DCGM_FI_DEV_SERIAL") for s in samples)


def test_it_parses_the_scrape_parts_of_the_snippets_including_mig_series():
    samples = parse_exposition(scrape_parts(reference("dcgm-exporter-metrics-snippets.txt")), default_ts_ms=TS)
    mig = [s for s in samples if dict(s.labels).get("GPU_I_ID")]
    assert len(mig) >= 6
    assert {dict(s.labels)["gpu"] for s in samples if dict(s.labels)["Hostname"] == "r6i3n0"} == {"0", "1", "2", "3"}


def test_it_parses_the_real_node_exporter_sample():
    text = reference("node-exporter-sample.txt")
    samples = parse_exposition(text, default_ts_ms=TS)
    sample_lines = [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    assert len(samples) == len(sample_lines)
    rate = [s for s in samples if s.name == "node_infiniband_rate_bytes_per_second"]
    assert rate and rate[0].value == 1.25e9


def test_it_parses_the_repo_fixtures():
    samples = parse_exposition((FIXTURES / "dcgm_h100_scrape.txt").read_text(), default_ts_ms=TS)
    assert len(samples) == 7
    samples = parse_exposition((FIXTURES / "node_exporter_ib.txt").read_text(), default_ts_ms=TS)
    assert samples[0] == PromSample(
        "node_infiniband_port_data_received_bytes_total", (("device", "mlx5_0"), ("port", "1")), 9.22159499729932e14, TS
    )


def test_labels_come_back_sorted_and_unescaped():
    [s] = parse_exposition('m{z="1",a="q\\"x\\\\y\\nz"} 2\n', default_ts_ms=TS)
    assert s.labels == (("a", 'q"x\\y\nz'), ("z", "1"))


def test_a_timestamp_on_the_line_wins_over_the_default():
    s = parse_exposition("m 1 1700000000123\nm2{a=\"b\"} 1 -5\n", default_ts_ms=TS)
    assert [x.ts_ms for x in s] == [1700000000123, -5]


def test_special_values_nan_and_infinities():
    s = parse_exposition("a NaN\nb +Inf\nc -Inf\nd 4.294967295e+09\n", default_ts_ms=TS)
    assert math.isnan(s[0].value) and s[1].value == math.inf and s[2].value == -math.inf
    assert s[3].value == 4294967295.0


def test_blank_lines_blanks_tabs_trailing_comma_and_crlf_are_accepted():
    text = "\n  m{a=\"1\",}\t 3  \r\n\n\t# free comment\nn { a = \"2\" } 4\n"
    s = parse_exposition(text, default_ts_ms=TS)
    assert [(x.name, x.labels, x.value) for x in s] == [("m", (("a", "1"),), 3.0), ("n", (("a", "2"),), 4.0)]


def test_histogram_and_summary_series_are_returned_under_their_suffixed_names():
    text = """# TYPE rpc histogram
rpc_bucket{le="0.5"} 1
rpc_bucket{le="+Inf"} 3
rpc_sum 1.5
rpc_count 3
# TYPE lat summary
lat{quantile="0.9"} 0.2
lat_sum 4
lat_count 9
"""
    names = [s.name for s in parse_exposition(text, default_ts_ms=TS)]
    assert names == ["rpc_bucket", "rpc_bucket", "rpc_sum", "rpc_count", "lat", "lat_sum", "lat_count"]


def test_quoted_utf8_metric_and_label_names():
    [s] = parse_exposition('{"my.dotted.metric", "error.message"="Not Found"} 1\n', default_ts_ms=TS)
    assert s.name == "my.dotted.metric" and s.labels == (("error.message", "Not Found"),)


def test_openmetrics_eof_and_exemplars_are_tolerated():
    text = '# TYPE a counter\na_total{x="1"} 4 # {trace_id="ab"} 1 2\n# EOF\n'
    [s] = parse_exposition(text, default_ts_ms=TS)
    assert s.value == 4.0


def test_a_label_value_with_braces_goes_through_the_careful_path():
    s = parse_exposition('m{a="}{"} 1\nm{a="}{"} 2\n', default_ts_ms=TS)
    assert [x.labels for x in s] == [(("a", "}{"),)] * 2 and [x.value for x in s] == [1.0, 2.0]


def test_help_without_docstring_and_repeated_identical_type_are_accepted():
    s = parse_exposition("# HELP m\n# TYPE m gauge\nm 1\n# TYPE m gauge\nm 2\n", default_ts_ms=TS)
    assert len(s) == 2


@pytest.mark.parametrize(
    "text, line, field, reason",
    [
        ("ok 1\nm abc\n", 2, "value", "not a number: 'abc'"),
        ("m 1_000\n", 1, "value", "not a number"),
        ("m\n", 1, "value", "has no value"),
        ("m 1 2 3\n", 1, None, "unexpected text after the timestamp"),
        ("m 1 1.5\n", 1, "timestamp", "integer milliseconds"),
        ("m 1 99999999999999999999\n", 1, "timestamp", "out of int64 range"),
        ('m{a="1} 2\n', 1, "label a", "unterminated"),
        ('m{a="\\q"} 2\n', 1, "label a", "invalid escape"),
        ("m{a=1} 2\n", 1, "label a", "double-quoted"),
        ('m{a="1" b="2"} 2\n', 1, "labels", "expected ',' or '}'"),
        ('m{a="1",a="2"} 2\n', 1, "label a", "duplicate label name"),
        ('m{a="1"\n', 1, "labels", "expected ',' or '}'"),
        ('m{="1"} 2\n', 1, "labels", "expected a label name"),
        ("3m 1\n", 1, "metric_name", "invalid metric name"),
        ('{a="1"} 1\n', 1, "metric_name", "no metric name"),
        ('m{a="1"}2\n', 1, "metric_name", "expected blank then value"),
        ("# TYPE m\n", 1, "TYPE", "exactly a metric name and a type"),
        ("# TYPE m gauge extra\n", 1, "TYPE", "exactly a metric name and a type"),
        ("# TYPE m meter\n", 1, "TYPE", "unknown metric type"),
        ("# TYPE m gauge\n# TYPE m counter\n", 2, "TYPE", "already declared"),
        ("# HELP\n", 1, "HELP", "without a metric name"),
        ("# HELP m bad \\x escape\n", 1, "HELP", "invalid escape"),
        ("# EOF\nm 1\n", 2, None, "content after '# EOF'"),
    ],
)
def test_each_malformed_line_is_rejected_with_line_field_and_reason(text, line, field, reason):
    with pytest.raises(IngestError) as exc:
        parse_exposition(text, default_ts_ms=TS)
    assert exc.value.line == line
    assert exc.value.field == field
    assert reason in exc.value.reason
    assert str(exc.value).startswith(f"line {line}")


def test_the_error_message_reads_as_one_sentence():
    with pytest.raises(IngestError) as exc:
        parse_exposition("\n" * 11 + "m abc\n", default_ts_ms=TS)
    assert str(exc.value) == "line 12, field 'value': not a number: 'abc'"
    assert exc.value.as_dict() == {"line": 12, "field": "value", "reason": "not a number: 'abc'"}


def test_repeated_scrapes_give_identical_results_through_the_cache():
    text = (FIXTURES / "dcgm_h100_scrape.txt").read_text()
    assert parse_exposition(text, default_ts_ms=TS) == parse_exposition(text, default_ts_ms=TS)


def test_the_scanner_numbers_series_and_sends_what_it_cannot_vouch_for_back():
    from telemetry.ingestion.prometheus_text import Unsupported, scan_exposition

    numbers: dict = {}
    heads: dict = {}
    names: dict = {}

    def intern(name, labels):
        return numbers.setdefault((name, labels), len(numbers))

    text = '# TYPE m gauge\nm{a="1"} 2\nm{a="2"} 3 17\nm{a="1"} NaN\nup 1\n'
    for _ in range(2):  # the second pass goes through the caches it filled
        ids, values, stamps = scan_exposition(text, default_ts_ms=TS, heads=heads, names=names, intern=intern)
        assert ids == [0, 1, 0, 2] and values[:2] == [2.0, 3.0] and math.isnan(values[2])
        assert stamps == [(1, 17)]
    assert set(heads) == {'m{a="1"', 'm{a="2"'} and names == {"up": 2}
    for bad in ('m{a="1"} 2x\n', "# EOF\n", 'm{a="1"}2\n', "# TYPE m counter\n"):
        with pytest.raises(Unsupported):
            scan_exposition(text + bad, default_ts_ms=TS, heads=heads, names=names, intern=intern)
