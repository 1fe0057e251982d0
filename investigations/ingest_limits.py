"""What every ingest request passes before its parser sees it: the per-token rate limit and the
bounded body read (size limit from Content-Length, then the actual bytes; optional gzip).

Used by the ingest router (investigations/ingest_api.py); kept apart so the limits can be read,
tuned and tested without the endpoints. Refusals are the JSON error shape the ingest API answers
with everywhere (error, line, field, reason).
"""
from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from telemetry.ingestion import limits
from telemetry.ingestion.errors import IngestError

log = logging.getLogger("investigations.ingest_api")


def error_response(status: int, error: str, *, line=None, field=None, reason=None,
                   headers: dict | None = None) -> JsonResponse:
    response = JsonResponse(
        {"error": error, "line": line, "field": field, "reason": reason if reason is not None else error},
        status=status,
    )
    for key, value in (headers or {}).items():
        response[key] = value
    return response


class Refused(Exception):
    """A request refused before parsing; ``response`` is what to answer."""

    def __init__(self, response: HttpResponse):
        self.response = response


class RateLimiter:
    """Fixed one-minute windows per token: in Redis when configured (shared by all
    web processes), else in this process's memory."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: dict[tuple[int, int], int] = {}
        self._redis = None

    def _redis_client(self):
        if self._redis is None and settings.REDIS_URL:
            import redis

            self._redis = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        return self._redis

    def hit(self, token_id: int, limit: int) -> int:
        """0 when allowed, else the seconds until the window resets."""
        now = time.time()
        window = int(now // 60)
        retry_after = max(1, int(60 - now % 60))
        client = self._redis_client()
        if client is not None:
            key = f"precursor:ingest-rate:{token_id}:{window}"
            try:
                pipe = client.pipeline()
                pipe.incr(key)
                pipe.expire(key, 120)
                count = pipe.execute()[0]
                return 0 if count <= limit else retry_after
            except Exception:  # a Redis hiccup must not stop telemetry; fall back to this process's count
                log.warning("ingest rate limiter: Redis unavailable, counting in memory", exc_info=True)
        with self._lock:
            if len(self._counts) > 10_000:
                self._counts = {k: v for k, v in self._counts.items() if k[1] == window}
            key2 = (token_id, window)
            self._counts[key2] = self._counts.get(key2, 0) + 1
            return 0 if self._counts[key2] <= limit else retry_after

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


rate_limiter = RateLimiter()


def read_body(request: HttpRequest, *, allow_gzip: bool = False) -> bytes:
    """The request body within the size limit, after the rate check; Refused otherwise."""
    limit = settings.INGEST_MAX_BODY_BYTES
    retry_after = rate_limiter.hit(request.ingest_token.pk, settings.INGEST_RATE_PER_MINUTE)
    if retry_after:
        raise Refused(error_response(429, f"rate limit of {settings.INGEST_RATE_PER_MINUTE} requests per minute "
                                          "for this token exceeded", headers={"Retry-After": str(retry_after)}))
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared_n = int(declared)
    except ValueError:
        raise Refused(error_response(400, f"bad Content-Length {declared!r}", field="Content-Length")) from None
    if declared_n > limit:
        raise Refused(error_response(413, f"body of {declared_n} bytes is over the limit of {limit} bytes",
                                     field="body", reason="too large: split the batch"))
    # Read the stream ourselves: request.body would refuse (400) past DATA_UPLOAD_MAX_MEMORY_SIZE.
    data = request.read(limit + 1)
    if len(data) > limit:
        raise Refused(error_response(413, f"body over the limit of {limit} bytes", field="body",
                                     reason="too large: split the batch"))
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if allow_gzip and encoding in ("gzip", "x-gzip"):
        try:
            data = limits.decode_gzip(data, limit)  # to its end: a truncated stream is refused
        except IngestError as exc:  # TooLarge (413) or not gzip / truncated (400)
            raise Refused(error_response(413 if isinstance(exc, limits.TooLarge) else 400, str(exc),
                                         field=exc.field, reason=exc.reason)) from None
    elif allow_gzip and encoding not in ("", "identity"):
        raise Refused(error_response(415, f"unsupported Content-Encoding {encoding!r} (use gzip or none)",
                                     field="Content-Encoding"))
    return data
