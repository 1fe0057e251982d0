"""/healthz: JSON state of store, database, broker and workers; 503 when one is down."""
from __future__ import annotations

import pytest

from telemetry import store
from webapp import celery_app, worker
from webapp.worker import EmbeddedWorker


@pytest.fixture
def embedded_worker(telemetry_store):
    w = EmbeddedWorker(celery_app, concurrency=1)
    w.start()
    worker.set_current(w)
    yield w
    worker.set_current(None)
    w.stop()


@pytest.mark.django_db
def test_healthz_is_ok_when_everything_is_up_and_needs_no_login(client, embedded_worker):
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"telemetry", "database", "broker", "workers"}
    assert "ClickHouse" in body["checks"]["telemetry"]["detail"]


@pytest.mark.django_db
def test_healthz_is_503_when_the_telemetry_store_is_down(client, embedded_worker):
    old = store.config()
    store.configure("http://127.0.0.1:9/", query_timeout_s=2)
    try:
        response = client.get("/healthz")
    finally:
        store.configure(old.dsn, cluster=old.cluster, ttl_days=old.ttl_days, query_timeout_s=old.query_timeout_s)
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["telemetry"]["ok"] is False and checks["database"]["ok"] is True


@pytest.mark.django_db
def test_healthz_is_503_when_no_worker_runs(client, telemetry_store):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["workers"] == {"ok": False, "detail": "no worker running (start with `manage.py serve`)"}


@pytest.mark.django_db
def test_healthz_is_503_when_redis_is_unreachable(client, embedded_worker, settings):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"]["ok"] is False
