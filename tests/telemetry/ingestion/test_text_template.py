"""The read of a steady text scrape through its host's template (prometheus_text.template_values):
the compiled read (``_textscan``) and the numpy one give the same answer on every body — the
values and timestamps where the body has the template's shape, None (the full scan decides)
where it has not — and both agree with the reference parser."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.ingestion import prometheus_text
from telemetry.ingestion.prometheus_text import parse_exposition, template_of, template_values_numpy

TS = 1_764_000_000_000

PAGE = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-1",Hostname="n1",DCGM_FI_DRIVER_VERSION="550.54.15"}} {a}\n'
    'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-2",Hostname="n1",DCGM_FI_DRIVER_VERSION="550.54.15"}} {b}\n'
    "\n"
    "# HELP node_load1 1m load average.\n"
    "# TYPE node_load1 gauge\n"
    "node_load1 {c}\n"
    'node_hwmon_temp_celsius{{chip="platform_coretemp_0",sensor="temp2"}} {d}\n'
)


def _compiled(template, text, default_ts_ms=TS):
    if prometheus_text._textscan is None:
        if os.environ.get("CI") == "true":  # CI builds it: a missing read there is a broken install
            pytest.fail("the compiled template read telemetry.ingestion._textscan was not built")
        pytest.skip("the compiled template read is not in use (not built at install: no C compiler?, "
                    "or PRECURSOR_COMPILED_SCANNER=0)")
    return prometheus_text.template_values_compiled(template, text, default_ts_ms=default_ts_ms)


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    (va, sa), (vb, sb) = a, b
    if not np.array_equal(va.view(np.uint64), vb.view(np.uint64)) and not np.array_equal(va, vb, equal_nan=True):
        return False
    return (sa is None and sb is None) or (sa is not None and sb is not None and np.array_equal(sa, sb))


def _template(text=PAGE.format(a=40, b=41, c=0.5, d=33)):
    t = template_of(text, len(parse_exposition(text, default_ts_ms=TS)))
    assert t is not None
    return t


@pytest.mark.parametrize("values", [
    dict(a="41", b="42.5", c="0.25", d="1e3"),
    dict(a="NaN", b="+Inf", c="-Inf", d="-0"),
    dict(a="nan", b="inf", c="-infinity", d="+InFiNiTy"),
    dict(a=".5", b="5.", c="-.5e-3", d="1E+05"),
    dict(a="1e500", b="1e-500", c="123456789012345678901234567890", d="4.9406564584124654e-324"),
    dict(a="41 1764000000123", b="42", c="3 -5", d="4\t1764000000999 \r"),  # own timestamps
    dict(a="41  ", b="42\r", c="3\t", d="4 \t"),  # trailing blanks and a CR
])
def test_values_of_a_body_with_the_templates_shape_are_read_alike(values):
    t = _template()
    text = PAGE.format(**values)
    got = _compiled(t, text)
    assert got is not None and _same(got, template_values_numpy(t, text, default_ts_ms=TS))
    ref = parse_exposition(text, default_ts_ms=TS)
    vals, stamps = got
    assert [s.ts_ms for s in ref] == (list(stamps) if stamps is not None else [TS] * len(ref))
    for s, v in zip(ref, vals):
        assert (np.isnan(v) and np.isnan(s.value)) or v == s.value


@pytest.mark.parametrize("values", [
    dict(a="0x10", b="1", c="1", d="1"),  # hex: float() refuses it
    dict(a="1_000", b="1", c="1", d="1"),  # Python's float() takes it, the format does not
    dict(a="1e", b="1", c="1", d="1"),
    dict(a="infinit", b="1", c="1", d="1"),
    dict(a="1.5.5", b="1", c="1", d="1"),
    dict(a="--1", b="1", c="1", d="1"),
    dict(a="1 -", b="1", c="1", d="1"),  # a lone '-' for a timestamp
    dict(a="1 12x", b="1", c="1", d="1"),
    dict(a="1 9223372036854775808", b="1", c="1", d="1"),  # past int64
    dict(a="1 2 3", b="1", c="1", d="1"),
    dict(a="1 # {trace_id=\"x\"} 1", b="1", c="1", d="1"),  # an exemplar: the full scan's business
])
def test_a_value_text_not_in_the_plain_form_is_left_to_the_full_scan(values):
    t = _template()
    text = PAGE.format(**values)
    assert _compiled(t, text) is None
    assert template_values_numpy(t, text, default_ts_ms=TS) is None


def test_a_body_of_another_shape_is_left_to_the_full_scan():
    t = _template()
    base = PAGE.format(a=1, b=2, c=3, d=4)
    others = [
        base.replace('gpu="1"', 'gpu="7"'),  # a label changed: another digest
        base.replace("# HELP node_load1 1m load average.\n", ""),  # a line fewer
        base + "node_load5 1\n",  # a line more
        base.replace("node_load1 3", "node_load1"),  # a line shorter than its head
        base.replace("\n\n", "\n# a comment\n"),  # the blank line now a comment
        base.replace('sensor="temp2"', 'sensor="temp5"'),  # the last bytes of a label set
    ]
    for text in others:
        assert _compiled(t, text) is None, text
        assert template_values_numpy(t, text, default_ts_ms=TS) is None, text


def test_a_missing_final_newline_and_utf8_text_are_read_alike():
    text = PAGE.format(a=1, b=2, c=3, d=4).replace("1m load average.", "1m load average — ünïcode.")
    t = template_of(text, 4)
    assert t is not None
    later = PAGE.format(a=5, b=6, c=7, d=8).replace("1m load average.", "1m load average — ünïcode.")
    for body in (later, later.rstrip("\n")):
        got = _compiled(t, body)
        assert got is not None and _same(got, template_values_numpy(t, body, default_ts_ms=TS))
        assert list(got[0]) == [5.0, 6.0, 7.0, 8.0] and got[1] is None


_TOKEN = st.text(alphabet="0123456789.+-eEinfatyINFATY", min_size=1, max_size=12)
_REST = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    _TOKEN,
    st.tuples(_TOKEN, st.sampled_from([" ", "\t", "  "]), st.integers(-2**64, 2**64)).map(lambda x: f"{x[0]}{x[1]}{x[2]}"),
    st.tuples(_TOKEN, st.sampled_from(["", " ", "\r", " \t\r"])).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({k: _REST for k in "abcd"}))
def test_any_value_texts_get_the_same_answer_from_both_reads(values):
    t = _template()
    text = PAGE.format(**values)
    assert _same(_compiled(t, text), template_values_numpy(t, text, default_ts_ms=TS))
