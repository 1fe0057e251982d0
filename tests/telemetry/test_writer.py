"""The writer: schema checks name what is wrong; retried batches are not duplicated."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from telemetry import schema, store, writer


def samples(n: int, *, value: float = 1.0, host: str = "n001") -> pa.Table:
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "ts": pa.array([start + dt.timedelta(seconds=10 * i) for i in range(n)], schema.TS),
            "cluster": ["c1"] * n,
            "host": [host] * n,
            "component": ["gpu0"] * n,
            "metric": ["gpu.temp"] * n,
            "value": [value + i for i in range(n)],
        }
    )


def count(sql="SELECT count() FROM samples"):
    return store.query_rows(sql, tag="test")[0][0]


def test_a_retried_identical_batch_is_stored_once(clean_store):
    batch = samples(50, value=3.0)
    writer.write("samples", batch)
    writer.write("samples", batch)
    assert count() == 50


def test_different_batches_are_both_stored(clean_store):
    writer.write("samples", samples(10, value=1.0))
    writer.write("samples", samples(10, value=2.0))
    assert count() == 20


def test_two_halves_of_one_table_are_both_stored_and_a_slice_has_its_contents_token(clean_store):
    """A slice shares its parent's buffers: the token is the slice's own rows, not the buffers'
    (the two halves of one table once hashed alike and the second was dropped as a retry)."""
    whole = samples(20, value=5.0)
    writer.write("samples", whole.slice(0, 10))
    writer.write("samples", whole.slice(10, 10))
    assert count() == 20
    assert writer.content_token(whole.slice(10, 10)) == writer.content_token(samples(20, value=5.0).slice(10, 10))
    assert writer.content_token(whole.slice(0, 10)) == writer.content_token(samples(10, value=5.0))
    writer.write("samples", samples(10, value=5.0))  # a retry of the first half, built anew
    assert count() == 20


def test_the_minute_rollup_is_fed_by_the_view(clean_store):
    writer.write("samples", samples(12, value=10.0, host="n002"))  # 12 x 10 s = 2 minutes
    rows = store.query_rows(
        "SELECT ts, min(min), max(max), sum(count), min(min_ts), max(max_ts) FROM samples_1m WHERE host = 'n002' GROUP BY ts ORDER BY ts",
        tag="test",
    )
    start = dt.datetime(2026, 11, 1)  # the client returns naive UTC datetimes
    minute = dt.timedelta(minutes=1)
    assert [(r[1], r[2], r[3]) for r in rows] == [(10.0, 15.0, 6), (16.0, 21.0, 6)]
    # The minute's first and last sample times (10 s apart, six per minute).
    assert [(r[4], r[5]) for r in rows] == [
        (start, start + dt.timedelta(seconds=50)),
        (start + minute, start + minute + dt.timedelta(seconds=50)),
    ]


def test_missing_and_extra_columns_are_named():
    bad = samples(2).drop_columns(["metric"]).append_column("colour", pa.array(["red", "blue"]))
    with pytest.raises(writer.SchemaMismatch, match="missing column\\(s\\) metric; unexpected column\\(s\\) colour"):
        writer.write("samples", bad)


def test_uncastable_values_are_refused_before_writing(clean_store):
    bad = samples(2).set_column(5, "value", pa.array(["1.5", "warm"]))
    with pytest.raises(writer.SchemaMismatch, match="samples"):
        writer.write("samples", bad)
    assert count() == 0


def test_unknown_table_is_refused():
    with pytest.raises(writer.SchemaMismatch, match="unknown telemetry table 'nope'"):
        writer.write("nope", samples(1))


def test_a_large_batch_is_inserted_in_parallel_slices_and_a_retry_is_still_stored_once(clean_store):
    n = writer.PARALLEL_MIN_ROWS + 1234
    start = dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc)
    big = pa.table(
        {
            "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(n)], schema.TS),
            "cluster": ["c1"] * n,
            "host": [f"n{i % 7:03d}" for i in range(n)],
            "component": ["gpu0"] * n,
            "metric": ["gpu.temp"] * n,
            "value": [float(i % 97) for i in range(n)],
        }
    )
    writer.write("samples", big)
    writer.write("samples", big)
    assert count() == n
    assert count("SELECT sum(count) FROM samples_1m") == n
    assert count("SELECT sum(value) FROM samples") == sum(float(i % 97) for i in range(n))


def test_batches_spanning_more_days_than_one_insert_may_touch_are_split_by_day():
    import numpy as np
    import pyarrow as pa

    from telemetry import writer as w

    day = 86_400_000
    stamps = np.array([5 * day + 3, 0, 250 * day, 91 * day, 90 * day - 1, 89 * day, 180 * day], dtype=np.int64)
    table = pa.table({"ts": pa.array(stamps).cast(pa.timestamp("ms", tz="UTC")), "value": pa.array(np.arange(7.0))})
    pieces = w.split_by_days(table, days=2)
    spans = [sorted({int(t) // day for t in p.column("ts").cast(pa.int64()).to_pylist()}) for p in pieces]
    assert spans == [[0, 5], [89, 91], [180, 250]]  # at most 2 distinct days (partitions) each, in order
    assert sorted(v for p in pieces for v in p.column("value").to_pylist()) == list(range(7))
    assert len(w.split_by_days(table, days=90)) == 1  # 6 distinct days: one insert
    assert w.split_by_days(table.slice(0, 2), days=10) == [table.slice(0, 2)]  # within 10 days of each other: as is
