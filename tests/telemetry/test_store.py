"""Store access: one client per thread, and a clear message when another process holds the embedded store."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from telemetry import store

REPO = Path(__file__).resolve().parents[2]


def test_each_thread_gets_its_own_client(telemetry_store):
    seen = {}

    def grab(name):
        seen[name] = store.get_client()

    threads = [threading.Thread(target=grab, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"]
    assert store.get_client() is store.get_client()
    assert store.get_client() not in seen.values()


def test_a_second_process_on_the_same_data_dir_gets_a_clear_message(telemetry_store):
    path = store.config().chdb_path
    code = (
        "from telemetry import store\n"
        f"store.configure('chdb://{path}')\n"
        "try:\n    store.get_client()\nexcept store.StoreLocked as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert f"locked by another Precursor process (pid {os.getpid()})" in out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_manage_py_reports_the_lock_without_a_traceback(telemetry_store):
    data_dir = store.config().chdb_path.parent
    env = {**os.environ, "PRECURSOR_DATA_DIR": str(data_dir)}
    env.pop("DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "manage.py", "migrate_telemetry"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1
    assert f"locked by another Precursor process (pid {os.getpid()})" in out.stderr
    assert "stop it, or point PRECURSOR_DATA_DIR" in out.stderr
    assert "Traceback" not in out.stderr


def test_ping_reports_an_unreachable_server_without_raising():
    old = store.config()
    try:
        store.configure("http://127.0.0.1:9/", query_timeout_s=2)
        ok, detail = store.ping()
    finally:
        store.configure(old.dsn, cluster=old.cluster, ttl_days=old.ttl_days, query_timeout_s=old.query_timeout_s)
    assert ok is False
    assert "127.0.0.1" in detail or "onnect" in detail


def test_queries_carry_their_tag_and_time_limit_in_their_own_settings_clause(telemetry_store):
    sql, settings = store.with_settings("SELECT 1;", "overlay.series", 7)
    assert settings == {}
    assert sql.endswith("SETTINGS max_execution_time = 7, log_comment = 'overlay.series'")
    rows = store.query_rows("SELECT getSetting('max_execution_time'), getSetting('log_comment')", tag="probe.tag", timeout_s=9)
    assert rows == [(9, "probe.tag")]


def test_a_query_with_its_own_settings_clause_gets_them_per_call():
    sql, settings = store.with_settings("SELECT 1 SETTINGS max_threads = 1", "x", 5)
    assert sql == "SELECT 1 SETTINGS max_threads = 1"
    assert settings == {"log_comment": "x", "max_execution_time": 5}


def test_tags_cannot_break_out_of_the_settings_clause():
    sql, _ = store.with_settings("SELECT 1", "evil', max_threads = 1 --", 5)
    assert sql.endswith("log_comment = 'evil__ max_threads _ 1 --'")


def test_the_time_limit_stops_a_long_query(telemetry_store):
    import pytest

    with pytest.raises(Exception, match="TIMEOUT_EXCEEDED|Timeout exceeded"):
        store.query_rows("SELECT count() FROM numbers_mt(100000000000) WHERE sleepEachRow(0) = 0", tag="probe.timeout", timeout_s=1)
