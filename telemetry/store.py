"""Access to the ClickHouse telemetry store: one client per thread, one factory.

The DSN is either ``chdb:///path`` (the embedded, in-process engine) or
``http(s)://user:pw@host:port/db`` (a ClickHouse server). A chDB client runs one
query at a time, so every thread (web request or worker) gets its own client:
sharing one made a 0.07 s page query wait 12.7 s behind a background scan.

chDB allows one process per data directory. We take our own advisory lock
first, so a second Precursor process gets a message naming the holder instead
of the engine's obscure failure.
"""
from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import clickhouse_connect

log = logging.getLogger(__name__)


class StoreLocked(RuntimeError):
    """The embedded store's data directory is held by another process."""


class StoreUnavailable(RuntimeError):
    """The telemetry store cannot be reached or opened."""


# Client-side bounds on every call to a ClickHouse server: the engine's own
# max_execution_time does not help when the server (or a proxy) accepts the
# connection and never answers, which tied every web thread up for 90 s.
CONNECT_TIMEOUT_S = 3
READ_MARGIN_S = 5  # a query may run its max_execution_time; the answer may take this much longer
HEALTH_TIMEOUT_S = 3
OPEN_BREAKER_S = 15  # after a call timed out or could not connect, fail fast for this long


@dataclass
class StoreConfig:
    dsn: str = ""
    cluster: str = ""  # ClickHouse cluster name for ON CLUSTER / Distributed, '' for a single node
    ttl_days: int = 400
    query_timeout_s: int = 60
    max_concurrent_calls: int = 0

    @property
    def embedded(self) -> bool:
        return self.dsn.startswith("chdb://")

    @property
    def chdb_path(self) -> Path:
        return Path(urlparse(self.dsn).path or self.dsn[len("chdb://") :])


_config = StoreConfig(dsn=os.environ.get("TELEMETRY_DSN", ""))
_local = threading.local()
_lock_fd: int | None = None
_lock_dir: Path | None = None
_lock_guard = threading.Lock()
_generation = 0  # bumped by configure(): thread clients of an older config are discarded


def configure(dsn: str, *, cluster: str = "", ttl_days: int = 400, query_timeout_s: int = 60,
              max_concurrent_calls: int = 0) -> None:
    """``max_concurrent_calls`` (0 = no bound): how many threads may wait on the store at once;
    ``serve`` keeps it below its web threads, so pages that need no telemetry always get a thread."""
    global _config, _generation, _slots
    if dsn != _config.dsn or cluster != _config.cluster:
        _leave_rollups()
    _config = StoreConfig(dsn=dsn, cluster=cluster, ttl_days=ttl_days, query_timeout_s=query_timeout_s,
                          max_concurrent_calls=max_concurrent_calls)
    # Only a server can hang on the network; the embedded engine's long scans are bounded
    # by max_execution_time and must not be refused for being many.
    _slots = (threading.BoundedSemaphore(max_concurrent_calls)
              if max_concurrent_calls > 0 and not _config.embedded else None)
    _breaker.reset()
    _generation += 1


def _leave_rollups() -> None:
    """Before another store is configured: feed the rows this process deferred into the store
    they were written to (``telemetry.rollup``), then forget them."""
    from telemetry import rollup

    try:
        rollup.flush_pending()
    except Exception:  # the old store is gone: its journal rolls them again at its next start
        log.warning("could not feed deferred rollups before switching stores", exc_info=True)
    rollup.reset()


def _before_read(sql: str) -> None:
    from telemetry import rollup

    rollup.before_read(sql)


def set_max_concurrent_calls(n: int) -> None:
    c = _config
    configure(c.dsn, cluster=c.cluster, ttl_days=c.ttl_days, query_timeout_s=c.query_timeout_s, max_concurrent_calls=n)


def config() -> StoreConfig:
    return _config


def _read_holder(lock_path: Path) -> str:
    try:
        return lock_path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def acquire_data_dir_lock(path: Path) -> None:
    """Hold an exclusive advisory lock on the chDB data dir for this process's life."""
    global _lock_fd, _lock_dir
    with _lock_guard:
        if _lock_fd is not None:
            return
        path.mkdir(parents=True, exist_ok=True)
        lock_path = path / "precursor.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_holder(lock_path)
            raise StoreLocked(
                f"the telemetry store {path} is locked by another Precursor process (pid {holder}); "
                "stop it, or point PRECURSOR_DATA_DIR (or TELEMETRY_DSN) elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _lock_fd = fd
        _lock_dir = path


def check_data_dir() -> None:
    """The embedded store's directory is still the one this process opened.

    Moved or removed under a running server, the engine answers "Cannot open
    file" on reads and recreates empty folders on writes, so ingest would go on
    answering 200 into nothing. Our lock file is the witness: same inode at the
    same path, or the store is unavailable."""
    if _lock_fd is None or _lock_dir is None or not _config.embedded or _config.chdb_path != _lock_dir:
        return
    try:
        same = os.stat(_lock_dir / "precursor.lock").st_ino == os.fstat(_lock_fd).st_ino
    except OSError:
        same = False
    if not same:
        raise StoreUnavailable(
            f"the telemetry data directory {_lock_dir} was moved or removed while Precursor was running: "
            "restore it and restart Precursor"
        )


def _new_client():
    cfg = _config
    if not cfg.dsn:
        raise StoreUnavailable("TELEMETRY_DSN is not configured")
    if cfg.embedded:
        acquire_data_dir_lock(cfg.chdb_path)
        try:
            return clickhouse_connect.get_client(dsn=f"chdb://{cfg.chdb_path}")
        except Exception as exc:
            raise StoreUnavailable(f"cannot open the embedded telemetry store at {cfg.chdb_path}: {exc}") from exc
    _breaker.check()
    try:
        # The client asks the server for its version on creation: bounded like a health check.
        client = clickhouse_connect.get_client(
            dsn=cfg.dsn,
            connect_timeout=CONNECT_TIMEOUT_S,
            send_receive_timeout=HEALTH_TIMEOUT_S + 2,
            autogenerate_session_id=False,
            query_retries=0,
        )
        client.timeout = _default_timeout()
        return client
    except Exception as exc:
        what = "did not answer in time" if "timed out" in str(exc).lower() else "cannot be reached"
        _breaker.trip(f"the ClickHouse server at {safe_dsn()} {what}")
        raise StoreUnavailable(f"the ClickHouse server at {safe_dsn()} {what}: {exc}") from exc


def _default_timeout(timeout_s: float | None = None):
    """A server call's client-side bound: its own time limit plus a margin (at most doubled)."""
    from urllib3 import Timeout

    limit = float(timeout_s or _config.query_timeout_s)
    return Timeout(connect=CONNECT_TIMEOUT_S, read=limit + min(READ_MARGIN_S, limit))


def safe_dsn() -> str:
    """The DSN without user and password."""
    url = urlparse(_config.dsn)
    return url._replace(netloc=url.hostname + (f":{url.port}" if url.port else "") if url.hostname else "").geturl()


class _Breaker:
    """Fail fast for a while after a server call timed out or could not connect, so a hung
    store costs the first callers one timeout each and everyone after them nothing."""

    def __init__(self):
        self._lock = threading.Lock()
        self.until = 0.0
        self.reason = ""

    def reset(self) -> None:
        with self._lock:
            self.until, self.reason = 0.0, ""

    def trip(self, reason: str) -> None:
        with self._lock:
            self.until, self.reason = time.monotonic() + OPEN_BREAKER_S, reason

    def check(self) -> None:
        if self.until and time.monotonic() < self.until:
            raise StoreUnavailable(f"{self.reason} (not retried for {OPEN_BREAKER_S} s after the last failure)")


_breaker = _Breaker()
_slots: threading.BoundedSemaphore | None = None


def _transport_error(exc: BaseException) -> bool:
    """A timeout or a connection failure, as opposed to the server answering with an error."""
    from clickhouse_connect.driver.exceptions import OperationalError

    return isinstance(exc, (OperationalError, TimeoutError, ConnectionError))


def _call(method: str, timeout_s: float | None, *args, **kwargs):
    """Run one client method with the client-side bounds: breaker, concurrency slots and
    (for a server) a read timeout of the query's own time limit plus a margin."""
    check_data_dir()
    _breaker.check()
    slots = _slots
    if slots is not None and not slots.acquire(timeout=1.0):
        raise StoreUnavailable("the telemetry store is slow to answer: every request slot is waiting on it")
    try:
        client = get_client()
        if not _config.embedded:
            client.timeout = _default_timeout(timeout_s)
        try:
            return getattr(client, method)(*args, **kwargs)
        except Exception as exc:
            if not _config.embedded and _transport_error(exc):
                _breaker.trip(f"the ClickHouse server at {safe_dsn()} did not answer")
                close_thread_client()
                raise StoreUnavailable(f"the ClickHouse server at {safe_dsn()} did not answer in time: "
                                       f"{type(exc).__name__}") from exc
            raise
        finally:
            if not _config.embedded and getattr(_local, "client", None) is client:
                client.timeout = _default_timeout()  # for callers that use the client directly
    finally:
        if slots is not None:
            slots.release()


def get_client():
    """The calling thread's own client (created on first use)."""
    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "generation", None) != _generation:
        client = _new_client()
        _local.client = client
        _local.generation = _generation
    return client


def close_thread_client() -> None:
    """Drop this thread's client (after a server stopped answering, its connection is stale)."""
    client = getattr(_local, "client", None)
    _local.client = None
    if client is not None:
        try:
            client.close()
        except Exception:  # closing a half-open client must never mask the real error
            log.debug("closing telemetry client failed", exc_info=True)


def query_settings(tag: str, timeout_s: int | None = None) -> dict:
    """Settings every product query carries: a caller tag and a time limit."""
    return {
        "log_comment": tag[:200],
        "max_execution_time": timeout_s or _config.query_timeout_s,
    }


_TAG_RE = re.compile(r"[^A-Za-z0-9_.:/ -]")
_TRAILING_CLAUSE_RE = re.compile(r"\b(SETTINGS|FORMAT|INTO\s+OUTFILE)\b[^)]*$", re.I)


def with_settings(sql: str, tag: str, timeout_s: int | None = None) -> tuple[str, dict]:
    """Put the tag and time limit into the query's own SETTINGS clause when we can.

    Passing them as per-call settings makes the embedded client run SET statements
    before and after every query (measured: ~20 ms per query on a 60 ms chart query);
    a trailing SETTINGS clause is plain ClickHouse SQL on both engines. Tags are
    code-defined, reduced to a safe alphabet anyway."""
    body = sql.rstrip().rstrip(";")
    if _TRAILING_CLAUSE_RE.search(body):
        return sql, query_settings(tag, timeout_s)
    timeout = int(timeout_s or _config.query_timeout_s)
    safe_tag = _TAG_RE.sub("_", tag[:200])
    return f"{body}\nSETTINGS max_execution_time = {timeout}, log_comment = '{safe_tag}'", {}


def used_parameters(sql: str, parameters: dict | None) -> dict:
    """Only the parameters the statement names: each bound value costs the engine a
    setting per query (measured: 23 parameters where 9 were used added ~10 ms)."""
    if not parameters:
        return {}
    return {name: value for name, value in parameters.items() if "{" + name + ":" in sql}


def query_df(sql: str, parameters: dict | None = None, *, tag: str, timeout_s: int | None = None):
    params = used_parameters(sql, parameters)
    _before_read(sql)
    sql, settings = with_settings(sql, tag, timeout_s)
    return _call("query_df", timeout_s, sql, parameters=params, settings=settings)


def query_rows(sql: str, parameters: dict | None = None, *, tag: str, timeout_s: int | None = None) -> list[tuple]:
    params = used_parameters(sql, parameters)
    _before_read(sql)
    sql, settings = with_settings(sql, tag, timeout_s)
    return _call("query", timeout_s, sql, parameters=params, settings=settings).result_rows


def query_arrow(sql: str, parameters: dict | None = None, *, tag: str, timeout_s: int | None = None):
    params = used_parameters(sql, parameters)
    _before_read(sql)
    sql, settings = with_settings(sql, tag, timeout_s)
    return _call("query_arrow", timeout_s, sql, parameters=params, settings=settings)


def command(sql: str, parameters: dict | None = None, *, tag: str = "command"):
    return _call("command", None, sql, parameters=parameters or None, settings=query_settings(tag))


def insert_arrow(table: str, data, *, settings: dict, timeout_s: int | None = None):
    """``insert_arrow`` with the same client-side bounds as queries."""
    return _call("insert_arrow", timeout_s, table, data, settings=settings)


def ping() -> tuple[bool, str]:
    """(ok, detail) without raising, within about HEALTH_TIMEOUT_S: used by /healthz.

    Checks what the pages need: the data directory is the one opened (embedded), the
    stored data is readable (a read of ``samples`` opens its files) and the store
    takes writes (not read-only)."""
    try:
        rows = query_rows(
            "SELECT version(), getSetting('readonly'), (SELECT count() FROM (SELECT 1 FROM samples LIMIT 1))",
            tag="healthz", timeout_s=HEALTH_TIMEOUT_S,
        )
    except Exception as exc:
        # Operators read this: name the server (never its credentials); a data path never shows.
        return False, public_message(exc) + ("" if _config.embedded else f" (server {safe_dsn()})")
    version, readonly, _ = rows[0]
    if str(readonly) not in ("0", ""):
        return False, f"the telemetry store is read-only (readonly={readonly}): ingest cannot write"
    if _config.embedded:
        try:
            probe = _config.chdb_path / ".precursor-health"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            return False, f"the telemetry data directory is not writable ({exc.strerror})"
    return True, f"ClickHouse {version}" + (" (embedded chDB)" if _config.embedded else "")


def public_message(exc: BaseException) -> str:
    """What a person may be shown about a store failure: what happened and what to do,
    never an internal file path or an engine error code (the log has the details)."""
    log.warning("telemetry store failure shown to a person as a short message: %s: %s",
                type(exc).__name__, str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "")
    if isinstance(exc, StoreLocked):
        return ("the telemetry store is in use by another Precursor process: stop it, or point "
                "PRECURSOR_DATA_DIR elsewhere")
    if isinstance(exc, StoreUnavailable):
        text = str(exc)
        if "moved or removed" in text:
            return ("the telemetry data directory was moved or removed while Precursor was running: "
                    "restore it and restart Precursor")
        if "cannot be reached" in text:
            return "the telemetry store cannot be reached: retry in a minute; if it persists, check the store"
        if "did not answer" in text or "slow to answer" in text:
            return "the telemetry store did not answer in time: retry in a minute; if it persists, check the store"
        if "TELEMETRY_DSN" in text:
            return "the telemetry store is not configured (TELEMETRY_DSN)"
        return "the telemetry store cannot be opened: check the server log"
    return "the telemetry store failed to answer this query: retry; if it persists, check the server log"
