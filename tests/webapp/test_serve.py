"""`manage.py serve` end to end: one process answers HTTP while its own Celery worker
threads run a long engine query, re-runs jobs a dead process left behind, and stops
cleanly on Ctrl-C. Run with the in-memory broker (embedded default) and with Redis."""
from __future__ import annotations

import http.cookiejar
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # see ./precursor test --fast

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


class Browser:
    """A cookie-keeping HTTP client that logs in like a person and calls the API."""

    def __init__(self, base: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def get(self, path: str, timeout: float = 30):
        try:
            with self.opener.open(self.base + path, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def post(self, path: str, data: dict | None = None, json_body: dict | None = None):
        headers = {"X-CSRFToken": self.csrf(), "Referer": self.base + "/"}
        if json_body is not None:
            body, headers["Content-Type"] = json.dumps(json_body).encode(), "application/json"
        else:
            body = urllib.parse.urlencode({**(data or {}), "csrfmiddlewaretoken": self.csrf()}).encode()
        request = urllib.request.Request(self.base + path, data=body, headers=headers, method="POST")
        try:
            with self.opener.open(request, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def login(self, username: str, password: str):
        self.get("/login/")
        return self.post("/login/", {"username": username, "password": password, "next": "/"})


def manage(env, *args, timeout=180):
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout


def start_serve(env, log, *args, timeout=120):
    """`manage.py serve` (with ``args``) on a free port, its output to ``log``: (process, base URL)
    once /healthz answers 200; the test fails with the log when it never does."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), *args], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
                if resp.status == 200:
                    return proc, base
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.3)
    proc.kill()
    log.seek(0)
    pytest.fail(f"serve did not become healthy:\n{log.read()}")


@pytest.fixture(params=["memory", "redis"])
def served(request, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["PRECURSOR_DATA_DIR"] = str(tmp_path / "data")
    env["PRECURSOR_WORKER_THREADS"] = "2"
    if request.param == "redis":
        if not redis_up():
            pytest.skip("Redis is not running on 127.0.0.1:6379 (.ci/run starts it)")
        env["REDIS_URL"] = f"redis://127.0.0.1:6379/{random.randint(1, 15)}"
        env["PRECURSOR_EMBEDDED_WORKERS"] = "true"
    manage(env, "migrate", "-v0")
    manage(env, "createuser", "alice", "--role", "investigator", "--password", "correct-horse-1")
    # A job that was running when an earlier process died.
    manage(env, "shell", "-c", "from investigations.models import BackgroundJob as J; J.objects.create(kind='store_summary', state='running', attempts=1)")
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    # started with SIGINT ignored, as a non-interactive shell starts a background job: Ctrl-C /
    # SIGINT must stop it all the same (the test ends with one)
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    else:
        proc.kill()
        log.seek(0)
        pytest.fail(f"serve did not become healthy in 120 s:\n{log.read()}")
    if proc.poll() is not None:
        log.seek(0)
        pytest.fail(f"serve exited early:\n{log.read()}")
    yield proc, base, log
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def wait_job(browser, job_id, states, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = browser.get(f"/api/jobs/{job_id}")
        assert status == 200, body
        job = json.loads(body)
        if job["state"] in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not in {states} after {timeout} s: {job}")


def test_serve_answers_pages_while_its_worker_threads_run_a_long_query(served):
    proc, base, log = served
    browser = Browser(base)
    status, _ = browser.login("alice", "correct-horse-1")
    assert status == 200

    # The job the dead process left running was picked up again and finished.
    status, body = browser.get("/api/jobs?kind=store_summary")
    orphan = json.loads(body)[0]
    assert wait_job(browser, orphan["id"], ("succeeded",))["attempts"] == 2

    status, body = browser.post("/api/jobs/selfcheck", json_body={"rows": 100_000_000_000, "steps": 100})
    assert status == 201, body
    job = json.loads(body)
    wait_job(browser, job["id"], ("running",))
    time.sleep(1.0)  # let the scan get going in the worker thread

    status, page = browser.get("/")
    assert status == 200 and "Interruptions" in page
    status, health = browser.get("/healthz")
    assert status == 200, health
    # The page and health answers came back while the long query was still running.
    during = wait_job(browser, job["id"], ("running", "succeeded", "failed", "cancelled"))
    assert during["state"] == "running", during
    assert during["progress_done"] < during["progress_total"]

    status, body = browser.post(f"/api/jobs/{job['id']}/cancel", json_body={})
    assert status == 200, body
    assert wait_job(browser, job["id"], ("cancelled", "failed", "succeeded"))["state"] == "cancelled"

    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    log.seek(0)
    output = log.read()
    assert "stopped" in output and "Traceback" not in output
