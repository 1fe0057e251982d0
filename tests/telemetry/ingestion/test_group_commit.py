"""Group commit: requests queued behind a running insert are stored together, each answered
only once stored; a retried request is stored once; a failed insert acknowledges nothing."""
from __future__ import annotations

import datetime as dt
import threading
import time

import pyarrow as pa
import pytest

from telemetry import schema, store, writer
from telemetry.ingestion.group_commit import GroupCommit


def samples(n: int, host: str) -> pa.Table:
    start = dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc)
    return writer.conform("samples", pa.table({
        "ts": pa.array([start + dt.timedelta(seconds=10 * i) for i in range(n)], schema.TS),
        "cluster": ["gc"] * n, "host": [host] * n, "component": ["gpu0"] * n,
        "metric": ["gpu.temp"] * n, "value": [float(i) for i in range(n)],
    }))


def rows_by_host() -> dict[str, int]:
    return dict(store.query_rows("SELECT host, count() FROM samples WHERE cluster = 'gc' GROUP BY host",
                                 tag="test"))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 30  # a bound against hanging, not a speed assertion
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


class Gate:
    """A write function that holds the first insert until released, recording every insert."""

    def __init__(self, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.inserts: list[int] = []
        self.fail = fail

    def __call__(self, table_name, table, token, tag):
        if not self.inserts and not self.entered.is_set():
            self.entered.set()
            self.release.wait(30)
        self.inserts.append(table.num_rows)
        if self.fail and len(self.inserts) == 2:
            raise ConnectionError("store went away mid-insert")
        return writer.write(table_name, table, token=token, tag=tag)


def submit_in_thread(gc: GroupCommit, table: pa.Table, results: dict, name: str) -> threading.Thread:
    def run():
        try:
            results[name] = gc.submit(table)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            results[name] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def test_requests_queued_behind_an_insert_are_stored_together_and_a_retry_once(clean_store):
    gate = Gate()
    gc = GroupCommit(write=gate)
    results: dict = {}
    first = submit_in_thread(gc, samples(5, "h-first"), results, "first")
    gate.entered.wait(30)
    x, y = samples(7, "h-x"), samples(11, "h-y")
    threads = [submit_in_thread(gc, x, results, "x")]
    wait_until(lambda: gc.queued_rows() == 7, "x queued")
    threads.append(submit_in_thread(gc, x, results, "x-retry"))  # the sender retried while x waits
    wait_until(lambda: gc.stats.duplicates == 1, "the retry joined x")
    threads.append(submit_in_thread(gc, y, results, "y"))
    wait_until(lambda: gc.queued_rows() == 18, "y queued")
    assert "x" not in results and "x-retry" not in results  # nobody answered before the insert
    gate.release.set()
    for t in [first, *threads]:
        t.join(30)
    assert results == {"first": True, "x": True, "x-retry": True, "y": True}
    assert gate.inserts == [5, 18]  # x and y in one insert, x once
    assert rows_by_host() == {"h-first": 5, "h-x": 7, "h-y": 11}
    assert gc.submit(x) is False  # a later retry: answered from the record, nothing stored
    assert gc.stats.commits == 2 and gc.stats.requests == 3
    assert rows_by_host() == {"h-first": 5, "h-x": 7, "h-y": 11}


def test_an_insert_that_fails_acknowledges_none_of_its_requests(clean_store):
    gate = Gate(fail=True)
    gc = GroupCommit(write=gate)
    results: dict = {}
    first = submit_in_thread(gc, samples(3, "h-first"), results, "first")
    gate.entered.wait(30)
    a, b = samples(4, "h-a"), samples(6, "h-b")
    threads = [submit_in_thread(gc, a, results, "a")]
    wait_until(lambda: gc.queued_rows() == 4, "a queued")
    threads.append(submit_in_thread(gc, b, results, "b"))
    wait_until(lambda: gc.queued_rows() == 10, "b queued")
    gate.release.set()
    for t in [first, *threads]:
        t.join(30)
    assert results["first"] is True
    assert isinstance(results["a"], ConnectionError) and isinstance(results["b"], ConnectionError)
    assert rows_by_host() == {"h-first": 3}  # the failed group stored nothing and said so
    # Nothing was recorded as stored: the senders' retries are stored now.
    assert gc.submit(a) is True and gc.submit(b) is True
    assert rows_by_host() == {"h-first": 3, "h-a": 4, "h-b": 6}



def test_async_insert_is_asked_of_a_server_and_never_of_the_embedded_engine(monkeypatch):
    from telemetry.ingestion import group_commit

    monkeypatch.delenv("PRECURSOR_INGEST_ASYNC_INSERT", raising=False)
    monkeypatch.setattr(store, "_config", store.StoreConfig(dsn="chdb:///tmp/x"))
    assert group_commit.use_async_insert() is False
    monkeypatch.setattr(store, "_config", store.StoreConfig(dsn="https://u:p@ch.example.org:8443/db"))
    assert group_commit.use_async_insert() is True
    monkeypatch.setenv("PRECURSOR_INGEST_ASYNC_INSERT", "off")
    assert group_commit.use_async_insert() is False
    s = writer.insert_settings("samples", "tok", "t", async_insert=True)
    assert s["async_insert"] == 1 and s["wait_for_async_insert"] == 1  # a 2xx still means stored
    assert s["insert_deduplication_token"] == "samples:tok"
    assert "async_insert" not in writer.insert_settings("samples", "tok", "t")
