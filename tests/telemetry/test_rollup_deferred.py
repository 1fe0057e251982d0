"""Deferred rollups of streaming pushes (telemetry.rollup, migration 0010).

Pushed rows (the group commit: remote-write, text scrapes) are stored in ``samples`` with the
rollup view skipping them, and fed to ``samples_1m``/``band_1m`` later, many pushes at once.
Reproduced first: a push holds one sample per series, so with the view rolling each insert a
counter never had two samples in one band minute -- ``band_1m`` had no rate for pushed data.
"""
from __future__ import annotations

import time

import pyarrow as pa
import pytest

from telemetry import rollup, store, writer
from telemetry.ingestion import group_commit

T0 = 1_760_000_040_000  # 2025-10-09 08:54:00 UTC, a minute boundary
SERIES = 6


def push(k: int, cluster: str = "c") -> pa.Table:
    """One scrape round of a counter on SERIES GPUs, 15 s apart: one sample per series."""
    return pa.table({
        "ts": pa.array([T0 + k * 15_000] * SERIES, pa.timestamp("ms", tz="UTC")),
        "cluster": [cluster] * SERIES,
        "host": [f"node{i:02d}" for i in range(SERIES)],
        "component": ["gpu0"] * SERIES,
        "metric": ["gpu.ecc_sbe_total"] * SERIES,
        "value": [float(k * (i + 1)) for i in range(SERIES)],
    })


def rolled(cluster: str = "c") -> list[tuple]:
    return store.query_rows(
        "SELECT host, ts, min(min), max(max), sum(sum), sum(count), min(min_ts), max(max_ts) FROM samples_1m "
        "WHERE cluster = {c:String} GROUP BY host, ts ORDER BY host, ts", {"c": cluster}, tag="test")


def band(cluster: str = "c") -> list[tuple]:
    return store.query_rows(
        "SELECT ts, sum(level_n), sum(rate_n) FROM band_1m WHERE cluster = {c:String} GROUP BY ts ORDER BY ts",
        {"c": cluster}, tag="test")


def stored_rollup_rows() -> int:
    """Samples counted in samples_1m, read without the read hook (``command`` does not feed)."""
    return int(store.command("SELECT sum(count) FROM samples_1m"))


@pytest.fixture
def deferring(clean_store, monkeypatch):
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_ROWS", "2000000")
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_S", "600")
    rollup.discard()
    assert rollup.deferring()
    yield
    rollup.discard()


def test_pushed_counters_get_band_rates(deferring):
    for k in range(8):  # two minutes, four pushes each
        group_commit.committer("samples").submit(push(k))
    # one value per series-minute, each with a rate (4 samples a minute)
    assert [(n, r) for _, n, r in band()] == [(SERIES, SERIES), (SERIES, SERIES)]


def test_view_per_push_has_no_band_rates(clean_store, monkeypatch):
    """The limitation the deferral removes, still true where each insert is rolled on its own
    (a ClickHouse server, or deferral turned off): one sample per series per insert, no rates."""
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_ROWS", "0")
    rollup.discard()
    assert not rollup.deferring()
    for k in range(8):
        group_commit.committer("samples").submit(push(k))
    assert [(n, r) for _, n, r in band()] == [(4 * SERIES, 0), (4 * SERIES, 0)]


def test_pushed_rollup_equals_the_views(deferring):
    """Pushed and deferred, or written in one block and rolled by the view: the same rollup."""
    for k in range(8):
        group_commit.committer("samples").submit(push(k, "pushed"))
    writer.write("samples", pa.concat_tables([push(k, "bulk") for k in range(8)]))
    assert rollup.buffer().pending_rows == 8 * SERIES  # the bulk write was not deferred
    assert rolled("pushed") == rolled("bulk")
    assert len(rolled("pushed")) == 2 * SERIES
    assert [row[5] for row in rolled("pushed")] == [4] * (2 * SERIES)


def test_a_flush_of_several_clusters_rolls_each_series_minute_once(deferring):
    """The buffer is grouped per (cluster, metric, host, component, minute) in the process: one
    samples_1m row each, the same values, sample times and band as the view's."""
    for k in range(6):  # 08:54:00 .. 08:55:15: a minute boundary inside the buffer
        for cluster in ("pushed-a", "pushed-b"):
            group_commit.committer("samples").submit(push(k, cluster))
    writer.write("samples", pa.concat_tables([push(k, "bulk") for k in range(6)]))
    rollup.flush_pending()
    assert int(store.command("SELECT count() FROM samples_1m WHERE cluster = 'pushed-a'")) == 2 * SERIES
    assert rolled("pushed-a") == rolled("pushed-b") == rolled("bulk")
    assert [row[5] for row in rolled("pushed-a")] == [4, 2] * SERIES
    assert band("pushed-a") == band("bulk")
    held = rollup.buffer()
    assert (held.rows_fed, held.rows_written) == (12 * SERIES, 4 * SERIES)  # /api/ingest/stats shows both


def test_a_flush_of_one_sample_per_series_gives_no_band_rates(deferring, monkeypatch):
    """The limit of the deferral, stated in the README: where the buffer fills (or ages) before a
    series has two samples in it -- a fleet pushing more samples per scrape interval than
    PRECURSOR_ROLLUP_BUFFER_ROWS holds -- every flush holds one sample per series-minute, so
    samples_1m gets one-sample pieces (rows_written = rows_fed) and band_1m no counter rates."""
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_ROWS", str(SERIES))  # full after each scrape round
    rollup.discard()
    for k in range(8):
        group_commit.committer("samples").submit(push(k))
        deadline = time.monotonic() + 10
        while rollup.buffer().pending_rows and time.monotonic() < deadline:
            time.sleep(0.02)
    rollup.flush_pending()
    held = rollup.buffer()
    assert held.rows_fed == held.rows_written == 8 * SERIES
    assert [(n, r) for _, n, r in band()] == [(4 * SERIES, 0), (4 * SERIES, 0)]


def test_the_view_skips_deferred_rows_until_a_read(deferring):
    for k in range(4):
        group_commit.committer("samples").submit(push(k))
    assert int(store.command("SELECT count() FROM samples")) == 4 * SERIES  # stored before answered
    assert stored_rollup_rows() == 0  # not rolled by the view
    assert rollup.buffer().pending_rows == 4 * SERIES
    assert rollup.journal_path().exists()
    assert sum(row[5] for row in rolled()) == 4 * SERIES  # a read of samples_1m feeds them first
    assert rollup.buffer().pending_rows == 0
    assert not rollup.journal_path().exists()
    group_commit.committer("samples").submit(push(4))
    store.query_rows("SELECT count() FROM samples", tag="test")  # a read of samples only: nothing fed
    assert rollup.buffer().pending_rows == SERIES


def test_the_buffer_feeds_itself_when_full(deferring, monkeypatch):
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_ROWS", str(3 * SERIES))
    rollup.discard()
    for k in range(4):
        group_commit.committer("samples").submit(push(k))
    deadline = time.monotonic() + 30
    while rollup.buffer().flushes == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rollup.buffer().flushes >= 1  # by its own thread, no read involved
    assert stored_rollup_rows() >= 3 * SERIES


def test_a_crash_loses_no_rollup(deferring):
    """Rows stored but not yet fed when the process dies are rolled again from samples at the
    next start, each counted once, also where a minute was partly rolled already."""
    for k in range(6):  # minute 1 whole, minute 2 half
        group_commit.committer("samples").submit(push(k))
    rolled()  # fed: minute 2 now has 2 of its samples per series rolled
    for k in range(6, 10):  # the rest of minute 2 and half of minute 3
        group_commit.committer("samples").submit(push(k))
    assert rollup.buffer().pending_rows == 4 * SERIES
    rollup.reset()  # the process dies: the buffer is gone, the journal stays
    assert sum(row[5] for row in rolled()) == 6 * SERIES
    assert rollup.recover() == 2  # minutes 2 and 3 rolled again
    assert not rollup.journal_path().exists()
    counts = {(host, ts): n for host, ts, _, _, _, n, _, _ in rolled()}
    assert sorted(set(counts.values())) == [2, 4]  # 4, 4 and 2 samples per series: none twice
    assert sum(counts.values()) == 10 * SERIES
    assert [(n, r) for _, n, r in band()] == [(SERIES, SERIES)] * 3
    assert rollup.recover() == 0  # nothing left to do


def test_a_torn_journal_line_is_skipped(deferring):
    group_commit.committer("samples").submit(push(0))
    rollup.reset()
    with open(rollup.journal_path(), "a", encoding="utf-8") as f:
        f.write("c\t17600")  # the crash cut the last line
    assert rollup.recover() == 1
    assert sum(row[5] for row in rolled()) == SERIES


def test_the_buffer_settings_are_read_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_ROWS", "250000")
    monkeypatch.setenv("PRECURSOR_ROLLUP_BUFFER_S", "5")
    assert (rollup.buffer_rows(), rollup.buffer_s()) == (250_000, 5.0)
    monkeypatch.delenv("PRECURSOR_ROLLUP_BUFFER_ROWS")
    monkeypatch.delenv("PRECURSOR_ROLLUP_BUFFER_S")
    assert (rollup.buffer_rows(), rollup.buffer_s()) == (1_000_000, 30.0)
    for name, bad in (("PRECURSOR_ROLLUP_BUFFER_ROWS", "lots"), ("PRECURSOR_ROLLUP_BUFFER_ROWS", "-1"),
                      ("PRECURSOR_ROLLUP_BUFFER_S", "soon"), ("PRECURSOR_ROLLUP_BUFFER_S", "0")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=name):
            rollup.buffer_rows() if name.endswith("ROWS") else rollup.buffer_s()
        monkeypatch.delenv(name)


def test_a_large_group_is_rolled_by_the_view(deferring):
    """A group of DEFER_MAX_ROWS rows or more is a block the view rolls well on its own."""
    n = writer.DEFER_MAX_ROWS
    big = pa.table({
        "ts": pa.array([T0 + (i % 4) * 15_000 for i in range(n)], pa.timestamp("ms", tz="UTC")),
        "cluster": ["c"] * n, "host": [f"node{i // 4:05d}" for i in range(n)], "component": ["gpu0"] * n,
        "metric": ["gpu.ecc_sbe_total"] * n, "value": [float(i % 4) for i in range(n)],
    })
    group_commit.committer("samples").submit(big)
    assert rollup.buffer().pending_rows == 0
    assert stored_rollup_rows() == n


def test_a_crash_between_the_insert_and_the_buffer_loses_no_rollup(deferring):
    """The journal line is written before the insert: rows stored by an insert whose process died
    before it could hold them are rolled at the next start all the same."""
    table = push(0)
    rollup.buffer().note(table)
    writer.write("samples", table, tag=rollup.deferred_tag("test"))  # stored; the view skipped them
    rollup.reset()  # the process dies before ``add``
    assert stored_rollup_rows() == 0
    assert rollup.recover() == 1
    assert sum(row[5] for row in rolled()) == SERIES


def test_a_buffer_spanning_years_is_rolled_in_day_spans(deferring):
    """Pushed samples far apart in time (a sender replaying old data) land in as many partitions
    as a file's would: each span of days is rolled and inserted on its own."""
    years = [push(0, "old").set_column(0, "ts", pa.array([T0 - k * 400 * 86_400_000] * SERIES,
                                                        pa.timestamp("ms", tz="UTC"))) for k in range(3)]
    for table in years:
        group_commit.committer("samples").submit(table)
    rollup.flush_pending()
    assert len(rolled("old")) == 3 * SERIES
    assert {row[1].year for row in rolled("old")} == {2025, 2024, 2023}
