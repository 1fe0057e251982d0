"""Deferred rollups for streaming pushes in the embedded store.

A remote-write push or a text scrape carries one or two samples per series. Rolled up by the
view on ``samples`` one insert at a time, it made nearly as many ``samples_1m`` rows as raw
rows (one more part per insert, and as many background merges again), and every
series-minute arrived as one-sample pieces, so ``band_1m`` never saw a counter twice in one
minute and had no rates for pushed data (migration 0010).

In the embedded store the group commit therefore inserts pushed rows with a ``log_comment``
the view skips (``DEFERRED_TAG``) and hands them to this process's ``RollupBuffer``, which rolls
them up many pushes at once, grouped per series and minute in Arrow (``minute_rows``: one
``samples_1m`` row per series-minute of the whole buffer; ``band_1m``'s view follows each insert):

- when ``PRECURSOR_ROLLUP_BUFFER_ROWS`` rows (default 1,000,000; 0 = no deferral) are waiting,
  or the oldest has waited ``PRECURSOR_ROLLUP_BUFFER_S`` (default 30 s), from a thread of its own;
- before any query in this process reads ``samples_1m`` or ``band_1m`` (``store`` calls
  ``before_read``), so what a push stored is in the rollups of the next page that reads them;
- when ``serve`` stops.

The buffer holds the rows as the group commit inserted them (Arrow, dictionary-encoded
names): ~40 bytes a row, so at most ~80 MB at the default, however large the fleet.

**Nothing is lost in a crash.** The rows are in ``samples`` before the push is answered; only
their rollup waits. Before each deferred insert a line (cluster, first and last sample time) is
appended to ``rollup-pending.log`` in the data dir, and a flush rewrites the file without the lines
it fed. At start (``recover``), the minutes those lines name are rolled again from ``samples``:
their ``samples_1m`` and ``band_1m`` rows are deleted, then every raw row of those minutes goes
through ``samples_feed`` (a Null table whose view writes ``samples_1m``), so each is counted once
whichever path rolled it before.

Against a ClickHouse server nothing is deferred (the view rolls every insert, and
``async_insert`` batches the inserts server-side): several web processes would each hold rows
the others' pages could not see.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from telemetry import store

log = logging.getLogger(__name__)

DEFERRED_TAG = "rollup-deferred"
FEED_TABLE = "samples_feed"
JOURNAL_NAME = "rollup-pending.log"
ROLLUP_TABLES = ("samples_1m", "band_1m")
_MINUTE_MS = 60_000


def buffer_rows() -> int:
    """``PRECURSOR_ROLLUP_BUFFER_ROWS`` (default 1,000,000; 0 = no deferral)."""
    from telemetry.ingestion.group_commit import _env_number

    return _env_number("PRECURSOR_ROLLUP_BUFFER_ROWS", "1000000", int, "a whole number of rows", 0, 20_000_000)


def buffer_s() -> float:
    """``PRECURSOR_ROLLUP_BUFFER_S`` (default 30): the longest a pushed row waits for its rollup."""
    from telemetry.ingestion.group_commit import _env_number

    return _env_number("PRECURSOR_ROLLUP_BUFFER_S", "30", float, "a number of seconds", 0.1, 3600)


def deferring() -> bool:
    """Whether streaming inserts defer their rollup: the embedded store on a single node, with a
    buffer size above 0."""
    cfg = store.config()
    return cfg.embedded and not cfg.cluster and buffer_rows() > 0


def deferred_tag(tag: str) -> str:
    """The ``log_comment`` of an insert whose rows the view on ``samples`` is to skip."""
    return f"{DEFERRED_TAG}:{tag}"


def journal_path() -> Path:
    return store.config().chdb_path / JOURNAL_NAME


def _spans(table: pa.Table) -> list[tuple[str, int, int]]:
    """(cluster, first, last sample time in ms) of each cluster in ``table``."""
    ts = table.column("ts").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    clusters = table.column("cluster")
    names = pc.unique(clusters).to_pylist()
    if len(names) == 1:
        lo, hi = pc.min_max(ts).values()
        return [(names[0], lo.as_py(), hi.as_py())]
    out = []
    for name in names:
        mask = pc.equal(clusters, name)
        lo, hi = pc.min_max(pc.filter(ts, mask)).values()
        out.append((name, lo.as_py(), hi.as_py()))
    return out


# A flush inserts at most this many rows at once: the engine's copy of an insert block is a few
# times its Arrow size, so slices keep that transient small (2,000,000 rows in one block: +680 MB
# peak RSS in bench ingest-fleet).
FEED_SLICE_ROWS = 250_000

_KEYS = ["cluster", "metric", "host", "component", "minute"]
_TS_S = pa.timestamp("s", tz="UTC")
_TS_MS = pa.timestamp("ms", tz="UTC")


def minute_rows(table: pa.Table) -> pa.Table:
    """``table``'s samples grouped per series and minute, in ``samples_1m``'s columns: what the
    rollup view computes, here in Arrow over a whole buffer (the view groups only within each
    inserted block, and in the engine's own aggregation, which costs more than this per row:
    bench feed, 2.2 vs 1.8 us CPU per row with the insert). A minute split across two flushes
    is two rows, merged by ``samples_1m``'s engine like two view blocks."""
    ms = table.column("ts").cast(_TS_MS).cast(pa.int64())
    minute = pc.multiply(pc.divide(ms, _MINUTE_MS), _MINUTE_MS)
    grouped = pa.table({
        "cluster": table.column("cluster"), "metric": table.column("metric"), "host": table.column("host"),
        "component": table.column("component"), "minute": minute, "value": table.column("value"), "t": ms,
    }).group_by(_KEYS, use_threads=False).aggregate([
        ("value", "min"), ("value", "max"), ("value", "sum"), ("value", "count", pc.CountOptions(mode="all")),
        ("t", "min"), ("t", "max"),
    ])
    return pa.table({
        "ts": grouped.column("minute").cast(_TS_MS).cast(_TS_S),
        "cluster": grouped.column("cluster"), "host": grouped.column("host"),
        "component": grouped.column("component"), "metric": grouped.column("metric"),
        "min": grouped.column("value_min"), "max": grouped.column("value_max"), "sum": grouped.column("value_sum"),
        "count": grouped.column("value_count").cast(pa.uint64()),
        "min_ts": grouped.column("t_min").cast(_TS_MS), "max_ts": grouped.column("t_max").cast(_TS_MS),
    })


def _feed(table: pa.Table, tag: str) -> int:
    """Roll ``table``'s rows up: one ``samples_1m`` row per series-minute of the whole table
    (``minute_rows``), inserted in slices; ``band_1m``'s view follows each slice. Returns the
    ``samples_1m`` rows written."""
    from telemetry import writer

    written = 0
    for piece in writer.split_by_days(table):  # a push of old samples: as few partitions per insert as files get
        rolled = minute_rows(piece)
        for start in range(0, rolled.num_rows, FEED_SLICE_ROWS):
            store.insert_arrow("samples_1m", rolled.slice(start, FEED_SLICE_ROWS), settings={"log_comment": tag})
        written += rolled.num_rows
    return written


class RollupBuffer:
    """Rows stored in ``samples`` whose rollup is still to be fed (see the module text)."""

    def __init__(self, *, max_rows: int, max_age_s: float, journal: Path | None) -> None:
        self.max_rows = max_rows
        self.max_age_s = max_age_s
        self.journal = journal
        self._lock = threading.Lock()  # tables, lines, journal file
        self._flush_lock = threading.Lock()  # one flush at a time; a reader waits for a running one
        self._wake = threading.Condition(self._lock)
        self._tables: list[pa.Table] = []
        self._lines: list[str] = []
        self._rows = 0
        self._bytes = 0
        self.max_pending_bytes = 0  # the most the buffer held (Arrow buffers), since it was created
        self._oldest = 0.0
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.flushes = 0
        self.rows_fed = 0
        # samples_1m rows written for them: as many as rows_fed when each flush held one sample
        # per series-minute (then band_1m has no rates for pushed counters: see the README)
        self.rows_written = 0

    @property
    def pending_rows(self) -> int:
        return self._rows

    def busy(self) -> bool:
        """Rows waiting, or a flush running (a reader must wait for either)."""
        return self._rows > 0 or self._flush_lock.locked()

    def note(self, table: pa.Table) -> list[str]:
        """Name ``table``'s minutes in the journal, BEFORE its rows are inserted (a crash between
        the insert and ``add`` must not leave stored rows that no journal line names); returns the
        lines for ``add``. A line whose insert then failed only makes a restart roll again minutes
        that hold nothing new (exact either way)."""
        lines = [f"{cluster}\t{lo}\t{hi}\n" for cluster, lo, hi in _spans(table)] if table.num_rows else []
        if lines and self.journal is not None:
            store.check_data_dir()  # a data dir moved away: the store's own clear error, not a missing file
            with self._lock, open(self.journal, "a", encoding="utf-8") as f:
                f.writelines(lines)
        return lines

    def add(self, table: pa.Table, lines: list[str] | None = None) -> None:
        """Hold ``table`` (rows now stored in ``samples``; ``lines``: what ``note`` wrote for it)
        until the next flush."""
        if table.num_rows == 0:
            return
        if lines is None:
            lines = self.note(table)
        with self._lock:
            if not self._tables:
                self._oldest = time.monotonic()
            self._tables.append(table)
            self._lines.extend(lines)
            self._rows += table.num_rows
            self._bytes += table.nbytes
            self.max_pending_bytes = max(self.max_pending_bytes, self._bytes)
            self._start_locked()
            if self._rows >= self.max_rows:
                self._wake.notify_all()

    def flush(self) -> int:
        """Feed every row waiting now (after any flush already running); returns the rows fed."""
        with self._flush_lock:
            with self._lock:
                tables, lines, self._tables, self._lines, self._rows = self._tables, self._lines, [], [], 0
                self._bytes = 0
            if not tables:
                return 0
            try:
                written = _feed(pa.concat_tables(tables, promote_options="permissive"), deferred_tag("flush"))
            except BaseException:
                with self._lock:  # fed again next time; the journal still names them
                    self._tables[:0], self._lines[:0] = tables, lines
                    self._rows += sum(t.num_rows for t in tables)
                    self._bytes += sum(t.nbytes for t in tables)
                raise
            n = sum(t.num_rows for t in tables)
            with self._lock:
                self.flushes += 1
                self.rows_fed += n
                self.rows_written += written
                if self._tables:
                    self._oldest = time.monotonic()
                self._rewrite_journal_locked()
            return n

    def _rewrite_journal_locked(self) -> None:
        if self.journal is None:
            return
        if not self._lines:
            self.journal.unlink(missing_ok=True)
            return
        tmp = self.journal.with_suffix(".tmp")
        tmp.write_text("".join(self._lines), encoding="utf-8")
        os.replace(tmp, self.journal)

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopped = False
            self._thread = threading.Thread(target=self._run, name="rollup-flush", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopped:
                    due = self._tables and (self._rows >= self.max_rows
                                            or time.monotonic() - self._oldest >= self.max_age_s)
                    if due:
                        break
                    wait = self.max_age_s - (time.monotonic() - self._oldest) if self._tables else None
                    self._wake.wait(timeout=max(0.05, wait) if wait is not None else None)
                if self._stopped:
                    return
            try:
                self.flush()
            except Exception:
                log.warning("rollup flush failed; retrying in %.0f s", self.max_age_s, exc_info=True)
                time.sleep(self.max_age_s)
            finally:
                store.close_thread_client()

    def stop(self) -> None:
        """Feed what waits and end the flush thread (``serve`` stopping)."""
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        self.flush()


_buffer: RollupBuffer | None = None
_buffer_guard = threading.Lock()
_exit_hook = False


def buffer() -> RollupBuffer:
    """This process's buffer (created on first use, from the settings then)."""
    global _buffer, _exit_hook
    with _buffer_guard:
        if _buffer is None:
            _buffer = RollupBuffer(
                max_rows=buffer_rows(),
                max_age_s=buffer_s(),
                journal=journal_path() if store.config().embedded else None,
            )
            if not _exit_hook:  # once per process: it acts on whichever buffer is current then
                atexit.register(_stop_at_exit)
                _exit_hook = True
        return _buffer


def _stop_at_exit() -> None:
    try:
        stop()
    except Exception:  # the journal names them: the next start rolls them from samples
        log.warning("could not feed deferred rollups at exit", exc_info=True)


def reset() -> None:
    """Forget this process's buffer without feeding it (a new store configuration; tests)."""
    global _buffer
    with _buffer_guard:
        old, _buffer = _buffer, None
    if old is not None:
        with old._lock:
            old._stopped = True
            old._wake.notify_all()


def discard() -> None:
    """Drop the waiting rows and the journal without feeding them (the store was emptied: tests)."""
    reset()
    if store.config().embedded:
        journal_path().unlink(missing_ok=True)


def before_read(sql: str) -> None:
    """Feed the waiting rows first when ``sql`` reads a rollup table."""
    if "samples_1m" in sql or "band_1m" in sql:
        flush_pending()


def flush_pending() -> None:
    """Feed what waits now (before a change to stored rows that the rollups must follow)."""
    b = _buffer
    if b is not None and b.busy():
        b.flush()


def stop() -> None:
    b = _buffer
    if b is not None:
        b.stop()


def _read_journal(path: Path) -> dict[str, list[tuple[int, int]]]:
    spans: dict[str, list[tuple[int, int]]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split("\t")
        if len(parts) != 3:  # a line cut short by the crash: nothing after it was written either
            log.warning("%s line %d is incomplete; ignored", path, n)
            continue
        try:
            lo, hi = int(parts[1]), int(parts[2])
        except ValueError:
            log.warning("%s line %d is not (cluster, ms, ms); ignored", path, n)
            continue
        spans.setdefault(parts[0], []).append((lo // _MINUTE_MS * _MINUTE_MS, hi // _MINUTE_MS * _MINUTE_MS + _MINUTE_MS))
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def recover(log_fn=None) -> int:
    """Roll again, from ``samples``, the minutes a crashed process left in its journal; returns
    the minutes rolled again (0 when the last run stopped cleanly)."""
    if not store.config().embedded:
        return 0
    path = journal_path()
    if not path.exists():
        return 0
    minutes = 0
    for cluster, spans in _read_journal(path).items():
        for lo, hi in _merged(spans):
            params = {"c": cluster, "lo": lo // 1000, "hi": hi // 1000}
            where = "cluster = {c:String} AND ts >= toDateTime({lo:UInt32}, 'UTC') AND ts < toDateTime({hi:UInt32}, 'UTC')"
            for table in ROLLUP_TABLES:
                store.command(f"DELETE FROM {table} WHERE {where}", params, tag="rollup:recover")
            store.command(
                f"INSERT INTO {FEED_TABLE} SELECT ts, cluster, host, component, metric, value FROM samples "
                "WHERE cluster = {c:String} AND ts >= toDateTime64({lo:UInt32}, 3, 'UTC') "
                "AND ts < toDateTime64({hi:UInt32}, 3, 'UTC')",
                params, tag="rollup:recover")
            minutes += (hi - lo) // _MINUTE_MS
            if log_fn:
                log_fn(f"rollups of {cluster} {time.strftime('%Y-%m-%d %H:%M', time.gmtime(lo / 1000))}"
                       f"–{time.strftime('%H:%M', time.gmtime(hi / 1000))} UTC rolled again from samples "
                       "(the last run stopped before feeding them)")
    path.unlink(missing_ok=True)
    return minutes
