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
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import clickhouse_connect


class StoreLocked(RuntimeError):
    """The embedded store's data directory is held by another process."""


class StoreUnavailable(RuntimeError):
    """The telemetry store cannot be reached or opened."""


@dataclass
class StoreConfig:
    dsn: str = ""
    cluster: str = ""  # ClickHouse cluster name for ON CLUSTER / Distributed, '' for a single node
    ttl_days: int = 400
    query_timeout_s: int = 60

    @property
    def embedded(self) -> bool:
        return self.dsn.startswith("chdb://")

    @property
    def chdb_path(self) -> Path:
        return Path(urlparse(self.dsn).path or self.dsn[len("chdb://") :])


_config = StoreConfig(dsn=os.environ.get("TELEMETRY_DSN", ""))
_local = threading.local()
_lock_fd: int | None = None
_lock_guard = threading.Lock()
_generation = 0  # bumped by configure(): thread clients of an older config are discarded


def configure(dsn: str, *, cluster: str = "", ttl_days: int = 400, query_timeout_s: int = 60) -> None:
    global _config, _generation
    _config = StoreConfig(dsn=dsn, cluster=cluster, ttl_days=ttl_days, query_timeout_s=query_timeout_s)
    _generation += 1


def config() -> StoreConfig:
    return _config


def _read_holder(lock_path: Path) -> str:
    try:
        return lock_path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def acquire_data_dir_lock(path: Path) -> None:
    """Hold an exclusive advisory lock on the chDB data dir for this process's life."""
    global _lock_fd
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
    try:
        return clickhouse_connect.get_client(
            dsn=cfg.dsn,
            connect_timeout=10,
            send_receive_timeout=cfg.query_timeout_s + 30,
            autogenerate_session_id=False,
        )
    except Exception as exc:
        safe = urlparse(cfg.dsn)._replace(netloc=urlparse(cfg.dsn).hostname or "").geturl()
        raise StoreUnavailable(f"cannot reach the ClickHouse server at {safe}: {exc}") from exc


def get_client():
    """The calling thread's own client (created on first use)."""
    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "generation", None) != _generation:
        client = _new_client()
        _local.client = client
        _local.generation = _generation
    return client


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
    sql, settings = with_settings(sql, tag, timeout_s)
    return get_client().query_df(sql, parameters=params, settings=settings)


def query_rows(sql: str, parameters: dict | None = None, *, tag: str, timeout_s: int | None = None) -> list[tuple]:
    params = used_parameters(sql, parameters)
    sql, settings = with_settings(sql, tag, timeout_s)
    return get_client().query(sql, parameters=params, settings=settings).result_rows


def query_arrow(sql: str, parameters: dict | None = None, *, tag: str, timeout_s: int | None = None):
    params = used_parameters(sql, parameters)
    sql, settings = with_settings(sql, tag, timeout_s)
    return get_client().query_arrow(sql, parameters=params, settings=settings)


def command(sql: str, parameters: dict | None = None, *, tag: str = "command"):
    return get_client().command(sql, parameters=parameters or None, settings=query_settings(tag))


def ping() -> tuple[bool, str]:
    """(ok, detail) without raising: used by /healthz."""
    try:
        rows = query_rows("SELECT version()", tag="healthz", timeout_s=5)
        return True, f"ClickHouse {rows[0][0]}" + (" (embedded chDB)" if _config.embedded else "")
    except Exception as exc:
        return False, str(exc).splitlines()[0][:300]
