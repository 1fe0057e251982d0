"""Numbered SQL migrations for the telemetry store, applied forwards.

Each ``telemetry/migrations/NNNN_name.sql`` holds one or more statements with a
few markers, so the same file serves a single node and a cluster:

    $LOCAL            '' on a single node; '_local' on a cluster (the shard-local table)
    $ON_CLUSTER       '' or 'ON CLUSTER <name>'
    $ENGINE(X)        X, or its Replicated form with the keeper path and replica macro
    $TTL(expr)        'TTL expr + INTERVAL n DAY', or nothing when TELEMETRY_TTL_DAYS=0
    $SETTINGS         the table SETTINGS (insert de-duplication window on a single node)
    $DISTRIBUTED(t, key)  on a cluster, the Distributed table t over t_local; else nothing
    $ALTER_DISTRIBUTED(t, clause)  on a cluster, ALTER TABLE t ON CLUSTER ... clause (the
                      Distributed table follows a column added to t_local); else nothing

Applied migrations are recorded in ``precursor_migrations`` with a checksum;
running again applies only what is new. An applied file whose text changed is
reported, never silently re-run.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
LEDGER = "precursor_migrations"

# Retried identical batches carry the same insert_deduplication_token; a
# non-replicated MergeTree only remembers tokens within this window of blocks.
DEDUP_WINDOW = 10000

_NAME_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_CREATE_RE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)\$LOCAL", re.I)
_ENGINE_RE = re.compile(r"\$ENGINE\((\w+)(?:\(([^()]*)\))?\)")
_TTL_RE = re.compile(r"\$TTL\(([^;\n]*)\)\s*$", re.M)
_DIST_RE = re.compile(r"^\$DISTRIBUTED\((\w+),\s*(.+)\)\s*$")
_ALTER_DIST_RE = re.compile(r"^\$ALTER_DISTRIBUTED\((\w+),\s*(.+)\)\s*$", re.S)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Target:
    cluster: str = ""  # ClickHouse cluster name, '' for one node
    ttl_days: int = 400

    def __post_init__(self):
        if self.cluster and not _IDENT_RE.match(self.cluster):
            raise MigrationError(f"TELEMETRY_CLUSTER={self.cluster!r} is not a valid cluster name")


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME_RE.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files are named NNNN_snake_case.sql")
        found.append(Migration(int(match.group(1)), path.stem, path.read_text()))
    numbers = [m.number for m in found]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migrations share a number in {directory}")
    return found


def _split(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    return [stmt.strip() for stmt in "\n".join(lines).split(";") if stmt.strip()]


def _engine(table: str, name: str, args: str | None, target: Target) -> str:
    if not target.cluster:
        return f"{name}({args})" if args else name
    path = f"'/clickhouse/tables/{{shard}}/{{database}}/{table}_local', '{{replica}}'"
    return f"Replicated{name}({path}{', ' + args if args else ''})"


def render(statement: str, target: Target) -> str | None:
    """One statement with markers -> SQL for the target, or None to skip it."""
    altered = _ALTER_DIST_RE.match(statement)
    if altered:
        if not target.cluster:
            return None
        return f"ALTER TABLE {altered.group(1)} ON CLUSTER {target.cluster} {altered.group(2)}"
    dist = _DIST_RE.match(statement)
    if dist:
        if not target.cluster:
            return None
        table, key = dist.group(1), dist.group(2)
        return (
            f"CREATE TABLE IF NOT EXISTS {table} ON CLUSTER {target.cluster} AS {table}_local "
            f"ENGINE = Distributed({target.cluster}, currentDatabase(), {table}_local, {key})"
        )
    created = _CREATE_RE.search(statement)
    table = created.group(1) if created else ""
    sql = _ENGINE_RE.sub(lambda m: _engine(table, m.group(1), m.group(2), target), statement)
    sql = _TTL_RE.sub(
        lambda m: f"TTL {m.group(1)} + INTERVAL {target.ttl_days} DAY" if target.ttl_days else "", sql
    )
    settings = "" if target.cluster else f"SETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}"
    sql = sql.replace("$SETTINGS", settings)
    sql = sql.replace("$LOCAL", "_local" if target.cluster else "")
    sql = sql.replace("$ON_CLUSTER", f"ON CLUSTER {target.cluster}" if target.cluster else "")
    if "$" in re.sub(r"'[^']*'", "", sql):
        raise MigrationError(f"unknown marker left in statement: {sql[:120]}")
    return re.sub(r"[ \t]+\n", "\n", sql).strip()


def render_migration(migration: Migration, target: Target) -> list[str]:
    return [sql for sql in (render(stmt, target) for stmt in _split(migration.text)) if sql]


def ledger_ddl(target: Target) -> str:
    on = f" ON CLUSTER {target.cluster}" if target.cluster else ""
    engine = (
        f"ReplicatedMergeTree('/clickhouse/tables/{{shard}}/{{database}}/{LEDGER}', '{{replica}}')"
        if target.cluster
        else "MergeTree"
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {LEDGER}{on} (number UInt32, name String, checksum String, "
        f"applied DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = {engine} ORDER BY number"
    )


def applied(client, target: Target) -> dict[int, tuple[str, str]]:
    client.command(ledger_ddl(target))
    rows = client.query(f"SELECT number, name, checksum FROM {LEDGER} ORDER BY number").result_rows
    return {int(n): (name, checksum) for n, name, checksum in rows}


def pending(client, target: Target, migrations: list[Migration] | None = None) -> list[Migration]:
    done = applied(client, target)
    todo = []
    for migration in migrations if migrations is not None else discover():
        if migration.number in done:
            name, checksum = done[migration.number]
            if checksum != migration.checksum:
                raise MigrationError(
                    f"telemetry migration {migration.name} was applied with different text "
                    f"(checksum {checksum}, file now {migration.checksum}); add a new migration instead of editing it"
                )
            continue
        todo.append(migration)
    return todo


def migrate(client, target: Target, *, log=print, migrations: list[Migration] | None = None) -> list[str]:
    """Apply pending migrations in order; returns the names applied (empty when up to date)."""
    names = []
    for migration in pending(client, target, migrations):
        for sql in render_migration(migration, target):
            client.command(sql)
        client.insert(
            LEDGER,
            [[migration.number, migration.name, migration.checksum]],
            column_names=["number", "name", "checksum"],
        )
        log(f"applied telemetry migration {migration.name}")
        names.append(migration.name)
    return names
