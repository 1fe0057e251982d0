"""HTTP ingestion: /api/ingest/* for machines (token auth only, no session, no CSRF).

Endpoints (all POST bodies are the tools' own output, unchanged):

- ``POST /api/ingest/prometheus``   text exposition (dcgm-exporter, node_exporter scrape); gzip allowed
- ``POST /api/ingest/remote-write`` Prometheus remote-write 1.0 (snappy + protobuf)
- ``POST /api/ingest/kernel-log``   dmesg / journal / syslog text
- ``POST /api/ingest/sacct``        ``sacct -P`` output with its header
- ``GET  /api/ingest/stats``        rows per metric / table for a cluster (lets a sender check what landed)

Auth: ``Authorization: Bearer <token>`` (Prometheus ``authorization.credentials`` or
``bearer_token``), or HTTP basic auth with the token as password for tools that
only do basic auth. Order of checks: 401 unknown token, 429 over the per-token
rate (``Retry-After``), 413 body over ``INGEST_MAX_BODY_BYTES`` (from
Content-Length before reading, then the actual body), 415 wrong content
type/encoding, 400 bad data (JSON naming line, field, reason; nothing stored),
503 store unavailable (transient: senders retry). Success: 200 with the ingest
report, 204 (empty) for remote-write as its spec asks.
"""
from __future__ import annotations

import base64
import gzip
import logging
import threading
import time
import zlib
from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router
from ninja.security.base import AuthBase

from investigations import tokens
from telemetry import store
from telemetry.ingestion import service
from telemetry.ingestion.errors import IngestError

log = logging.getLogger(__name__)

router = Router(tags=["ingest"])


# --- auth --------------------------------------------------------------------------------


class IngestTokenAuth(AuthBase):
    """Bearer token, or basic auth whose password is the token."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest):
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        plaintext = None
        if scheme.lower() == "bearer":
            plaintext = value.strip()
        elif scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
            plaintext = decoded.partition(":")[2]
        token = tokens.authenticate(plaintext, scope="ingest")
        if token is not None:
            request.ingest_token = token
        return token


token_auth = IngestTokenAuth()


# --- rate limit --------------------------------------------------------------------------


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


# --- helpers -----------------------------------------------------------------------------


def _error(status: int, error: str, *, line=None, field=None, reason=None, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse(
        {"error": error, "line": line, "field": field, "reason": reason if reason is not None else error},
        status=status,
    )
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def _rejected(exc: IngestError) -> JsonResponse:
    return _error(400, f"batch rejected, nothing stored: {exc}", line=exc.line, field=exc.field, reason=exc.reason)


class _Refused(Exception):
    def __init__(self, response: HttpResponse):
        self.response = response


def _body(request: HttpRequest, *, allow_gzip: bool = False) -> bytes:
    """The request body within the size limit, after the rate check."""
    limit = settings.INGEST_MAX_BODY_BYTES
    retry_after = rate_limiter.hit(request.ingest_token.pk, settings.INGEST_RATE_PER_MINUTE)
    if retry_after:
        raise _Refused(_error(429, f"rate limit of {settings.INGEST_RATE_PER_MINUTE} requests per minute for this "
                                   "token exceeded", headers={"Retry-After": str(retry_after)}))
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared_n = int(declared)
    except ValueError:
        raise _Refused(_error(400, f"bad Content-Length {declared!r}", field="Content-Length")) from None
    if declared_n > limit:
        raise _Refused(_error(413, f"body of {declared_n} bytes is over the limit of {limit} bytes",
                              field="body", reason="too large: split the batch"))
    # Read the stream ourselves: request.body would refuse (400) past DATA_UPLOAD_MAX_MEMORY_SIZE.
    data = request.read(limit + 1)
    if len(data) > limit:
        raise _Refused(_error(413, f"body over the limit of {limit} bytes", field="body",
                              reason="too large: split the batch"))
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if allow_gzip and encoding in ("gzip", "x-gzip"):
        try:
            dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = dec.decompress(data, limit + 1)
            if len(data) > limit or dec.unconsumed_tail:
                raise _Refused(_error(413, f"decompressed body over the limit of {limit} bytes", field="body",
                                      reason="too large: split the batch"))
        except (zlib.error, gzip.BadGzipFile) as exc:
            raise _Refused(_error(400, f"body is not valid gzip: {exc}", field="Content-Encoding")) from None
    elif allow_gzip and encoding not in ("", "identity"):
        raise _Refused(_error(415, f"unsupported Content-Encoding {encoding!r} (use gzip or none)",
                              field="Content-Encoding"))
    return data


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError("not UTF-8 text", line=line, field="body") from None


def _cluster(request: HttpRequest) -> str:
    return request.GET.get("cluster") or settings.TELEMETRY_DEFAULT_CLUSTER


def _int_param(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise IngestError(f"query parameter {name} must be a whole number, got {raw!r}", field=name) from None


def _ts_param(request: HttpRequest, name: str = "ts") -> int | None:
    """Milliseconds since the epoch, or ISO-8601."""
    raw = request.GET.get(name)
    if raw in (None, ""):
        return None
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise IngestError(f"query parameter {name} must be ms since the epoch or ISO-8601, got {raw!r}",
                          field=name) from None
    if dt.tzinfo is None:
        from datetime import timezone

        dt = dt.replace(tzinfo=timezone.utc)
    return round(dt.timestamp() * 1000)


def _run(request: HttpRequest, work, *, allow_gzip: bool = False, success_status: int = 200):
    """Body -> parse+validate -> write, mapping each failure to its status code."""
    try:
        data = _body(request, allow_gzip=allow_gzip)
    except _Refused as refused:
        return refused.response
    try:
        report = work(data)
    except IngestError as exc:
        return _rejected(exc)
    except (store.StoreLocked, store.StoreUnavailable) as exc:
        return _error(503, f"telemetry store unavailable: {exc}", headers={"Retry-After": "10"})
    except _ParseBug as bug:
        log.error("ingest parser failed on input it should reject cleanly", exc_info=bug.__cause__)
        return _error(400, "batch rejected, nothing stored: the body could not be parsed",
                      reason=f"unparseable input ({type(bug.__cause__).__name__})")
    except Exception as exc:  # the write failed: transient from the sender's view, so it retries
        log.exception("ingest write failed")
        return _error(503, f"telemetry store write failed: {type(exc).__name__}", headers={"Retry-After": "10"})
    if success_status == 204:
        response = HttpResponse(status=204)
        response["X-Precursor-Rows-Written"] = str(report.total_rows)
        return response
    return JsonResponse(report.as_dict(), status=success_status)


class _ParseBug(Exception):
    """A parser raised something other than IngestError: a bug, but still the sender's
    data cannot be stored as it is, so 400 (never 5xx, which would make it retry forever)."""


def _parsing(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except IngestError:
        raise
    except (store.StoreLocked, store.StoreUnavailable):
        raise
    except Exception as exc:
        raise _ParseBug() from exc


# --- endpoints ---------------------------------------------------------------------------


@router.post("/prometheus", auth=token_auth, summary="Ingest one Prometheus text-exposition scrape")
def ingest_prometheus(request):
    """Query: ``cluster``, ``host`` (for series without Hostname/hostname/instance),
    ``ts`` (scrape time, ms or ISO-8601; default: now)."""

    def work(data: bytes):
        text = _text(data)
        result = _parsing(service.parse_prometheus_text, text, _cluster(request), request.GET.get("host"),
                          _ts_param(request))
        return service.write_samples(result, "prometheus", _cluster(request).strip(), "ingest:prometheus")

    return _run(request, work, allow_gzip=True)


_RW_CONTENT_TYPES = ("application/x-protobuf",)


@router.post("/remote-write", auth=token_auth, summary="Prometheus remote-write 1.0 receiver")
def ingest_remote_write(request):
    """Point ``remote_write.url`` here. Query: ``cluster``. 204 on success, 400 on bad
    data (not retried), 415 on a wrong encoding or remote-write 2.0, 503 when the store
    is down (retried)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    ctype = request.headers.get("Content-Type", "").strip()
    media, _, params = ctype.partition(";")
    media = media.lower()
    proto = ""
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key == "proto":
            proto = value.strip().strip('"')
    if encoding != "snappy":
        return _error(415, f"remote-write needs Content-Encoding: snappy, got {encoding or 'none'!r}",
                      field="Content-Encoding")
    if media.strip() and media.strip() not in _RW_CONTENT_TYPES:
        return _error(415, f"remote-write needs Content-Type: application/x-protobuf, got {media.strip()!r}",
                      field="Content-Type")
    if proto and proto != "prometheus.WriteRequest":
        return _error(415, f"unsupported remote-write message {proto!r}: this receiver speaks 1.0 "
                           "(prometheus.WriteRequest)", field="Content-Type")

    def work(data: bytes):
        result = _parsing(service.parse_remote_write, data, _cluster(request))
        return service.write_samples(result, "remote-write", _cluster(request).strip(), "ingest:remote-write")

    response = _run(request, work, success_status=204)
    return response


@router.post("/kernel-log", auth=token_auth, summary="Ingest dmesg / journal / syslog text (NVRM Xid lines)")
def ingest_kernel_log(request):
    """Query: ``cluster``, ``host`` (for lines without a syslog/journal host),
    ``year`` (for syslog dates, which carry none), ``boot_ts`` (boot time, ms or
    ISO-8601, for plain dmesg seconds-since-boot)."""

    def work(data: bytes):
        text = _text(data)
        parsed = _parsing(service.parse_kernel_log, text, _cluster(request), request.GET.get("host"),
                          _int_param(request, "year"), None, _ts_param(request, "boot_ts"))
        return service.write_kernel_events(*parsed, cluster=_cluster(request))

    return _run(request, work, allow_gzip=True)


@router.post("/sacct", auth=token_auth, summary="Ingest `sacct -P` output (jobs and job -> host allocations)")
def ingest_sacct(request):
    """Query: ``cluster``."""

    def work(data: bytes):
        text = _text(data)
        jobs, job_hosts = _parsing(service.parse_sacct, text, _cluster(request))
        return service.write_sacct(text, _cluster(request), jobs, job_hosts)

    return _run(request, work, allow_gzip=True)


@router.get("/stats", auth=token_auth, summary="What has landed for a cluster")
def ingest_stats(request):
    """Rows per metric in ``samples`` and rows in the other tables, for ``cluster``."""
    cluster = _cluster(request)
    try:
        metrics = store.query_rows(
            "SELECT metric, count(), toUnixTimestamp64Milli(max(ts)) FROM samples "
            "WHERE cluster = {cluster:String} GROUP BY metric ORDER BY metric",
            {"cluster": cluster}, tag="ingest:stats", timeout_s=20)
        tables = {}
        for table in ("events", "jobs", "job_hosts"):
            tables[table] = store.query_rows(
                f"SELECT count() FROM {table} WHERE cluster = {{cluster:String}}",
                {"cluster": cluster}, tag="ingest:stats", timeout_s=20)[0][0]
    except (store.StoreLocked, store.StoreUnavailable) as exc:
        return _error(503, f"telemetry store unavailable: {exc}", headers={"Retry-After": "10"})
    return {
        "cluster": cluster,
        "samples": {m: {"rows": n, "last_ts_ms": last} for m, n, last in metrics},
        "tables": tables,
    }
