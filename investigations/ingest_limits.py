"""What every ingest request passes before its parser sees it: the per-token rate limit and the
bounded body read (size limit from Content-Length, then the actual bytes; optional gzip).

Used by the ingest router (investigations/ingest_api.py); kept apart so the limits can be read,
tuned and tested without the endpoints. Refusals are the JSON error shape the ingest API answers
with everywhere (error, line, field, reason).
"""
from __future__ import annotations

import logging
import math
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


# GCRA in Redis: one key per token holding its theoretical arrival time (TAT), read, checked and
# moved in one atomic step, on the Redis server's clock (web processes on several machines agree).
# Returns 0 when admitted, else the seconds until the request would be (as text: Lua numbers
# come back as integers otherwise).
_GCRA_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - now - tau
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], tostring(tat + interval), 'PX', math.ceil((tat + interval - now) * 1000) + 1000)
return '0'
"""


class RateLimiter:
    """``limit`` requests per minute per token as a token bucket (GCRA: one number per token, the
    time its bucket is empty up to): one request every 60/limit s sustained, up to ``limit`` at
    once after a quiet minute. A refused request is told exactly when the next one will be
    admitted (not the rest of a fixed minute). In Redis when configured (shared by all web
    processes, Redis' clock), else in this process's memory."""

    def __init__(self, clock=time.monotonic):
        self._lock = threading.Lock()
        self._tat: dict[int, float] = {}  # token id -> theoretical arrival time (clock seconds)
        self._clock = clock
        self._redis = None
        self._script = None

    def _redis_client(self):
        if self._redis is None and settings.REDIS_URL:
            import redis

            self._redis = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
            self._script = self._redis.register_script(_GCRA_LUA)
        return self._redis

    def hit(self, token_id: int, limit: int) -> float:
        """0 when admitted (and counted), else the seconds until this token's next request is."""
        interval = 60.0 / limit
        tau = 60.0 - interval  # a full bucket admits `limit` requests at once
        if self._redis_client() is not None:
            try:
                return float(self._script(keys=[f"precursor:ingest-rate:{token_id}"], args=[interval, tau]))
            except Exception:  # a Redis hiccup must not stop telemetry; fall back to this process's bucket
                log.warning("ingest rate limiter: Redis unavailable, counting in memory", exc_info=True)
        with self._lock:
            now = self._clock()
            tat = max(self._tat.get(token_id, now), now)
            wait = tat - now - tau
            if wait > 0:
                return wait
            if len(self._tat) > 10_000:  # forget tokens whose bucket is full again
                self._tat = {k: v for k, v in self._tat.items() if v > now}
            self._tat[token_id] = tat + interval
            return 0.0

    def reset(self) -> None:
        with self._lock:
            self._tat.clear()


def retry_after(wait_s: float) -> str:
    """``Retry-After`` for a wait: whole seconds (HTTP has no fractions), rounded up, at least 1."""
    return str(max(1, math.ceil(wait_s)))


rate_limiter = RateLimiter()


def read_body(request: HttpRequest, *, allow_gzip: bool = False) -> bytes:
    """The request body within the size limit, after the rate check; Refused otherwise."""
    limit = settings.INGEST_MAX_BODY_BYTES
    wait = rate_limiter.hit(request.ingest_token.pk, settings.INGEST_RATE_PER_MINUTE)
    if wait:
        raise Refused(error_response(429, f"rate limit of {settings.INGEST_RATE_PER_MINUTE} requests per minute "
                                          f"for this token exceeded: the next request is admitted in {wait:.2f} s",
                                     headers={"Retry-After": retry_after(wait)}))
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
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
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
