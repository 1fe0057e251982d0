"""HTTP ingestion: /api/ingest/* for machines (token auth only, no session, no CSRF).

Endpoints (all POST bodies are the tools' own output, unchanged):

- ``POST /api/ingest/prometheus``   text exposition (dcgm-exporter, node_exporter scrape); gzip allowed
- ``POST /api/ingest/remote-write`` Prometheus remote-write 1.0 (snappy + protobuf)
- ``POST /api/ingest/kernel-log``   dmesg / journal / syslog text
- ``POST /api/ingest/sacct``        ``sacct -P`` output with its header
- ``POST /api/ingest/bulk``         CSV / JSON Lines / Parquet in the documented schema (backfills)
- ``GET  /api/ingest/stats``        rows per metric / table for a cluster (lets a sender check what landed)

Auth: ``Authorization: Bearer <token>`` (Prometheus ``authorization.credentials`` or
``bearer_token``), or HTTP basic auth with the token as password for tools that
only do basic auth. Order of checks: 401 unknown token, 429 over the per-token
rate (``Retry-After``), 413 body over ``INGEST_MAX_BODY_BYTES`` (from
Content-Length before reading, then the actual body), 415 wrong content
type/encoding, 400 bad data (JSON naming line, field, reason; nothing stored),
503 store unavailable (transient: senders retry). Success: 200 with the ingest
report; for remote-write 200 with an empty body (the spec asks for any 2xx; a 204 would make
waitress close the sender's kept-alive connection after every push). The rate limit and the bounded body read
live in investigations/ingest_limits.py; the parsers and writers in telemetry/ingestion.
"""
from __future__ import annotations

import base64
import logging
from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router
from ninja.security.base import AuthBase

from investigations import tokens
from investigations.ingest_limits import Refused, error_response as _error, read_body
from telemetry import store
from telemetry.ingestion import limits, localtime, service
from telemetry.ingestion.errors import IngestError
from telemetry.queries import overview

log = logging.getLogger(__name__)

router = Router(tags=["ingest"])


# --- auth --------------------------------------------------------------------------------


class IngestTokenAuth(AuthBase):
    """Bearer token, or basic auth whose password is the token."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest):
        # META, not request.headers: that builds a dict of every header, on every push (~3 % of
        # the interpreter-lock time of bench ingest-fleet's text phase, py-spy)
        header = request.META.get("HTTP_AUTHORIZATION", "")
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


# --- helpers -----------------------------------------------------------------------------


def _rejected(exc: IngestError) -> JsonResponse:
    if isinstance(exc, limits.TooLarge):
        return _error(413, f"batch rejected, nothing stored: {exc}", line=exc.line, field=exc.field, reason=exc.reason)
    return _error(400, f"batch rejected, nothing stored: {exc}", line=exc.line, field=exc.field, reason=exc.reason)


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


def _flag(request: HttpRequest, name: str) -> bool:
    raw = request.GET.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise IngestError(f"query parameter {name} must be 1/0, true/false or yes/no, got {raw!r}", field=name)


def _ts_param(request: HttpRequest, name: str = "ts") -> int | None:
    """Milliseconds since the epoch, or ISO-8601."""
    raw = request.GET.get(name)
    if raw in (None, ""):
        return None
    if raw.lstrip("-").isdigit():
        # 20+ digits is past any time int64 ms can hold (and int() refuses 4,300+ digits)
        return limits.check_ts(int(raw) if len(raw) < 20 else -1, name)
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise IngestError(f"query parameter {name} must be ms since the epoch or ISO-8601, got {raw!r}",
                          field=name) from None
    if dt.tzinfo is None:  # a wall-clock time in the request's tz (UTC without one)
        return limits.check_ts(localtime.Localizer(_tz(request)).naive_to_ms(dt), name)
    return limits.check_ts(round(dt.timestamp() * 1000), name)


def _tz(request: HttpRequest):
    """The ``tz`` parameter as a zone (None = UTC); IngestError for an unknown name."""
    return localtime.zone(request.GET.get("tz"))


def _run(request: HttpRequest, work, *, allow_gzip: bool = False, headers_only: bool = False):
    """Body -> parse+validate -> write, mapping each failure to its status code."""
    try:
        data = read_body(request, allow_gzip=allow_gzip)
    except Refused as refused:
        return refused.response
    try:
        report = work(data)
    except IngestError as exc:
        return _rejected(exc)
    except (store.StoreLocked, store.StoreUnavailable) as exc:
        log.warning("ingest: telemetry store unavailable: %s", exc)
        return _error(503, f"telemetry store unavailable: {store.public_message(exc)}", headers={"Retry-After": "10"})
    except _ParseBug as bug:
        log.error("ingest parser failed on input it should reject cleanly", exc_info=bug.__cause__)
        return _error(400, "batch rejected, nothing stored: the body could not be parsed",
                      reason=f"unparseable input ({type(bug.__cause__).__name__})")
    except Exception as exc:  # the write failed: transient from the sender's view, so it retries
        log.exception("ingest write failed")
        return _error(503, f"telemetry store write failed: {type(exc).__name__}", headers={"Retry-After": "10"})
    if headers_only:
        # 200 with an empty body, not 204: waitress closes the connection after every response
        # without a Content-Length, and it drops that header from a 204, so each push of a
        # sender (Prometheus sends every push over one kept-alive connection) cost a new TCP
        # connection. Any 2xx is success for remote-write senders.
        response = HttpResponse(b"", status=200)
        response["Content-Length"] = "0"
        response["X-Precursor-Rows-Written"] = str(report.total_rows)
        # what the summary would say, for senders that never read a body (remote-write)
        if report.labels_not_stored:
            response["X-Precursor-Labels-Not-Stored"] = _header_list(
                f"{k}={n}" for k, n in report.labels_not_stored.items())
        if report.unknown_metrics:
            response["X-Precursor-Unknown-Metrics"] = _header_list(report.unknown_metrics)
        return response
    return JsonResponse({**report.as_dict(), "summary": report.summary_lines()}, status=200)


def _header_list(items, limit: int = 2000) -> str:
    text = ",".join(items)
    return text if len(text) <= limit else text[:limit].rsplit(",", 1)[0] + ",..."


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
    ``ts`` (scrape time, ms or ISO-8601; default: now), ``tz`` (zone of an ISO ``ts``
    without an offset; default UTC), ``skip_expired``."""

    def work(data: bytes):
        text = _text(data)
        result = _parsing(service.parse_prometheus_text, text, _cluster(request), request.GET.get("host"),
                          _ts_param(request))
        return service.write_samples(result, "prometheus", _cluster(request).strip(), "ingest:prometheus",
                                     skip_expired=_flag(request, "skip_expired"))

    return _run(request, work, allow_gzip=True)


_RW_CONTENT_TYPES = ("application/x-protobuf",)


@router.post("/remote-write", auth=token_auth, summary="Prometheus remote-write 1.0 receiver")
def ingest_remote_write(request):
    """Point ``remote_write.url`` here. Query: ``cluster``, ``skip_expired``, ``report`` (1: answer
    200 with the ingest report, as the other endpoints do). 200 with an empty body on success, with the rows
    written, the labels not part of the series key (``label=series,...``; their values are kept in
    ``series_labels``) and unknown names in ``X-Precursor-*`` headers; 400 on bad data (not retried), 415 on a wrong encoding or remote-write 2.0, 503 when
    the store is down (retried)."""
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    ctype = request.META.get("CONTENT_TYPE", "").strip()
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
        return service.write_samples(result, "remote-write", _cluster(request).strip(), "ingest:remote-write",
                                     skip_expired=_flag(request, "skip_expired"))

    try:
        report = _flag(request, "report")
    except IngestError as exc:
        return _rejected(exc)
    return _run(request, work, headers_only=not report)


@router.post("/kernel-log", auth=token_auth, summary="Ingest dmesg / journal / syslog text (NVRM Xid lines)")
def ingest_kernel_log(request):
    """Query: ``cluster``, ``host`` (for lines without a syslog/journal host),
    ``year`` (for syslog dates, which carry none), ``boot_ts`` (boot time, ms or
    ISO-8601, for plain dmesg seconds-since-boot), ``tz`` (IANA zone of ``dmesg -T`` /
    syslog times, which carry none; default UTC)."""

    def work(data: bytes):
        text = _text(data)
        parsed = _parsing(service.parse_kernel_log, text, _cluster(request), request.GET.get("host"),
                          _int_param(request, "year"), None, _ts_param(request, "boot_ts"), request.GET.get("tz"))
        return service.write_kernel_events(*parsed, cluster=_cluster(request),
                                           skip_expired=_flag(request, "skip_expired"))

    return _run(request, work, allow_gzip=True)


@router.post("/sacct", auth=token_auth, summary="Ingest `sacct -P` output (jobs and job -> host allocations)")
def ingest_sacct(request):
    """Query: ``cluster``, ``tz`` (the IANA zone sacct printed its times in; default UTC)."""

    def work(data: bytes):
        text = _text(data)
        notes: dict = {}
        jobs, job_hosts = _parsing(service.parse_sacct, text, _cluster(request), None, request.GET.get("tz"), notes)
        return service.write_sacct(text, _cluster(request), jobs, job_hosts, time_zone=notes)

    return _run(request, work, allow_gzip=True)


@router.get("/stats", auth=token_auth, summary="What has landed for a cluster")
def ingest_stats(request):
    """Rows per metric in ``samples`` and rows in the other tables, for ``cluster``."""
    cluster = _cluster(request)
    try:
        stats = overview.ingest_stats(cluster)
    except Exception as exc:  # unreachable, timed out or a failed query: transient for the sender, like the POSTs
        log.warning("ingest stats: telemetry store failed", exc_info=True)
        return _error(503, f"telemetry store unavailable: {store.public_message(exc)}", headers={"Retry-After": "10"})
    # this web process's samples group commit since it started (all clusters): pushes per insert
    committed = service.group_commit.committer("samples").stats
    stats["group_commit"] = {"inserts": committed.commits, "requests": committed.requests, "rows": committed.rows,
                             "duplicates": committed.duplicates}
    from telemetry import rollup

    # pushed rows whose rollup this process still holds (fed to samples_1m/band_1m in bulk; any
    # page that reads the rollups feeds them first), and what it fed since it started
    held = rollup.buffer() if rollup.deferring() else None
    stats["rollup"] = {"deferred": held is not None, "pending_rows": held.pending_rows if held else 0,
                       "flushes": held.flushes if held else 0, "rows_fed": held.rows_fed if held else 0,
                       "rows_written": held.rows_written if held else 0,
                       "max_pending_bytes": held.max_pending_bytes if held else 0}
    # which remote-write scanner this process decodes with: the compiled one, or its numpy twin
    # where no C compiler built it at install (same rows, ~1.6 ms more CPU to decode a 2,000-sample push)
    from telemetry.ingestion import prometheus_text, remote_write

    stats["remote_write_scanner"] = "compiled" if remote_write.COMPILED_SCANNER else "numpy"
    stats["text_template_read"] = "compiled" if prometheus_text.COMPILED_TEMPLATE_READ else "numpy"
    return stats


@router.post("/bulk", auth=token_auth, summary="Ingest a CSV / JSON Lines / Parquet file in the documented schema")
def ingest_bulk(request):
    """A backfill file, as ``manage.py ingest --format csv|jsonl|parquet`` takes it. Query:
    ``format`` (csv, jsonl, parquet; required), ``table`` (default samples), ``cluster`` (fills
    rows without one), ``tz`` (IANA zone of times without an offset; default UTC),
    ``skip_expired`` (leave out rows older than the retention instead of refusing the file).
    gzip allowed."""

    def work(data: bytes):
        fmt = request.GET.get("format", "")
        if not fmt:
            raise IngestError("query parameter format is required (csv, jsonl or parquet)", field="format")
        table = request.GET.get("table") or "samples"
        parsed = _parsing(service.parse_bulk, data, fmt, table, cluster=_cluster(request), tz=request.GET.get("tz"))
        return service.write_bulk(parsed, fmt, table, cluster=_cluster(request),
                                  skip_expired=_flag(request, "skip_expired"))

    return _run(request, work, allow_gzip=True)
