"""Retention as the tables have it: read, change and enforce the telemetry TTL.

``TELEMETRY_TTL_DAYS`` is what the operator wants; the TTL clause of each table
is what the store does. They can differ (the variable changed after the tables
were made), so everything that talks about retention reads the tables:

- ``table_days()``: the TTL of each table with one (days; 0 = kept forever),
  from ``system.tables`` (the shard-local tables on a cluster).
- ``plan()`` / ``apply()``: ``ALTER TABLE ... MODIFY TTL`` (or ``REMOVE TTL``
  for 0) for every table whose TTL differs from the wanted days. Longer or
  no retention is applied; a shorter one deletes stored rows, so it is refused
  unless asked for explicitly (``migrate_telemetry --shorten-retention``).
- ``oldest_kept_ms()``: the cut-off ingestion checks against, so rows the store
  would drop on arrival are refused with a message saying how to keep them,
  never reported as ingested.

The TTL expression of each table comes from its migration (``$TTL(expr)``), so
this module never repeats the schema.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from telemetry import migrate, store

_TTL_DAYS_RE = re.compile(r"\bTTL\s+.*?toIntervalDay\((\d+)\)", re.S)
_CACHE_S = 30.0
_cache: dict[tuple, tuple[float, dict[str, int | None]]] = {}
_cache_lock = threading.Lock()

COMMAND = "python manage.py migrate_telemetry"


class RetentionRefused(RuntimeError):
    """A retention change that would delete stored rows, not asked for explicitly."""


def ttl_expressions(migrations: list[migrate.Migration] | None = None) -> dict[str, str]:
    """table -> the expression its TTL counts from, as the migrations declare it."""
    out: dict[str, str] = {}
    for migration in migrations if migrations is not None else migrate.discover():
        for statement in migrate._split(migration.text):
            created = migrate._CREATE_RE.search(statement)
            ttl = migrate._TTL_RE.search(statement)
            if created and ttl:
                out[created.group(1)] = ttl.group(1).strip()
    return out


def _local(table: str, cluster: str) -> str:
    return f"{table}_local" if cluster else table


def parse_ttl_days(create_table_query: str) -> int:
    """Days of a table's TTL from its CREATE statement; 0 when it has none."""
    match = _TTL_DAYS_RE.search(create_table_query)
    return int(match.group(1)) if match else 0


def table_days(client=None, cluster: str | None = None, *, fresh: bool = False) -> dict[str, int | None]:
    """table -> retention in days as stored (0 = forever, None = table not created yet)."""
    cfg = store.config()
    cluster = cfg.cluster if cluster is None else cluster
    key = (cfg.dsn, cluster, store._generation)
    now = time.monotonic()
    if not fresh and client is None:
        with _cache_lock:
            hit = _cache.get(key)
        if hit and now - hit[0] < _CACHE_S:
            return dict(hit[1])
    tables = ttl_expressions()
    names = [_local(t, cluster) for t in tables]
    sql = ("SELECT name, create_table_query FROM system.tables "
           "WHERE database = currentDatabase() AND name IN {names:Array(String)}")
    if client is None:
        rows = store.query_rows(sql, {"names": names}, tag="retention:read", timeout_s=10)
    else:
        rows = client.query(sql, parameters={"names": names}).result_rows
    found = {name: parse_ttl_days(query) for name, query in rows}
    out = {t: found.get(_local(t, cluster)) for t in tables}
    with _cache_lock:
        _cache[key] = (now, dict(out))
    return out


def forget() -> None:
    """Drop the cached TTLs (after a change)."""
    with _cache_lock:
        _cache.clear()


@dataclass(frozen=True)
class Change:
    table: str
    current: int  # days, 0 = forever
    wanted: int
    sql: str

    @property
    def shortens(self) -> bool:
        return self.wanted != 0 and (self.current == 0 or self.wanted < self.current)

    def describe(self) -> str:
        def days(n: int) -> str:
            return "forever (no TTL)" if n == 0 else f"{n} days"

        return f"retention of {self.table}: {days(self.current)} -> {days(self.wanted)}"


def plan(client, target: migrate.Target) -> list[Change]:
    """The ALTERs that make every table's TTL ``target.ttl_days``."""
    current = table_days(client, target.cluster)
    on = f" ON CLUSTER {target.cluster}" if target.cluster else ""
    changes = []
    for table, expr in ttl_expressions().items():
        have = current.get(table)
        if have is None or have == target.ttl_days:
            continue
        name = _local(table, target.cluster)
        if target.ttl_days:
            sql = f"ALTER TABLE {name}{on} MODIFY TTL {expr} + INTERVAL {int(target.ttl_days)} DAY"
        else:
            sql = f"ALTER TABLE {name}{on} REMOVE TTL"
        changes.append(Change(table, have, target.ttl_days, sql))
    return changes


def apply(client, target: migrate.Target, *, allow_shorter: bool = False, log=print) -> list[Change]:
    """Apply ``plan``; a change that would delete stored rows needs ``allow_shorter``."""
    changes = plan(client, target)
    shorter = [c for c in changes if c.shortens]
    if shorter and not allow_shorter:
        raise RetentionRefused(
            "; ".join(c.describe() for c in shorter)
            + f" would delete stored rows older than {target.ttl_days} days. Nothing was changed. "
            f"To apply it anyway: {COMMAND} --shorten-retention"
        )
    for change in changes:
        client.command(change.sql)
        log(f"applied {change.describe()}")
    forget()
    return changes


def mismatch(target: migrate.Target, client=None) -> str:
    """'' when the tables keep what TELEMETRY_TTL_DAYS says, else one line saying what to run."""
    try:
        changes = plan(client or store.get_client(), target)
    except Exception:  # a store that cannot answer has other messages to show
        return ""
    if not changes:
        return ""
    return ("TELEMETRY_TTL_DAYS differs from the tables: " + "; ".join(c.describe() for c in changes)
            + f". Run `{COMMAND}" + (" --shorten-retention" if any(c.shortens for c in changes) else "")
            + "` to apply it.")


def oldest_kept_ms(table: str, now_ms: int | None = None) -> int | None:
    """The oldest timestamp (ms) a row of ``table`` can have and be kept; None = no limit."""
    days = table_days().get(table)
    if not days:
        return None
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    return now_ms - days * 86_400_000
