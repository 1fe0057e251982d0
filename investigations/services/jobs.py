"""Background jobs: start, claim, report progress, finish, cancel, recover.

The job row in the Django database is the truth; Celery only carries the job
id to a worker. A worker claims a job with a conditional UPDATE, so two
workers (or a redelivered message) never run the same job twice. Progress,
cancellation and the time limit are checked cooperatively at every progress
report, because the thread pool that runs jobs inside ``serve`` cannot kill a
thread; every telemetry query also carries its own max_execution_time.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import timedelta
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from investigations.models import BackgroundJob

log = logging.getLogger(__name__)

State = BackgroundJob.State
STALE_AFTER = timedelta(minutes=5)  # a running job silent this long lost its worker

JobHandler = Callable[["JobContext"], dict]
_KINDS: dict[str, tuple[JobHandler, str]] = {}


class JobCancelled(Exception):
    pass


class JobTimedOut(Exception):
    pass


class UnknownJobKind(ValueError):
    pass


def job_kind(name: str, *, queue: str = "analysis"):
    """Register a handler: ``fn(ctx) -> result dict``."""

    def register(fn: JobHandler) -> JobHandler:
        _KINDS[name] = (fn, queue)
        return fn

    return register


def kinds() -> list[str]:
    return sorted(_KINDS)


class JobContext:
    """What a running handler sees: its params and a way to report progress."""

    def __init__(self, job: BackgroundJob):
        self.job = job
        self.params = job.params
        self.deadline = (job.started_at or timezone.now()) + timedelta(seconds=settings.JOB_TIME_LIMIT_S)

    def remaining_s(self) -> int:
        return max(1, int((self.deadline - timezone.now()).total_seconds()))

    def progress(self, done: int, total: int, stage: str = "") -> None:
        """Persist progress; raise JobCancelled / JobTimedOut so the handler stops."""
        now = timezone.now()
        updated = BackgroundJob.objects.filter(pk=self.job.pk, state=State.RUNNING).update(
            progress_done=done, progress_total=total, stage=stage[:200], heartbeat_at=now
        )
        if not updated:
            raise JobCancelled(f"job {self.job.pk} is no longer running")
        if BackgroundJob.objects.filter(pk=self.job.pk, cancel_requested=True).exists():
            raise JobCancelled(f"job {self.job.pk} was cancelled")
        if now > self.deadline:
            raise JobTimedOut(f"job {self.job.pk} passed its time limit of {settings.JOB_TIME_LIMIT_S} s")


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"[:200]


def enqueue(job_id: int) -> None:
    from investigations.tasks import run_job

    kind = BackgroundJob.objects.filter(pk=job_id).values_list("kind", flat=True).first()
    queue = _KINDS.get(kind, (None, "analysis"))[1]
    run_job.apply_async(args=[job_id], queue=queue)


def start_job(kind: str, params: dict | None = None, *, user=None) -> BackgroundJob:
    if kind not in _KINDS:
        raise UnknownJobKind(f"unknown job kind {kind!r}; known: {', '.join(kinds())}")
    with transaction.atomic():  # the job and its audit record together, or neither
        job = BackgroundJob.objects.create(kind=kind, params=params or {}, created_by=user)
        _audit(job, "job.started", user)
        transaction.on_commit(lambda: enqueue(job.pk))
    return job


def _audit(job: BackgroundJob, verb: str, actor=None) -> None:
    """Jobs about a case or hypothesis appear in its activity timeline."""
    from investigations.models import Case, Hypothesis
    from investigations.services import activity

    params = job.params or {}
    case = Case.objects.filter(pk=params["case_id"]).first() if str(params.get("case_id", "")).isdigit() else None
    hypothesis = (
        Hypothesis.objects.filter(pk=params["hypothesis_id"]).first()
        if str(params.get("hypothesis_id", "")).isdigit()
        else None
    )
    if case is None and hypothesis is None and verb not in ("job.started", "job.cancel_requested"):
        return  # a run's end about nothing in particular: the job row itself says it
    activity.record(actor, verb, case=case, hypothesis=hypothesis, job_id=job.pk, kind=job.kind,
                    state=job.state)


def claim(job_id: int) -> BackgroundJob | None:
    """Atomically move a queued (or abandoned running) job to running for this worker."""
    now = timezone.now()
    stale = now - STALE_AFTER
    from django.db.models import F

    claimable = Q(state=State.QUEUED) | Q(state=State.RUNNING, heartbeat_at__lt=stale)
    updated = (
        BackgroundJob.objects.filter(claimable, pk=job_id, cancel_requested=False)
        .update(state=State.RUNNING, started_at=now, heartbeat_at=now, worker=_worker_name(),
                attempts=F("attempts") + 1, error="")
    )
    if not updated:
        return None
    return BackgroundJob.objects.get(pk=job_id)


def run(job_id: int) -> str:
    """Claim and run one job; returns its final state (or 'skipped' if not claimable)."""
    job = claim(job_id)
    if job is None:
        # Cancelled before it started: record that, so the page stops waiting.
        BackgroundJob.objects.filter(pk=job_id, state=State.QUEUED, cancel_requested=True).update(
            state=State.CANCELLED, finished_at=timezone.now()
        )
        return "skipped"
    handler = _KINDS.get(job.kind, (None, None))[0]
    ctx = JobContext(job)
    try:
        if handler is None:
            raise UnknownJobKind(f"no handler for job kind {job.kind!r}")
        result = handler(ctx)
        final, fields = State.SUCCEEDED, {"result": result, "stage": "done"}
    except JobCancelled:
        final, fields = State.CANCELLED, {"stage": "cancelled"}
    except JobTimedOut as exc:
        final, fields = State.FAILED, {"error": str(exc)}
    except Exception as exc:  # a job failure is recorded on the row, not lost in a log
        log.exception("job %s (%s) failed", job_id, job.kind)
        final, fields = State.FAILED, {"error": failure_message(exc)[:4000]}
    # The final state and its audit record in one transaction: a reader never sees
    # "succeeded" without job.succeeded, and a crash between the two cannot lose it.
    with transaction.atomic():
        ended = BackgroundJob.objects.filter(pk=job_id, state=State.RUNNING).update(
            state=final, finished_at=timezone.now(), **fields
        )
        job.refresh_from_db()
        if ended:
            _audit(job, f"job.{final}")
    return final


def failure_message(exc: BaseException) -> str:
    """What the job page shows for a failure: our own messages as they are; store failures
    and unexpected errors without internal paths or engine error codes (the log has them)."""
    from django.core.exceptions import ObjectDoesNotExist

    from telemetry import store

    if isinstance(exc, (store.StoreUnavailable, store.StoreLocked)) or type(exc).__module__.startswith(
            ("clickhouse_connect", "chdb")):
        return store.public_message(exc)
    if isinstance(exc, (ValueError, LookupError, ObjectDoesNotExist)) and not isinstance(exc, UnicodeError):
        return f"{type(exc).__name__}: {exc}"
    return f"internal error ({type(exc).__name__}): the server log has the details"


def cancel_job(job: BackgroundJob, *, user=None) -> BackgroundJob:
    """Cancel a queued job at once; ask a running one to stop at its next progress step.
    Who asked is audited; a finished job is left as it is."""
    with transaction.atomic():
        asked = BackgroundJob.objects.filter(pk=job.pk, state__in=BackgroundJob.ACTIVE,
                                             cancel_requested=False).update(cancel_requested=True)
        BackgroundJob.objects.filter(pk=job.pk, state=State.QUEUED).update(
            state=State.CANCELLED, finished_at=timezone.now(), stage="cancelled"
        )
        job.refresh_from_db()
        if asked:
            _audit(job, "job.cancel_requested", user)
    return job


def recover_jobs() -> list[int]:
    """At start-up: jobs queued, or running when the last process died, are run again."""
    with transaction.atomic():
        BackgroundJob.objects.filter(state=State.RUNNING).update(state=State.QUEUED, stage="requeued after restart")
        ids = list(BackgroundJob.objects.filter(state=State.QUEUED).values_list("pk", flat=True))
    for job_id in ids:
        enqueue(job_id)
    return ids


def requeue_stale() -> list[int]:
    """Enqueue again the running jobs whose heartbeat is older than STALE_AFTER."""
    stale = timezone.now() - STALE_AFTER
    ids = list(BackgroundJob.objects.filter(state=State.RUNNING, heartbeat_at__lt=stale).values_list("pk", flat=True))
    for job_id in ids:
        enqueue(job_id)
    return ids
