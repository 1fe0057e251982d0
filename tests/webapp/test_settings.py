"""Settings: a bad value stops start-up with a message naming the variable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def start(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG")}
    full.update({"PRECURSOR_DATA_DIR": str(tmp_path), **env})
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "variable,value,reason",
    [
        ("DEBUG", "maybe", "is not a boolean"),
        ("PRECURSOR_WORKER_THREADS", "lots", "is not an integer"),
        ("PRECURSOR_WORKER_THREADS", "0", "must be at least 1"),
        ("TELEMETRY_TTL_DAYS", "-3", "must be at least 0"),
        ("TELEMETRY_DSN", "mysql://db/x", "must start with chdb://"),
        ("REDIS_URL", "localhost:6379", "must start with redis://"),
        ("DATABASE_URL", "nosuchdb://x/y", "DATABASE_URL"),
        ("ALLOWED_HOSTS", "a,,b", "has an empty item"),
        ("LOG_LEVEL", "LOUD", "must be one of"),
        ("SECRET_KEY", "short", "is too short"),
    ],
)
def test_a_bad_value_stops_startup_naming_the_variable(tmp_path, variable, value, reason):
    extra = {"SECRET_KEY": "x" * 40} if variable == "DATABASE_URL" else {}
    out = start(tmp_path, **{variable: value, **extra})
    assert out.returncode == 2
    assert variable in out.stderr and reason in out.stderr
    assert "Traceback" not in out.stderr


def test_production_without_a_secret_key_is_refused(tmp_path):
    out = start(tmp_path, DATABASE_URL="postgres://u@127.0.0.1:5432/test")
    assert out.returncode == 2
    assert "SECRET_KEY" in out.stderr and "must be set in production" in out.stderr


@pytest.mark.slow
def test_the_embedded_defaults_need_no_variables_and_keep_one_secret_key(tmp_path):
    assert start(tmp_path).returncode == 0
    key = (tmp_path / "secret_key").read_text()
    assert len(key) >= 50
    assert start(tmp_path).returncode == 0
    assert (tmp_path / "secret_key").read_text() == key


@pytest.mark.slow
def test_the_data_dir_is_created_even_when_the_secret_key_comes_from_the_environment(tmp_path):
    data = tmp_path / "new" / "data"
    full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG")}
    full.update({"PRECURSOR_DATA_DIR": str(data), "SECRET_KEY": "k" * 40})
    out = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=full, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert (data / "precursor.sqlite3").exists()


def test_an_unusable_data_dir_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = start(tmp_path, PRECURSOR_DATA_DIR=str(blocker / "sub"))
    assert out.returncode == 2
    assert "PRECURSOR_DATA_DIR" in out.stderr and "cannot be created" in out.stderr
