"""manage.py ingest: every format through the same service, clear errors naming
file and line, nothing stored from a bad file, re-runs add no rows, and the
StoreLocked message when another process holds the embedded store."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from telemetry import store

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "telemetry" / "ingestion" / "fixtures"
NOW = (int(time.time()) // 3600 - 24) * 3_600_000


def count(table: str) -> int:
    return store.query_rows(f"SELECT count() FROM {table}", tag="test")[0][0]


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_ingests_scrape_files_with_a_progress_bar(clean_store, tmp_path):
    scrape = tmp_path / "scrape.prom"
    scrape.write_text((FIXTURES / "dcgm_h100_scrape.txt").read_text())
    out, err = run(str(scrape), "--format", "prometheus", "--cluster", "east", "--ts", str(NOW))
    assert "ingested" in out and "east" in out and "no-data samples dropped" in out
    assert "ingest" in err and "100%" in err  # tqdm's bar on stderr
    assert store.query_rows("SELECT DISTINCT cluster, host FROM samples", tag="test") == [("east", "gpu-a017")]


def test_rerunning_the_same_file_adds_no_rows(clean_store, tmp_path):
    scrape = tmp_path / "scrape.prom"
    scrape.write_text((FIXTURES / "dcgm_h100_scrape.txt").read_text())
    run(str(scrape), "--format", "prometheus", "--ts", str(NOW), "--no-progress")
    first = count("samples")
    run(str(scrape), "--format", "prometheus", "--ts", str(NOW), "--no-progress")
    assert count("samples") == first > 0


def test_sacct_and_csv_files(clean_store, tmp_path):
    run(str(FIXTURES / "sacct_gpu_jobs.txt"), "--format", "sacct", "--no-progress")
    assert count("jobs") >= 2 and count("job_hosts") >= 2
    csv = tmp_path / "backfill.csv"
    csv.write_text(f"ts,host,component,metric,value\n{NOW},h1,gpu0,gpu.temperature,40\n{NOW + 1000},h1,gpu0,gpu.temperature,41\n")
    out, _ = run(str(csv), "--format", "csv", "--no-progress")
    assert "2 samples" in out and count("samples") == 2


def test_kernel_log_files_need_a_host_when_lines_name_none(clean_store, tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text("[Thu Mar 14 02:11:11 2024] NVRM: Xid (PCI:0000:9a:00): 95, pid=1, name=p, Uncontained ECC error.\n")
    with pytest.raises(CommandError) as err:
        run(str(log), "--format", "kernel-log", "--no-progress")
    assert "dmesg.txt" in str(err.value) and "line 1" in str(err.value) and "host" in str(err.value)
    run(str(log), "--format", "kernel-log", "--host", "gpu-b203", "--no-progress")
    assert store.query_rows("SELECT host, code FROM events", tag="test") == [("gpu-b203", 95)]


def test_a_bad_file_names_file_and_line_and_stores_nothing_of_it(clean_store, tmp_path):
    good = tmp_path / "good.csv"
    good.write_text(f"ts,host,metric,value\n{NOW},h1,gpu.temperature,40\n")
    bad = tmp_path / "bad.csv"
    bad.write_text(f"ts,host,metric,value\n{NOW},h1,gpu.temperature,40\n{NOW},h1,gpu.temperature,warm\n")
    with pytest.raises(CommandError) as err:
        run(str(good), str(bad), "--format", "csv", "--no-progress")
    message = str(err.value)
    assert "bad.csv" in message and "line 3" in message and "value" in message and "nothing" in message
    assert count("samples") == 1  # the good file before it landed, nothing of the bad one


def test_a_missing_file_is_named(clean_store, tmp_path):
    with pytest.raises(CommandError, match="nope.txt: no such file"):
        run(str(tmp_path / "nope.txt"), "--format", "sacct")


@pytest.mark.slow
def test_it_says_so_when_serve_holds_the_embedded_store(telemetry_store, tmp_path):
    store.get_client()  # this test process holds the data dir, as `serve` would
    log = tmp_path / "sacct.txt"
    log.write_text("JobID|State\n1|COMPLETED\n")
    env = {**os.environ, "PRECURSOR_DATA_DIR": str(settings.DATA_DIR), "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    env.pop("TELEMETRY_DSN", None)
    proc = subprocess.run([sys.executable, "manage.py", "ingest", str(log), "--format", "sacct", "--no-progress"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "locked by another Precursor process" in proc.stderr
    assert "Traceback" not in proc.stderr
