"""telemetry.ingestion.limits and telemetry.names: the bounds and the one rule, unit by unit."""
from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import pytest

from telemetry import names
from telemetry.ingestion import limits, sacct
from telemetry.ingestion.errors import IngestError

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_states_the_limits_the_code_enforces():
    text = README.read_text()
    section = text.split("## Security", 1)[1].split("\n## ", 1)[0]
    for what, value in limits.LIMITS_DOC.items():
        assert f"{value:,}" in section, f"README's Security section does not state {what} = {value:,}"
    assert "2000-01-01" in text and "one day ahead" in text
    assert f"1 to {names.HOST_MAX} characters" in text and f"at most {names.COMPONENT_MAX} characters" in text


@pytest.mark.parametrize("hostlist, size", [
    ("gpu[001-004,017],cpu7", 6), ("x[0-999][0-999][0-999]", 10**9), ("a,b,c", 3), ("", 0), ("n[1-2]x[1-3]", 6),
])
def test_a_hostlist_is_counted_without_expanding_it(hostlist, size):
    assert sacct.hostlist_size(hostlist) == size


def test_expansion_refuses_past_the_limit_and_keeps_padding_below_it():
    assert sacct.expand_hostlist("gpu[098-101]") == ["gpu098", "gpu099", "gpu100", "gpu101"]
    with pytest.raises(limits.TooLarge, match="1000000 hosts, over the limit of 100000"):
        sacct.expand_hostlist("hb[0-999][0-999]")
    with pytest.raises(IngestError, match="runs backwards"):
        sacct.hostlist_size("n[9-1]")


def test_gzip_is_read_to_its_end_or_refused():
    body = b"node_load1 1\n" * 100
    assert limits.decode_gzip(gzip.compress(body), 1 << 20) == body
    assert limits.decode_gzip(gzip.compress(body) + gzip.compress(b"x"), 1 << 20) == body + b"x"
    whole = gzip.compress(body)
    with pytest.raises(IngestError, match="truncated"):
        limits.decode_gzip(whole[:-4], 1 << 20)  # only the length trailer missing
    with pytest.raises(IngestError, match="not valid gzip"):
        limits.decode_gzip(b"plain text", 1 << 20)
    with pytest.raises(IngestError, match="not valid gzip"):
        limits.decode_gzip(whole + b"trailing junk", 1 << 20)
    with pytest.raises(limits.TooLarge):
        limits.decode_gzip(gzip.compress(b"\0" * 5000), 4096)
    comp = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    flushed = comp.compress(body) + comp.flush(zlib.Z_FULL_FLUSH)
    with pytest.raises(IngestError, match="truncated"):
        limits.decode_gzip(flushed, 1 << 20)  # inflates cleanly, but the stream never ended


@pytest.mark.parametrize("ms, ok", [
    (limits.TS_MIN_MS, True), (limits.TS_MIN_MS - 1, False), (limits.now_ms() + 3_600_000, True),
    (limits.now_ms() + 2 * 86_400_000, False), (2**63 - 1, False), (-(2**63), False),
])
def test_the_readings_window(ms, ok):
    if ok:
        assert limits.check_ts(ms, "ts") == ms
    else:
        with pytest.raises(IngestError, match=re.escape("[2000-01-01, now + 1 day]")):
            limits.check_ts(ms, "ts")


@pytest.mark.parametrize("name, host, component", [
    ("gpu-a001", True, True), ("10.0.0.7", True, True), ("fe80::1", True, True), ("mlx5_0/1", False, True),
    ("", False, True), ("a b", False, False), ("a\n", False, False), ("<b>", False, False), ("é", False, False),
    ("h" * 253, True, False), ("h" * 254, False, False), ("c" * 128, True, True), ("c" * 129, True, False),
])
def test_the_name_grammar(name, host, component):
    assert names.is_host(name) is host and names.is_component(name) is component


def test_every_catalog_metric_fits_the_metric_grammar():
    from telemetry import catalog

    assert catalog.CATALOG and all(names.is_metric(name) for name in catalog.CATALOG)


def test_a_known_time_span_spares_reading_the_rows_but_never_a_refusal():
    """check_table's ``ts_span`` (a text template's scrape knows its one timestamp): inside the
    window the rows are not read again; a span that leaves it is only a bound, so the rows are
    read and the bad one named as without it — a wrong span never lets a bad row through."""
    import datetime as dt

    import pyarrow as pa

    from telemetry import schema

    good = int(dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc).timestamp() * 1000)
    bad = int(dt.datetime(1999, 12, 31, tzinfo=dt.timezone.utc).timestamp() * 1000)

    def table(ts):
        return pa.table({"ts": pa.array(ts, pa.int64()).cast(schema.TS), "cluster": ["c"] * len(ts),
                         "host": ["h"] * len(ts), "component": [""] * len(ts), "metric": ["gpu.temp"] * len(ts),
                         "value": [1.0] * len(ts)})

    limits.check_table("samples", table([good, good]), names_checked=True, ts_span=(good, good))
    with pytest.raises(IngestError, match=r"row 2 of the batch: time 1999-12-31.*outside the accepted window"):
        limits.check_table("samples", table([good, bad]), names_checked=True, ts_span=(bad, good))
    with pytest.raises(IngestError, match=r"row 2 of the batch"):  # without a span: the same answer
        limits.check_table("samples", table([good, bad]), names_checked=True)
