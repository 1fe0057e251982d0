"""Group commit: concurrent pushes stored as few large inserts, each answered only once stored.

An insert into the embedded store costs ~15 ms whatever its size (parse and plan, a part
for ``samples`` and one per rollup view), so one insert per 2,000-sample push spends most of
the time on fixed costs. ``GroupCommit.submit`` queues a request's rows and returns only
after they are stored:

- The first request thread that finds no insert running becomes the *leader*: it takes
  everything queued (up to ``max_rows``), concatenates it and inserts it through
  ``telemetry.writer.write`` (one block, split in parallel slices when large). Requests that
  arrive meanwhile queue up behind it and the next leader stores them together. No extra
  thread: while one insert runs, the other request threads decode their bodies.
- ``submit`` returns only after the insert holding its rows returned; when that insert
  raises, every request in it gets the exception (the HTTP layer answers 503 and senders
  retry): nothing is acknowledged that was not stored.
- **Idempotency record per request**: each request has a key (the content token of its
  normalised rows, so an identical retry has the same key, while two scrapes without
  timestamps received at different times do not). A key already stored within the record
  window is answered without storing again; a key still queued or being inserted waits for
  that attempt's outcome and stores nothing itself. Records are kept in this process for
  ``record_window_s`` (default 1 h; Prometheus retries within minutes), at most
  ``record_max`` keys (~150 bytes each). With ``REDIS_URL`` set (several web processes) the
  records are shared too (``telemetry.ingestion.idempotency``): a request is claimed there
  before it is queued, marked stored before it is answered, released when its insert fails, so
  a retry reaching another process, or this one after a restart, within the window is stored
  once. Without Redis (the embedded default: one process) a group of one still carries the
  request's own de-duplication token into the store; a retry of a request stored inside a
  larger group that comes after a restart or the window is stored again -- at-least-once,
  never lost.
- **Commit delay** (``PRECURSOR_INGEST_COMMIT_DELAY_MS``, default 60): a samples request
  (text scrape, remote-write) counts as *arriving* from the moment the web process starts on it
  (``webapp.middleware.ingest_arriving``: auth, body, parse) until it is queued or answered. A
  leader that finds others arriving waits for them -- at most the delay, and no longer once
  ``linger_rows`` (``PRECURSOR_INGEST_LINGER_ROWS``, 32,000: 16 senders' 2,000-sample pushes) are
  queued or nobody is arriving -- so a group holds the requests
  being parsed meanwhile, not only those queued during the previous insert. On the 2-core
  machine a 500-row insert costs ~29 ms CPU, a group of 8 ~3.5 ms CPU per request, 32 ~1.2 ms
  (README, benchmarks). bench ingest-fleet, 16 senders, two runs side by side on the loaded
  machine: delay 20 ms / 20,000 rows 4.9 pushes per insert, 56 ms server CPU per push; 60 ms /
  32,000 rows 7.1 pushes per insert, 35 ms per push, 1.7x the samples/s, lower latency.
  A lone sender never waits (nobody else is arriving); under load a
  request waits at most the delay longer. The delay changes only which requests share an
  insert: each is still answered only once its insert returned, and a failed insert fails all.
- A failed insert records nothing: the retried requests are inserted again (if a large
  insert failed after one of its slices landed, that slice's rows can be stored twice).

The leader/follower loop itself is ``Batcher`` (also used for the inventory rows that new
label sets note, ``telemetry.ingestion.inventory``: one read and one insert per group).

One committer per process (``committer()``); with several web processes (production),
each groups its own requests and, against a ClickHouse server, inserts them with
``async_insert=1, wait_for_async_insert=1`` so the server merges the groups of all
processes further and still answers only once they are written (``use_async_insert``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from telemetry import store, writer
from telemetry.ingestion import idempotency

log = logging.getLogger(__name__)


@dataclass
class Entry:
    key: str
    table: object  # the payload: a pa.Table here, inventory entries in ``telemetry.ingestion.inventory``
    tag: str = ""
    weight: int = 1
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    result: object = None
    # set when the entry is stored (or failed), or when its caller is to lead the next flush
    wake: threading.Event = field(default_factory=threading.Event)
    promoted: bool = False


class Batcher:
    """Leader/follower batching without a thread of its own.

    ``submit(entry)`` queues the entry and returns once a ``flush`` holding it returned (its
    ``result``), or raises what that flush raised. The first caller that finds no flush running
    becomes the leader: it takes everything queued (up to ``max_weight``) and flushes it in one
    go; callers arriving meanwhile queue up behind it and the next leader flushes them together.
    A caller waits on its own entry's event, not on the leader's lock: when a flush ends, its
    entries' callers wake at once, and the leader hands the lead to the caller of the first entry
    still queued (earlier, every waiting caller took the leader's lock in turn only to find its
    entry stored: a chain of thread switches, under the interpreter lock, after every insert).
    """

    def __init__(self, flush: Callable[[list[Entry]], None], *, max_weight: int,
                 lock: threading.Lock | None = None, linger_s: float = 0.0, linger_weight: int = 0) -> None:
        self._flush = flush
        self.max_weight = max_weight
        self.lock = lock or threading.Lock()  # the queue (callers may hold it to queue atomically)
        self._changed = threading.Condition(self.lock)  # an entry queued, or a caller stopped arriving
        self._leading = False  # a flush is running, or its lead was handed to a queued entry's caller
        self._lingering = 0  # leaders waiting for callers still arriving (``_linger``)
        self.wake_net_s = 1.0  # a waiting caller looks again after this long (a net; tests raise it)
        self.queue: list[Entry] = []
        self.linger_s = linger_s  # how long a leader waits for callers still arriving
        self.linger_weight = linger_weight or max_weight  # ... unless this much is queued already
        self._arriving = 0  # callers inside ``arriving()`` that have not queued yet
        self._local = threading.local()

    @contextmanager
    def arriving(self):
        """Around a caller's work that ends in queueing an entry (parsing a request): a leader
        meanwhile waits for it (``linger_s``) so both share one flush."""
        with self.lock:
            if getattr(self._local, "arriving", False):  # nested: already counted
                outer = True
            else:
                outer, self._local.arriving = False, True
                self._arriving += 1
        try:
            yield
        finally:
            if not outer:
                self.arrived()

    def arrived(self) -> None:
        """This thread queued (or will queue nothing): leaders stop waiting for it."""
        with self.lock:
            self._arrived_locked()

    def _arrived_locked(self) -> None:
        if getattr(self._local, "arriving", False):
            self._local.arriving = False
            self._arriving -= 1
            if self._lingering:  # nobody waits on the condition otherwise
                self._changed.notify_all()

    def enqueue_locked(self, entry: Entry) -> None:
        """Queue ``entry`` (the caller holds ``lock``)."""
        self.queue.append(entry)
        self._arrived_locked()

    def submit(self, entry: Entry) -> object:
        with self.lock:
            self.enqueue_locked(entry)
        return self.wait(entry)

    def wait(self, entry: Entry) -> object:
        while True:
            with self.lock:
                if entry.done.is_set():
                    break
                lead = entry.promoted or not self._leading
                self._leading = True
                entry.promoted = False
            if not lead:
                # Cleared first, then ``done`` and ``promoted`` read: both are set before ``wake``
                # (stored: by the flush; promoted: under the lock), so neither is missed; woken, the
                # loop decides under the lock (the timeout only bounds a wake-up lost some other way).
                entry.wake.clear()
                if not (entry.done.is_set() or entry.promoted):
                    entry.wake.wait(self.wake_net_s)
                continue
            try:
                self._flush_once()
            finally:
                with self.lock:
                    self._leading = False
                    if self.queue:  # the next flush: led by the first queued entry's caller
                        head = self.queue[0]
                        head.promoted = self._leading = True
                        head.wake.set()
        if entry.error is not None:
            raise entry.error
        return entry.result

    def _take(self) -> list[Entry]:
        with self.lock:
            batch, weight = [], 0
            while self.queue and (not batch or weight + self.queue[0].weight <= self.max_weight):
                e = self.queue.pop(0)
                batch.append(e)
                weight += e.weight
            return batch

    def _linger(self) -> None:
        """The leader waits (at most ``linger_s``) while callers are still arriving."""
        if self.linger_s <= 0:
            return
        deadline = time.monotonic() + self.linger_s
        with self.lock:
            self._lingering += 1
            try:
                while self._arriving > 0 and sum(e.weight for e in self.queue) < self.linger_weight:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(left)
            finally:
                self._lingering -= 1

    def _flush_once(self) -> None:
        self._linger()
        batch = self._take()
        if not batch:
            return
        try:
            self._flush(batch)
        except BaseException as exc:  # every entry of the batch fails: none is acknowledged
            for e in batch:
                e.error = exc
        finally:
            for e in batch:  # ``done`` before ``wake``: a waiting caller clears ``wake``, then reads ``done``
                e.done.set()
                e.wake.set()

    def queued_weight(self) -> int:
        with self.lock:
            return sum(e.weight for e in self.queue)


@dataclass
class CommitStats:
    commits: int = 0
    requests: int = 0
    rows: int = 0
    duplicates: int = 0


WriteFn = Callable[[str, pa.Table, str, str], object]


def use_async_insert() -> bool:
    """``PRECURSOR_INGEST_ASYNC_INSERT``: ``auto`` (default) = on when the store is a ClickHouse
    server (several web processes' groups are merged again server-side), off for chDB."""
    mode = os.environ.get("PRECURSOR_INGEST_ASYNC_INSERT", "auto").strip().lower()
    if mode in ("1", "true", "yes", "on"):
        return True
    if mode in ("0", "false", "no", "off"):
        return False
    return not store.config().embedded


def _default_write(table_name: str, table: pa.Table, token: str, tag: str) -> object:
    from telemetry import rollup

    return writer.write(table_name, table, token=token, tag=tag, async_insert=use_async_insert(),
                        defer_rollup=table_name == "samples" and rollup.deferring())


class GroupCommit:
    def __init__(self, table_name: str = "samples", *, max_rows: int = 400_000, record_window_s: float = 3600,
                 record_max: int = 200_000, write: WriteFn | None = None,
                 shared: idempotency.RedisRecords | None = None, commit_delay_s: float = 0.0,
                 linger_rows: int = 32_000) -> None:
        self.table_name = table_name
        self.record_window_s = record_window_s
        self.record_max = record_max
        self.shared = shared  # the records all web processes share (Redis), or None
        self._write = write or _default_write
        self._lock = threading.Lock()  # queue, records, in-flight map
        self._batcher = Batcher(self._commit, max_weight=max_rows, lock=self._lock,
                                linger_s=commit_delay_s, linger_weight=linger_rows)
        self._inflight: dict[str, Entry] = {}  # key -> the attempt storing it (queued or inserting)
        self._stored: OrderedDict[str, float] = OrderedDict()  # key -> monotonic time stored
        self.stats = CommitStats()

    @property
    def max_rows(self) -> int:
        return self._batcher.max_weight

    def arriving(self):
        """Context manager around handling a request whose rows will be ``submit``-ted: a leader
        waits for it (the commit delay) so they share one insert."""
        return self._batcher.arriving()

    def submit(self, table: pa.Table, *, key: str | None = None, tag: str = "ingest") -> bool:
        """Store ``table`` (already conformed) as part of a group; return once it is stored.

        True when this call's rows were stored by this call or the attempt it joined, False when
        the same request had already been stored (a retry), here or in another process sharing
        the records. Raises what the insert raised.
        """
        if table.num_rows == 0:
            self._batcher.arrived()
            return True
        key = key or writer.content_token(table)
        with self._lock:
            self._batcher._arrived_locked()  # queued below, a duplicate, or waiting on a claim: not a leader's wait
            self._expire()
            if key in self._stored:
                self.stats.duplicates += 1
                return False
            entry = self._inflight.get(key)
            if entry is not None:
                self.stats.duplicates += 1
        if entry is None and self.shared is not None and not self._claim(key):
            with self._lock:  # stored by another process: remembered here too
                self.stats.duplicates += 1
                self._stored[key] = time.monotonic()
            return False
        if entry is None:
            with self._lock:
                entry = self._inflight.get(key)
                if entry is None:
                    entry = self._inflight[key] = Entry(key, table, tag, weight=table.num_rows)
                    self._batcher.enqueue_locked(entry)
                else:
                    self.stats.duplicates += 1
        self._batcher.wait(entry)
        return True

    def _claim(self, key: str) -> bool:
        """Whether this process is to store ``key`` (False: another process stored it). Waits
        while another process is storing it; a claim held past its expiry (the process died, or
        its insert hangs) answers 503 so the sender retries later."""
        deadline = time.monotonic() + self.shared.pending_s + 5
        while True:
            try:
                state = self.shared.claim(key)
            except Exception:  # Redis down: this process's record only (at-least-once across processes)
                log.warning("ingest idempotency records: Redis unavailable", exc_info=True)
                return True
            if state != idempotency.PENDING:
                return state == idempotency.CLAIMED
            if time.monotonic() > deadline:
                raise store.StoreUnavailable("an identical request is still being stored by another web process")
            time.sleep(0.05)

    def _commit(self, batch: list[Entry]) -> None:
        """The leader's insert of one group (``Batcher`` flush)."""
        try:
            if len(batch) == 1:
                table, token = batch[0].table, batch[0].key
            else:
                table = pa.concat_tables([e.table for e in batch])
                digest = hashlib.blake2b(digest_size=16)
                for e in batch:
                    digest.update(e.key.encode())
                token = "group:" + digest.hexdigest()
            self._write(self.table_name, table, token, batch[0].tag if len(batch) == 1 else "ingest:group")
        except BaseException:  # nothing recorded: the retried requests are inserted again
            with self._lock:
                for e in batch:
                    self._inflight.pop(e.key, None)
            self._share("release", [e.key for e in batch])
            raise
        # Shared before anyone is answered: a retry reaching another process now finds it stored.
        self._share("stored", [e.key for e in batch])
        now = time.monotonic()
        with self._lock:
            self.stats.commits += 1
            self.stats.requests += len(batch)
            self.stats.rows += table.num_rows
            for e in batch:
                self._stored[e.key] = now
                self._inflight.pop(e.key, None)
                e.table = None  # the rows are stored: drop the reference
            while len(self._stored) > self.record_max:
                self._stored.popitem(last=False)

    def _share(self, what: str, keys: list[str]) -> None:
        if self.shared is None:
            return
        try:
            getattr(self.shared, what)(keys)
        except Exception:  # rows stored (or not) all the same; only other processes' view is late
            log.warning("ingest idempotency records: Redis unavailable (%s)", what, exc_info=True)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.record_window_s
        stored = self._stored
        while stored:
            key, at = next(iter(stored.items()))
            if at >= cutoff:
                break
            stored.popitem(last=False)

    def queued_rows(self) -> int:
        return self._batcher.queued_weight()


def _env_number(name: str, default: str, parse, kind: str, lo, hi):
    """The environment setting ``name`` read by ``parse`` (``default`` where unset), refused with
    a message naming it unless it is a number in [lo, hi]."""
    raw = os.environ.get(name, default).strip()
    try:
        value = parse(raw)
    except ValueError:
        raise ValueError(f"{name} must be {kind}, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {raw!r}")
    return value


def commit_delay_s() -> float:
    """``PRECURSOR_INGEST_COMMIT_DELAY_MS`` (default 60; 0 = no delay) in seconds."""
    return _env_number("PRECURSOR_INGEST_COMMIT_DELAY_MS", "60", float, "a number of milliseconds", 0, 1000) / 1000


def linger_rows() -> int:
    """``PRECURSOR_INGEST_LINGER_ROWS`` (default 32,000): a leader waiting out the commit delay
    stops waiting once this many rows are queued."""
    return _env_number("PRECURSOR_INGEST_LINGER_ROWS", "32000", int, "a whole number of rows", 1, 400_000)


_committers: dict[str, GroupCommit] = {}
_committers_lock = threading.Lock()


def committer(table_name: str = "samples") -> GroupCommit:
    """This process's group committer for ``table_name``."""
    with _committers_lock:
        c = _committers.get(table_name)
        if c is None:
            c = _committers[table_name] = GroupCommit(table_name, shared=idempotency.shared_records(3600),
                                                      commit_delay_s=commit_delay_s(), linger_rows=linger_rows())
        return c


def reset() -> None:
    """Forget every committer (tests: a fresh store means fresh records)."""
    with _committers_lock:
        _committers.clear()
