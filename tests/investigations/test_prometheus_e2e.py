"""End to end with real clients: Debian's prometheus scrapes Debian's
prometheus-node-exporter every second and remote-writes to a running
`manage.py serve`; node_exporter's samples must land (bounded wait).

Skipped when /usr/bin/prometheus is absent (a user's machine); `.ci/run`
installs both packages.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from telemetry import catalog

pytestmark = pytest.mark.services

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = "/usr/bin/prometheus"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
WAIT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str, procs=()):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for name, proc, log in procs:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{Path(log).read_text()[-3000:]}")
        try:
            last = predicate()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def get_json(url: str, token: str | None = None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def stack(tmp_path):
    if not (os.path.exists(PROMETHEUS) and os.path.exists(NODE_EXPORTER)):
        pytest.skip("Debian's prometheus and prometheus-node-exporter are not installed (.ci/run installs them)")
    env = {k: v for k, v in os.environ.items() if k not in ("TELEMETRY_DSN", "DATABASE_URL", "REDIS_URL")}
    env.update(PRECURSOR_DATA_DIR=str(tmp_path / "data"), DJANGO_SETTINGS_MODULE="webapp.settings",
               PRECURSOR_EMBEDDED_WORKERS="false", PYTHONUNBUFFERED="1")
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run(manage + ["migrate", "--verbosity", "0"], cwd=REPO, env=env, check=True, timeout=300)
    token = subprocess.run(manage + ["create_token", "e2e-prometheus"], cwd=REPO, env=env, check=True,
                           capture_output=True, text=True, timeout=120).stdout.strip()
    web_port, node_port, prom_port = free_port(), free_port(), free_port()
    procs = []

    def start(name, argv, **kw):
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, **kw)
        procs.append((name, proc, log))
        return proc

    try:
        start("serve", manage + ["serve", "--host", "127.0.0.1", "--port", str(web_port), "--no-worker"],
              cwd=REPO, env=env)
        base = f"http://127.0.0.1:{web_port}"
        wait_for(lambda: get_json(f"{base}/api/ingest/stats?cluster=e2e", token), 120, "Precursor to serve", procs)
        start("node_exporter", [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}",
                                "--collector.disable-defaults", "--collector.cpu", "--collector.loadavg",
                                "--collector.meminfo"])
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: node\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{node_port}']\n"
            "remote_write:\n"
            f"  - url: {base}/api/ingest/remote-write?cluster=e2e\n"
            f"    authorization:\n      credentials: {token}\n"
            "    queue_config:\n      batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n"
        )
        start("prometheus", [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"])
        yield base, token, procs
    finally:
        for name, proc, log in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        shutil.rmtree(tmp_path / "tsdb", ignore_errors=True)


def test_node_exporter_samples_pushed_by_prometheus_land(stack):
    base, token, procs = stack
    cpu = catalog.resolve("node_cpu_seconds_total").name
    load = catalog.resolve("node_load1").name

    def landed():
        stats = get_json(f"{base}/api/ingest/stats?cluster=e2e", token)["samples"]
        return stats if cpu in stats and load in stats else None

    stats = wait_for(landed, WAIT_S, "node_exporter samples to land through remote_write", procs)
    assert stats[cpu]["rows"] > 0 and stats[load]["rows"] > 0
    # Prometheus' own series (up, scrape_duration_seconds) are not in the catalog: kept under their own name.
    assert "up" in stats
    assert stats[cpu]["last_ts_ms"] > (time.time() - 600) * 1000
