"""`bench case` compares like with like: its hand-written SQL returns the data the runner returns.

The benchmark itself needs a 100 M-sample store (minutes to build); here its generator fills a
small store of the same shape and one case is checked value by value."""
from __future__ import annotations

import numpy as np
import pytest

from telemetry.queries.overlay import run_overlay
from telemetry.benchmarks import case

pytestmark = pytest.mark.slow  # see ./precursor test --fast


@pytest.fixture
def small_bench_store(clean_store, monkeypatch):
    monkeypatch.setattr(case, "HOSTS", 6)
    monkeypatch.setattr(case, "HOURS", 14)  # a ±6 h window fits with its margins
    monkeypatch.setattr(case, "PEERS", 4)
    case._build(lambda message: None)
    span = case._span()
    assert span is not None, "the generator wrote fewer rows than the shape asks for"
    return span


def test_the_raw_sql_returns_what_the_runner_returns(small_bench_store):
    q = case._cases(*small_bench_store, 2)[1]
    result = run_overlay(q, allowed_hosts=case._case_hosts(q))
    raw_series, raw_bands, raw_events = (case._raw_rows(sql) for sql in case._raw_sql(q))

    assert result.source == "samples_1m" and result.band_source == "fleet"
    raw = {(m, c): (np.asarray(x), np.asarray(y)) for m, c, x, y in zip(
        *(raw_series.column(name).to_pylist() for name in ("metric", "component", "xs", "ys")))}
    assert len(raw) == len(result.series) == 32
    for s in result.series:
        x, y = raw[(s.metric, s.signal.component)]
        assert len(s.x) > 300, s.signal.label
        np.testing.assert_allclose(s.x, x, err_msg=s.signal.label)
        np.testing.assert_allclose(s.y, y, rtol=1e-9, err_msg=s.signal.label)

    bands = {}
    for metric, b, qs in raw_bands:
        bands.setdefault(metric, {})[b] = qs
    for s in result.series:
        expected = bands[s.metric]
        assert len(s.band.x) == len(expected)
        buckets = np.round((s.band.x - q.start_offset_s) / (result.bucket_s) - 0.5).astype(int)
        got = np.column_stack([s.band.p5, s.band.median, s.band.p95])
        np.testing.assert_allclose(got, [expected[b] for b in buckets], rtol=1e-9, err_msg=s.metric)
    assert raw_events == [] and result.events == []
