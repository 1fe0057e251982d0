"""GET /healthz: the state of the telemetry store, the database, the broker and the workers.

HTTP 200 when all are up, 503 when one is down. No login: load balancers and
compose health checks call it.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from telemetry import store


def _database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return {"ok": True, "detail": connection.vendor}
    except Exception as exc:
        return {"ok": False, "detail": str(exc).splitlines()[0][:300]}


def _broker() -> dict:
    if not settings.REDIS_URL:
        return {"ok": True, "detail": "in-process (memory) broker"}
    try:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        return {"ok": True, "detail": "redis"}
    except Exception as exc:
        return {"ok": False, "detail": f"redis: {exc}"[:300]}


def _workers() -> dict:
    from webapp import celery_app, worker

    embedded = worker.current()
    if embedded is not None:
        if embedded.alive:
            return {"ok": True, "detail": f"{embedded.concurrency} embedded worker threads"}
        return {"ok": False, "detail": f"embedded worker stopped: {embedded.error}"}
    if not settings.REDIS_URL:
        return {"ok": False, "detail": "no worker running (start with `manage.py serve`)"}
    try:
        replies = celery_app.control.inspect(timeout=1.0).ping() or {}
    except Exception as exc:
        return {"ok": False, "detail": f"cannot ask workers: {exc}"[:300]}
    if not replies:
        return {"ok": False, "detail": "no Celery worker answered a ping within 1 s"}
    return {"ok": True, "detail": f"{len(replies)} worker(s): {', '.join(sorted(replies))}"[:300]}


def _telemetry() -> dict:
    ok, detail = store.ping()
    out = {"ok": ok, "detail": detail}
    if ok:
        out.update(_retention())
    return out


def _retention() -> dict:
    """What the tables keep (their TTL as stored), and whether that is what the setting says."""
    from telemetry import migrate, retention

    try:
        days = retention.table_days()
    except Exception as exc:  # health must answer even when this one read fails
        return {"retention": f"cannot read: {exc}".splitlines()[0][:300]}
    out: dict = {"retention_days": {t: d for t, d in days.items() if d is not None}}
    wanted = settings.TELEMETRY_TTL_DAYS
    differ = sorted(t for t, d in days.items() if d is not None and d != wanted)
    if differ:
        note = retention.mismatch(migrate.Target(cluster=settings.TELEMETRY_CLUSTER, ttl_days=wanted))
        out["retention_note"] = note or f"TELEMETRY_TTL_DAYS={wanted} differs from {', '.join(differ)}"
    return out


@login_not_required
@require_GET
def healthz(request):
    checks = {
        "telemetry": _telemetry(),
        "database": _database(),
        "broker": _broker(),
        "workers": _workers(),
    }
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if healthy else "down", "checks": checks}, status=200 if healthy else 503)
