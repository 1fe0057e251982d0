"""Fault tests of the telemetry store (issue 12): a store that accepts connections and
never answers, one that answers errors, and a data directory removed under a
running ``serve``. /healthz must say so within seconds, telemetry pages and
/api/ingest/* must answer 503 with a message a person can act on (no internal
paths, no engine error codes), and pages that need no telemetry stay prompt."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from telemetry import store
from tests.webapp.test_serve import Browser, free_port, manage, start_serve


class SilentServer:
    """A TCP server that accepts every connection and never sends a byte."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)  # read nothing, answer nothing

    def close(self):
        self.stopped.set()
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.sock.close()


class ErrorServer(http.server.ThreadingHTTPServer):
    """An HTTP server answering every request like a ClickHouse server whose table is damaged."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = (b"Code: 107. DB::ErrnoException: Cannot open file /var/lib/clickhouse/store/abc/"
                        b"samples/all_1_1_0/columns.txt. (FILE_DOESNT_EXIST)")
                self.send_response(500)
                self.send_header("X-ClickHouse-Exception-Code", "107")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self):
        self.shutdown()
        self.server_close()


def _use_store(dsn: str, **kw):
    old = store.config()
    store.configure(dsn, query_timeout_s=old.query_timeout_s, **kw)
    return old


def _restore(old):
    store.configure(old.dsn, cluster=old.cluster, ttl_days=old.ttl_days, query_timeout_s=old.query_timeout_s)
    store.close_thread_client()


@pytest.fixture
def silent_store(telemetry_store):
    server = SilentServer()
    old = _use_store(f"http://127.0.0.1:{server.port}/")
    yield server
    _restore(old)
    server.close()


@pytest.fixture
def erring_store(telemetry_store):
    server = ErrorServer()
    old = _use_store(f"http://default:secret@127.0.0.1:{server.port}/")
    yield server
    _restore(old)
    server.close()


@pytest.fixture
def ingest_token(db, investigator):
    from investigations.tokens import create_token

    return create_token("faults", investigator)[1]


def _shown(text: str) -> None:
    """Nothing internal in what a person or a sender is shown."""
    for internal in ("Code: 107", "DB::", "/var/lib/clickhouse", "secret", "Traceback", "columns.txt"):
        assert internal not in text, f"{internal!r} leaked into: {text[:500]}"


@pytest.mark.slow
@pytest.mark.django_db
def test_healthz_is_503_within_10_s_when_the_store_never_answers(client, silent_store):
    started = time.monotonic()
    response = client.get("/healthz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503, response.content
    telemetry = response.json()["checks"]["telemetry"]
    assert telemetry["ok"] is False and "did not answer" in telemetry["detail"]
    assert elapsed < 10, f"/healthz took {elapsed:.1f} s"
    # The breaker is open now: the next answer does not wait at all.
    started = time.monotonic()
    assert client.get("/healthz").status_code == 503
    assert time.monotonic() - started < 1


@pytest.mark.slow
@pytest.mark.django_db
def test_ingest_stats_answers_json_503_when_the_store_never_answers(client, silent_store, ingest_token):
    response = client.get("/api/ingest/stats", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "10" and "did not answer" in response.json()["error"]


@pytest.mark.django_db
def test_ingest_stats_answers_json_503_on_a_store_query_error(client, erring_store, ingest_token):
    response = client.get("/api/ingest/stats", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert response.status_code == 503 and response["Content-Type"] == "application/json", response.content
    _shown(response.content.decode())
    health = client.get("/healthz")
    assert health.status_code == 503
    _shown(health.content.decode())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_pages_that_need_no_telemetry_stay_prompt_while_every_other_thread_waits_on_a_hung_store(
        silent_store, ingest_token, investigator):
    """A real threaded server (waitress, 4 threads, as `serve` sizes it: 2 may wait on the store)."""
    from django.test import Client
    from waitress.server import create_server

    from webapp.wsgi import application

    store.set_max_concurrent_calls(2)
    session = Client()
    session.force_login(investigator)
    cookie = f"sessionid={session.cookies['sessionid'].value}"
    server = create_server(application, host="127.0.0.1", port=free_port(), threads=4)
    threading.Thread(target=server.run, daemon=True).start()
    base = f"http://127.0.0.1:{server.effective_port}"

    def get(path: str, **headers):
        request = urllib.request.Request(base + path, headers=headers)
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                status = resp.status
        except urllib.error.HTTPError as err:
            status = err.code
        return status, time.monotonic() - started

    try:
        with ThreadPoolExecutor(8) as pool:
            stuck = [pool.submit(get, "/api/ingest/stats", Authorization=f"Bearer {ingest_token}") for _ in range(6)]
            time.sleep(1.0)  # the telemetry requests are in: two wait on the store, the rest are refused
            status, elapsed = get("/board/", Cookie=cookie)
            results = [f.result() for f in stuck]
    finally:
        server.close()
    assert status == 200
    assert elapsed < 3, f"/board/ took {elapsed:.1f} s behind a hung store"
    assert all(code == 503 for code, _ in results), results


# --- the telemetry directory removed under a running serve -------------------------------------


@pytest.fixture
def serving(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["PRECURSOR_DATA_DIR"] = str(tmp_path / "data")
    env["PRECURSOR_WORKER_THREADS"] = "1"
    manage(env, "migrate", "-v0")
    manage(env, "createuser", "alice", "--role", "investigator", "--password", "correct-horse-1")
    token = manage(env, "create_token", "faults").strip().split()[-1]
    log = open(tmp_path / "serve.log", "w+")
    proc, base = start_serve(env, log)
    yield base, tmp_path / "data", token
    proc.kill()
    proc.wait(10)


@pytest.mark.slow
def test_removing_the_telemetry_directory_under_serve_turns_health_and_pages_to_a_clear_503(serving):
    base, data, token = serving
    browser = Browser(base)
    assert browser.login("alice", "correct-horse-1")[0] == 200
    assert browser.get("/")[0] == 200
    shutil.move(str(data / "telemetry"), str(data / "telemetry.moved"))
    started = time.monotonic()
    try:
        urllib.request.urlopen(base + "/healthz", timeout=10)
        status, body = 200, ""
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode()
    elapsed = time.monotonic() - started
    assert status == 503 and elapsed < 5, (status, elapsed, body)
    detail = json.loads(body)["checks"]["telemetry"]["detail"]
    assert "moved or removed" in detail
    _shown(detail)
    status, page = browser.get("/")
    assert "telemetry data directory was moved or removed while Precursor was running" in page
    assert str(data) not in page and "Code:" not in page
    request = urllib.request.Request(base + "/api/ingest/prometheus?host=n1", method="POST",
                                     data=b"node_load1 1\n", headers={"Authorization": f"Bearer {token}"})
    try:
        urllib.request.urlopen(request, timeout=10)
        status = 200
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode()
    assert status == 503 and "moved or removed" in body, body
    assert not (data / "telemetry").exists() or not any((data / "telemetry").rglob("*.bin")), \
        "ingest wrote into a directory the engine recreated"
