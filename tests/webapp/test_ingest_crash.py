"""A web process killed while pushes are queued for a group insert or being inserted: every push
it answered 2xx is stored, whole and once; a push it never answered may be stored or not, but
never in part. Real `serve`, real senders, SIGKILL (no clean shutdown), the store read after."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.webapp.test_serve import manage, start_serve

pytestmark = pytest.mark.slow  # see ./precursor test --fast

LINES = 20  # samples per push: one scrape of a host's 20 GPU temperatures
SENDERS = 8


def scrape(host: str) -> bytes:
    return "".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="{host}"}} {40 + g}\n' for g in range(LINES)).encode()


def test_a_killed_web_process_answered_2xx_only_for_pushes_it_stored(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["PRECURSOR_DATA_DIR"] = str(tmp_path / "data")
    manage(env, "migrate", "-v0")
    token = manage(env, "create_token", "crash-test").strip().splitlines()[-1]
    log = open(tmp_path / "serve.log", "w+")
    proc, base = start_serve(env, log, "--threads", "16")
    answered: list[str] = []  # hosts whose push got a 2xx
    sent: list[str] = []
    stop = threading.Event()
    ts = int(time.time() * 1000) // 1000 * 1000

    def sender(k: int) -> None:
        i = 0
        while not stop.is_set():
            host = f"crash-{k}-{i}"
            i += 1
            sent.append(host)
            request = urllib.request.Request(
                f"{base}/api/ingest/prometheus?cluster=crash&ts={ts}", data=scrape(host), method="POST",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain; version=0.0.4"})
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    if 200 <= resp.status < 300:
                        answered.append(host)
            except (urllib.error.URLError, ConnectionError, OSError):
                return  # the process is gone: this push was never answered

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while len(answered) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # mid-stream: pushes queued, one group being inserted
    proc.wait(30)
    stop.set()
    for t in threads:
        t.join(60)
    assert len(answered) >= 60, "the senders never got going"
    out = manage(env, "shell", "-c",
                 "import json; from telemetry import store; print(json.dumps(dict(store.query_rows("
                 "\"SELECT host, count() FROM samples WHERE cluster = 'crash' GROUP BY host\", tag='test'))))")
    stored = json.loads(out.strip().splitlines()[-1])
    missing = [h for h in answered if stored.get(h) != LINES]
    assert not missing, f"answered 2xx but not stored whole: {missing[:5]} ({len(missing)} of {len(answered)})"
    partial = {h: n for h, n in stored.items() if n != LINES}
    assert not partial, f"pushes stored in part or twice: {partial}"
    assert set(stored) <= set(sent)
    # the store opens again after the kill and takes pushes
    proc, base = start_serve(env, log)
    try:
        request = urllib.request.Request(f"{base}/api/ingest/prometheus?cluster=crash&ts={ts}",
                                         data=scrape("after-restart"), method="POST",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert resp.status == 200
    finally:
        proc.kill()
        proc.wait(30)
