"""A host's main signals: what it stored, which series are charted, their samples and gaps."""
from __future__ import annotations

from datetime import timedelta

import numpy as np

from telemetry.queries import host_signals
from tests.telemetry.queries import BASE, every, write_samples


def test_main_signals_are_charted_with_their_samples_and_gaps(clean_store):
    # gpu0: a sample a minute for 6 h, then 3 h without data, then 3 h more; gpu1 whole.
    before, after = every(BASE, 60, 360), every(BASE + timedelta(hours=9), 60, 180)
    write_samples("c1", "n1", "gpu0", "gpu.temp", before + after, np.full(540, 60.0))
    write_samples("c1", "n1", "gpu1", "gpu.temp", every(BASE, 60, 720), np.full(720, 61.0))
    write_samples("c1", "n1", "", "site_thing", every(BASE, 60, 10), np.ones(10))  # not in the catalog
    write_samples("c1", "n2", "gpu0", "gpu.temp", every(BASE, 60, 720), np.full(720, 99.0))  # another host
    got = host_signals.host_signals("c1", "n1", BASE, BASE + timedelta(hours=12))
    facts = {(s.metric, s.component): s for s in got.series}
    assert set(facts) == {("gpu.temp", "gpu0"), ("gpu.temp", "gpu1")}
    gap = facts[("gpu.temp", "gpu0")]
    assert gap.samples == 540 and gap.step_s == 60 and gap.gaps == 1 and gap.longest_gap_s == 3 * 3600 + 60
    whole = facts[("gpu.temp", "gpu1")]
    assert whole.samples == 720 and whole.gaps == 0 and whole.longest_gap_s == 60
    assert got.unmapped == ["site_thing"] and got.note == ""
    # the chart: the overlay of the host's series over the range, t0 its end
    assert got.result is not None and [s.signal.host for s in got.result.series] == ["n1", "n1"]
    y = {s.signal.component: s.y for s in got.result.series}
    assert len(y["gpu0"]) > 0 and set(np.round(y["gpu1"], 3)) == {61.0}


def test_without_a_range_the_last_days_up_to_the_newest_sample_and_long_ranges_are_cut(clean_store):
    write_samples("c1", "n1", "gpu0", "gpu.temp", every(BASE, 3600, 48), np.arange(48.0))
    got = host_signals.host_signals("c1", "n1")
    assert got.end == BASE + timedelta(hours=47, seconds=1)
    assert got.start == BASE  # not before its first sample
    write_samples("c1", "n1", "gpu0", "gpu.temp", every(BASE - timedelta(days=30), 3600, 2), [1.0, 2.0])
    got = host_signals.host_signals("c1", "n1")
    assert got.end - got.start == timedelta(days=host_signals.DEFAULT_DAYS)
    assert got.series[0].samples == 48
    long = host_signals.host_signals("c1", "n1", BASE - timedelta(days=400), BASE + timedelta(days=2))
    assert "the chart shows the last 31 days" in long.note and long.end - long.start == timedelta(days=31)
    assert host_signals.host_signals("c1", "nobody").series == []
