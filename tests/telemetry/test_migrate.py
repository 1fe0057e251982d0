"""Telemetry migrations: applied once, idempotent, edits detected, cluster DDL valid."""
from __future__ import annotations

import re

import pytest

from telemetry import migrate, schema, store

SINGLE = migrate.Target(cluster="", ttl_days=30)
CLUSTER = migrate.Target(cluster="prod", ttl_days=30)


def all_sql(target):
    return [sql for m in migrate.discover() for sql in migrate.render_migration(m, target)]


def test_running_migrations_again_applies_nothing(telemetry_store):
    client = store.get_client()
    assert migrate.migrate(client, SINGLE, log=lambda m: None) == []
    ledger = store.query_rows("SELECT name FROM precursor_migrations ORDER BY number", tag="test")
    assert [r[0] for r in ledger] == [m.name for m in migrate.discover()]


def test_every_declared_table_exists_with_the_arrow_schema_columns(telemetry_store):
    for table, arrow_schema in schema.TABLES.items():
        described = store.query_rows(f"DESCRIBE TABLE {table}", tag="test")
        columns = [r[0] for r in described if r[0] not in schema.COMPUTED.get(table, ())]
        assert columns == arrow_schema.names, table
        # what the store computes itself has a default expression, so writers need not send it
        computed = {r[0]: (r[2], r[3]) for r in described if r[0] in schema.COMPUTED.get(table, ())}
        assert set(computed) == set(schema.COMPUTED.get(table, ())), table
        assert all(kind == "DEFAULT" and expr for kind, expr in computed.values()), computed


def test_an_edited_applied_migration_is_reported_not_rerun(telemetry_store, tmp_path):
    client = store.get_client()
    probe = migrate.Migration(9001, "9001_probe", "CREATE TABLE IF NOT EXISTS probe_t$LOCAL $ON_CLUSTER (x UInt8) ENGINE = $ENGINE(MergeTree) ORDER BY x")
    try:
        assert migrate.migrate(client, SINGLE, migrations=[probe], log=lambda m: None) == ["9001_probe"]
        assert migrate.migrate(client, SINGLE, migrations=[probe], log=lambda m: None) == []
        edited = migrate.Migration(9001, "9001_probe", probe.text + " -- changed")
        with pytest.raises(migrate.MigrationError, match="applied with different text"):
            migrate.migrate(client, SINGLE, migrations=[edited], log=lambda m: None)
    finally:
        store.command("DROP TABLE IF EXISTS probe_t")
        store.command("ALTER TABLE precursor_migrations DELETE WHERE number >= 9000 SETTINGS mutations_sync = 1")


def test_badly_named_migration_files_are_refused(tmp_path):
    (tmp_path / "1_x.sql").write_text("SELECT 1")
    with pytest.raises(migrate.MigrationError, match="NNNN_snake_case"):
        migrate.discover(tmp_path)


def test_single_node_ddl_has_no_cluster_parts():
    sql = "\n".join(all_sql(SINGLE))
    assert "ON CLUSTER" not in sql and "Replicated" not in sql and "Distributed" not in sql
    assert "_local" not in sql
    assert f"non_replicated_deduplication_window = {migrate.DEDUP_WINDOW}" in sql
    assert "INTERVAL 30 DAY" in sql


def test_cluster_ddl_is_replicated_distributed_and_on_cluster():
    statements = all_sql(CLUSTER)
    for sql in statements:
        assert "ON CLUSTER prod" in sql, sql[:80]
        assert "$" not in sql
    creates = [s for s in statements if s.startswith("CREATE TABLE") and "ENGINE = Distributed" not in s
               and not s.rstrip().endswith("ENGINE = Null")]  # samples_feed stores nothing: nothing to replicate
    for sql in creates:
        assert re.search(r"ENGINE = Replicated\w*MergeTree\('/clickhouse/tables/\{shard\}/\{database\}/\w+_local', '\{replica\}'", sql), sql[:200]
    distributed = {re.match(r"CREATE TABLE IF NOT EXISTS (\w+) ", s).group(1) for s in statements if "ENGINE = Distributed(prod" in s}
    assert distributed == set(schema.TABLES) | {"samples_1m", "metric_catalog", "samples_feed"}
    view = next(s for s in statements if "MATERIALIZED VIEW" in s)
    assert "TO samples_1m_local" in view and "FROM samples_local" in view
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/jobs_local', '{replica}', version)" in "\n".join(statements)
    # a column added to a local table is added to its Distributed table too
    assert any(s.startswith("ALTER TABLE jobs ON CLUSTER prod ADD COLUMN IF NOT EXISTS run_ts") for s in statements)
    assert any(s.startswith("ALTER TABLE jobs_local ON CLUSTER prod") and "MODIFY ORDER BY" in s for s in statements)


@pytest.mark.parametrize("target", [SINGLE, CLUSTER], ids=["single", "cluster"])
def test_every_rendered_statement_parses_in_the_real_engine(telemetry_store, target):
    # EXPLAIN AST parses without executing: the cluster DDL is checked by ClickHouse's own parser.
    for sql in all_sql(target):
        rows = store.query_rows(f"EXPLAIN AST {sql}", tag="test")
        assert rows, sql[:80]


def test_an_invalid_cluster_name_is_refused():
    with pytest.raises(migrate.MigrationError, match="not a valid cluster name"):
        migrate.Target(cluster="prod; DROP TABLE samples")


def test_streamed_tables_merge_with_a_wider_selector_base(telemetry_store):
    """Migration 0011: fewer rewrites per row by background merges for the tables pushes fill."""
    for table in ("samples", "samples_1m", "band_1m"):
        (ddl,), = store.query_rows(f"SELECT create_table_query FROM system.tables WHERE database = currentDatabase() "
                                   f"AND name = '{table}'", tag="test")
        assert "merge_selector_base = 10" in ddl, table
        assert f"non_replicated_deduplication_window = {migrate.DEDUP_WINDOW}" in ddl, table
