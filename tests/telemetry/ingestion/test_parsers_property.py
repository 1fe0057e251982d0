"""Property tests: arbitrary input never makes a parser raise anything but IngestError."""
import math

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.kernel_log import parse_kernel_log
from telemetry.ingestion.prometheus_text import parse_exposition
from telemetry.ingestion.remote_write import RWSeries, decode_write_request, encode_write_request
from telemetry.ingestion.sacct import expand_hostlist, parse_sacct

pytestmark = pytest.mark.slow  # see ./precursor test --fast

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Text biased towards each format's punctuation so the generator reaches deep into the parsers.
prom_text = st.text(alphabet=st.sampled_from(list('ab_:{}="\\,# \t\n.+-0123456789eEInfNaTYPEHELP\r}') + ["é", "\x00"]))
# Multi-character tokens: joined lists of fragments rather than single-character alphabets.
kernel_text = st.lists(st.sampled_from(
    list("NVRM: Xid (PCI:0000:07:00): 79, pid=1 name=x[]12.5\n") + ["kernel: ", "NVRM: Xid (PCI:", "Dec  2 ", "2024-01-01T"]
)).map("".join)
sacct_text = st.lists(st.sampled_from(
    list("JobID|State|NodeList|Start\nn[1-2,]0FAILED CANCELLED by 1T:-") + ["JobID|", "Unknown", "|State\n", "2024-01-01"]
)).map("".join)


def only_ingest_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except IngestError:
        return None


@SETTINGS
@given(st.one_of(prom_text, st.text()))
def test_exposition_parser_raises_only_ingest_error(text):
    out = only_ingest_errors(parse_exposition, text, default_ts_ms=0)
    if out is not None:
        assert all(isinstance(s.value, float) and isinstance(s.ts_ms, int) for s in out)


@SETTINGS
@given(st.one_of(kernel_text, st.text()), st.integers(min_value=0, max_value=2**41))
def test_kernel_log_parser_raises_only_ingest_error(text, now):
    out = only_ingest_errors(parse_kernel_log, text, now_ts_ms=now, boot_ts_ms=now)
    if out is not None:
        assert len(out.xids) <= text.count("NVRM: Xid")


@SETTINGS
@given(st.one_of(sacct_text, st.text()))
def test_sacct_parser_raises_only_ingest_error(text):
    only_ingest_errors(parse_sacct, text)


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("ab01-9[],"))))
def test_hostlist_expansion_raises_only_ingest_error(expr):
    only_ingest_errors(expand_hostlist, expr)


@SETTINGS
@given(st.binary())
def test_remote_write_decoder_raises_only_ingest_error_on_any_bytes(body):
    only_ingest_errors(decode_write_request, body)
    only_ingest_errors(decode_write_request, bytes(cramjam.snappy.compress_raw(body)))


label_names = st.text(alphabet=st.sampled_from(list("abcdefgh_")), min_size=1, max_size=6)
series_strategy = st.builds(
    lambda name, labels, samples: RWSeries(
        {"__name__": name, **{k: v for k, v in labels.items() if v}}, [t for t, _ in samples], [v for _, v in samples]
    ),
    st.text(min_size=1, max_size=10),
    st.dictionaries(label_names, st.text(max_size=10), max_size=5),
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True)), max_size=4),
)


@SETTINGS
@given(st.lists(series_strategy, max_size=5))
def test_remote_write_round_trips_any_series(series):
    out = decode_write_request(encode_write_request(series))
    assert [dict(s.labels) for s in out] == [dict(s.labels) for s in series]
    assert [s.timestamps for s in out] == [s.timestamps for s in series]
    for a, b in zip(out, series):
        assert all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a.values, b.values))
