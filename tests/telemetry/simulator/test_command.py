"""simulate_fleet refuses clearly when a running process holds the embedded store."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # see ./precursor test --fast

REPO = Path(__file__).resolve().parents[3]


def test_a_locked_store_gives_the_lock_message_without_a_traceback(telemetry_store):
    from django.conf import settings

    telemetry_store.get_client()  # this test process now holds the data-dir lock
    env = dict(os.environ, PRECURSOR_DATA_DIR=str(settings.DATA_DIR), DJANGO_SETTINGS_MODULE="webapp.settings")
    env.pop("TELEMETRY_DSN", None)
    proc = subprocess.run([sys.executable, "manage.py", "simulate_fleet", "--hosts", "2", "--days", "0.1",
                           "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "locked by another Precursor process" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_start_names_the_option():
    proc = subprocess.run([sys.executable, "manage.py", "simulate_fleet", "--start", "yesterday", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings_test"))
    assert proc.returncode != 0 and "--start" in proc.stderr and "Traceback" not in proc.stderr


def test_the_realistic_scenario_loads_from_the_command(telemetry_store, tmp_path):
    import json

    from django.core.management import call_command

    manifest = tmp_path / "m.json"
    call_command("simulate_fleet", "--scenario", "realistic", "--hosts", "4", "--days", "0.25", "--interval", "900",
                 "--cluster", "cmd-realistic", "--manifest", str(manifest), "--no-progress",
                 stdout=open(os.devnull, "w"))
    data = json.loads(manifest.read_text())
    assert data["scenario"] == "realistic" and data["config"]["failure_scale"] == 20.0
    n = telemetry_store.query_rows("SELECT count(), uniqExact(metric) FROM samples WHERE cluster = 'cmd-realistic'",
                                   tag="test")[0]
    assert n[0] == data["counts"]["samples"] > 0 and n[1] >= 150


def test_an_unknown_scenario_is_refused_by_name():
    proc = subprocess.run([sys.executable, "manage.py", "simulate_fleet", "--scenario", "hard", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings_test"))
    assert proc.returncode != 0 and "--scenario" in proc.stderr and "Traceback" not in proc.stderr
