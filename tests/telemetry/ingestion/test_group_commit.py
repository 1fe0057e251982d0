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


# --- records shared by several web processes (Redis) ---------------------------------------


def shared_records(**kwargs):
    """Idempotency records in the real Redis as one web process would have them (each call: a
    process of its own), or skip without Redis."""
    import socket

    from telemetry.ingestion.idempotency import RedisRecords

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        pytest.skip("no Redis on 127.0.0.1:6379 (.ci/run starts one)")
    return RedisRecords("redis://127.0.0.1:6379/0", **kwargs)


def unique(n: int, host: str) -> pa.Table:
    """Rows no earlier run stored (the records outlive a test run by their window)."""
    import uuid

    return samples(n, f"{host}-{uuid.uuid4().hex[:8]}")


def stored_rows(*tables: pa.Table) -> int:
    hosts = sorted({t.column("host")[0].as_py() for t in tables})
    return store.query_rows("SELECT count() FROM samples WHERE host IN {h:Array(String)}", {"h": hosts},
                            tag="test")[0][0]


@pytest.mark.services
def test_a_retry_that_reaches_a_second_web_process_is_stored_once(clean_store):
    gate = Gate()
    first_process = GroupCommit(write=gate, shared=shared_records())
    results: dict = {}
    head = submit_in_thread(first_process, unique(3, "h-head"), results, "head")
    gate.entered.wait(30)
    x, y = unique(7, "h-x"), unique(11, "h-y")
    threads = [submit_in_thread(first_process, x, results, "x"), submit_in_thread(first_process, y, results, "y")]
    wait_until(lambda: first_process.queued_rows() == 18, "x and y queued")
    gate.release.set()
    for t in [head, *threads]:
        t.join(30)
    assert gate.inserts == [3, 18]  # x inside a group: the store's per-insert token cannot catch a retry of x
    second_process = GroupCommit(shared=shared_records())
    assert second_process.submit(x) is False and stored_rows(x) == 7
    # Without the shared records (the embedded default) that retry is stored again: what this guards
    assert GroupCommit().submit(x) is True and stored_rows(x) == 14


@pytest.mark.services
def test_a_retry_arriving_while_another_process_inserts_waits_for_it_and_stores_nothing(clean_store):
    gate = Gate()
    first_process, second_process = GroupCommit(write=gate, shared=shared_records()), GroupCommit(
        shared=shared_records())
    x = unique(5, "h-x")
    results: dict = {}
    original = submit_in_thread(first_process, x, results, "original")
    gate.entered.wait(30)
    retry = submit_in_thread(second_process, x, results, "retry")
    time.sleep(0.5)
    assert "retry" not in results  # waiting on the other process's insert, not storing it again
    gate.release.set()
    original.join(30)
    retry.join(30)
    assert results == {"original": True, "retry": False}
    assert stored_rows(x) == 5


@pytest.mark.services
def test_a_request_whose_insert_failed_or_whose_process_died_is_stored_by_the_retry(clean_store):
    x, z = unique(4, "h-x"), unique(6, "h-z")
    failing = GroupCommit(write=Gate(fail=True), shared=shared_records())
    failing._write.entered.set()  # no hold: the first insert stores, the second fails
    assert failing.submit(unique(1, "h-ok")) is True
    with pytest.raises(ConnectionError):
        failing.submit(x)
    assert GroupCommit(shared=shared_records()).submit(x) is True and stored_rows(x) == 4
    # A process that claimed z and died before inserting: its claim expires, then the retry stores z.
    shared_records(pending_s=1).claim(writer.content_token(z))
    start = time.monotonic()
    assert GroupCommit(shared=shared_records()).submit(z) is True and stored_rows(z) == 6
    assert time.monotonic() - start >= 0.5  # it did wait for the dead claim


@pytest.mark.services
def test_web_processes_share_the_records_when_redis_is_configured(settings):
    from telemetry.ingestion import group_commit, idempotency

    shared_records()  # skips without Redis
    group_commit.reset()
    try:
        settings.REDIS_URL = ""
        assert group_commit.committer().shared is None  # embedded default: this process's record
        group_commit.reset()
        settings.REDIS_URL = "redis://127.0.0.1:6379/0"
        assert isinstance(group_commit.committer().shared, idempotency.RedisRecords)
    finally:
        group_commit.reset()


class Recorder:
    """A write function recording each insert's rows; fails every insert when ``fail``."""

    def __init__(self, fail: bool = False) -> None:
        self.inserts: list[int] = []
        self.fail = fail

    def __call__(self, table_name, table, token, tag):
        self.inserts.append(table.num_rows)
        if self.fail:
            raise ConnectionError("store went away mid-insert")
        return writer.write(table_name, table, token=token, tag=tag)


def arriving_then_submit(gc: GroupCommit, table: pa.Table, results: dict, name: str,
                         go: threading.Event) -> tuple[threading.Thread, threading.Event]:
    """A request thread that starts parsing (arriving), then queues ``table`` once ``go`` is set."""
    started = threading.Event()

    def run():
        try:
            with gc.arriving():
                started.set()
                go.wait(30)
                results[name] = gc.submit(table)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            results[name] = exc

    t = threading.Thread(target=run)
    t.start()
    started.wait(30)
    return t, started


def test_the_commit_delay_waits_for_requests_still_being_parsed_and_a_retry_among_them_is_stored_once(clean_store):
    rec = Recorder()
    gc = GroupCommit(write=rec, commit_delay_s=10)  # the bound is long: only arrivals end the wait here
    results: dict = {}
    go = threading.Event()
    x = samples(7, "h-x")
    parsing = [arriving_then_submit(gc, x, results, "x", go)[0],
               arriving_then_submit(gc, x, results, "x-retry", go)[0]]  # the sender retried meanwhile
    first = submit_in_thread(gc, samples(5, "h-first"), results, "first")
    time.sleep(0.3)
    assert rec.inserts == [] and results == {}  # the leader waits for the two being parsed
    go.set()
    for t in [first, *parsing]:
        t.join(30)
    assert results == {"first": True, "x": True, "x-retry": True}
    assert rec.inserts == [12]  # one insert: the leader's rows and x's, x once
    assert rows_by_host() == {"h-first": 5, "h-x": 7}
    assert gc.stats.commits == 1 and gc.stats.requests == 2 and gc.stats.duplicates == 1


def test_a_lone_request_is_not_delayed_and_a_request_that_stores_nothing_stops_the_wait(clean_store):
    rec = Recorder()
    gc = GroupCommit(write=rec, commit_delay_s=30)
    start = time.monotonic()
    assert gc.submit(samples(3, "h-lone")) is True  # nobody arriving: stored at once
    with gc.arriving():
        pass  # a request rejected while parsing (400) queues nothing
    assert gc.submit(samples(4, "h-next")) is True
    assert time.monotonic() - start < 15  # far below the 30 s delay it would otherwise wait
    assert rec.inserts == [3, 4]


def test_a_delayed_group_whose_insert_fails_answers_none_of_its_requests(clean_store):
    rec = Recorder(fail=True)
    gc = GroupCommit(write=rec, commit_delay_s=10)
    results: dict = {}
    go = threading.Event()
    a, b = samples(4, "h-a"), samples(6, "h-b")
    parsing, _ = arriving_then_submit(gc, b, results, "b", go)
    first = submit_in_thread(gc, a, results, "a")
    time.sleep(0.2)
    go.set()
    for t in (first, parsing):
        t.join(30)
    assert rec.inserts == [10]  # both in the one (failed) insert
    assert isinstance(results["a"], ConnectionError) and isinstance(results["b"], ConnectionError)
    assert rows_by_host() == {}
    rec.fail = False  # the senders retry: stored now, once
    assert gc.submit(a) is True and gc.submit(b) is True and gc.submit(b) is False
    assert rows_by_host() == {"h-a": 4, "h-b": 6}


def test_the_linger_rows_setting_is_read_and_bad_values_are_named(monkeypatch):
    from telemetry.ingestion import group_commit

    monkeypatch.setenv("PRECURSOR_INGEST_LINGER_ROWS", "20000")
    assert group_commit.linger_rows() == 20_000
    monkeypatch.delenv("PRECURSOR_INGEST_LINGER_ROWS")
    assert group_commit.linger_rows() == 32_000
    for bad in ("lots", "0", "500000"):
        monkeypatch.setenv("PRECURSOR_INGEST_LINGER_ROWS", bad)
        with pytest.raises(ValueError, match="PRECURSOR_INGEST_LINGER_ROWS"):
            group_commit.linger_rows()


def test_the_commit_delay_setting_is_read_and_bad_values_are_named(monkeypatch):
    from telemetry.ingestion import group_commit

    monkeypatch.setenv("PRECURSOR_INGEST_COMMIT_DELAY_MS", "60")
    assert group_commit.commit_delay_s() == pytest.approx(0.06)
    monkeypatch.setenv("PRECURSOR_INGEST_COMMIT_DELAY_MS", "0")
    assert group_commit.commit_delay_s() == 0
    monkeypatch.delenv("PRECURSOR_INGEST_COMMIT_DELAY_MS")
    assert group_commit.commit_delay_s() == pytest.approx(0.06)
    for bad in ("soon", "-1", "1001"):
        monkeypatch.setenv("PRECURSOR_INGEST_COMMIT_DELAY_MS", bad)
        with pytest.raises(ValueError, match="PRECURSOR_INGEST_COMMIT_DELAY_MS"):
            group_commit.commit_delay_s()



def test_the_lead_is_handed_to_the_first_queued_caller_and_the_others_wake_on_their_own_entry():
    """Callers queued behind a running flush wait on their own entry: when it ends, the caller of
    the first entry still queued leads the next flush (one flush for all of them, the flushes never
    overlap) and the others are answered by it, none left waiting for another turn."""
    from telemetry.ingestion.group_commit import Batcher, Entry

    entered, release = threading.Event(), threading.Event()
    flushes: list[tuple[str, list[str]]] = []
    active = [0]

    def flush(batch):
        active[0] += 1
        assert active[0] == 1, "two flushes at once"
        if not flushes:
            entered.set()
            release.wait(30)
        flushes.append((threading.current_thread().name, [e.key for e in batch]))
        for e in batch:
            e.result = f"stored {e.key}"
        active[0] -= 1

    batcher = Batcher(flush, max_weight=3)
    results: dict = {}

    def caller(key):
        results[key] = batcher.submit(Entry(key, None))

    threads = [threading.Thread(target=caller, args=("first",), name="first")]
    threads[0].start()
    entered.wait(30)
    for key in ("a", "b", "c", "d"):  # four queued behind it, more than one flush holds (3)
        t = threading.Thread(target=caller, args=(key,), name=key)
        threads.append(t)
        t.start()
        wait_until(lambda k=key: any(e.key == k for e in batcher.queue), f"{key} queued")
    release.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert results == {k: f"stored {k}" for k in ("first", "a", "b", "c", "d")}
    # the lead went to a's caller (the head of the queue), then to d's (left over past max_weight)
    assert flushes == [("first", ["first"]), ("a", ["a", "b", "c"]), ("d", ["d"])]


def test_many_concurrent_callers_are_each_flushed_once_and_all_answered():
    """16 callers x 40 entries through a batcher whose flushes take 2 ms: every entry flushed
    once, no two flushes at once, every caller answered by a wake-up (none lost)."""
    from telemetry.ingestion.group_commit import Batcher, Entry

    seen: list[str] = []
    active = [0]
    lock = threading.Lock()

    def flush(batch):
        with lock:
            active[0] += 1
            assert active[0] == 1, "two flushes at once"
        time.sleep(0.002)
        seen.extend(e.key for e in batch)
        with lock:
            active[0] -= 1

    batcher = Batcher(flush, max_weight=8, linger_s=0.001)
    batcher.wake_net_s = 600  # a lost wake-up would hang a caller (the join below fails), not slow it
    errors: list[BaseException] = []

    def sender(i):
        try:
            for k in range(40):
                with batcher.arriving():
                    batcher.submit(Entry(f"{i}-{k}", None))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    assert sorted(seen) == sorted(f"{i}-{k}" for i in range(16) for k in range(40))  # each once
