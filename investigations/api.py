"""API router of the investigations app: background jobs — read them, cancel them. A job is
started only by the verb of its feature (POST /api/hypotheses/{id}/tests, /api/scans, /api/lags,
/api/exports, and here /api/jobs/store-summary and /api/jobs/selfcheck), which checks its
parameters and the caller's role before anything is queued."""
from __future__ import annotations

from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status
from ninja.errors import HttpError

from investigations.models import BackgroundJob
from investigations import jobkinds
from investigations.roles import require_investigator
from investigations.services import jobs

router = Router(tags=["jobs"])


class JobOut(Schema):
    id: int
    kind: str
    params: dict
    state: str
    stage: str
    progress_done: int
    progress_total: int
    error: str
    result: dict | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@router.get("/jobs", response=list[JobOut])
def list_jobs(request, kind: str | None = None, state: str | None = None, limit: int = 50):
    qs = BackgroundJob.objects.all()
    if kind:
        qs = qs.filter(kind=kind)
    if state:
        qs = qs.filter(state=state)
    return qs[: max(1, min(limit, 500))]


class SelfcheckIn(Schema):
    rows: int = 200_000_000
    steps: int = 4


def _started(start):
    try:
        return Status(201, start())
    except PermissionDenied as exc:
        raise HttpError(403, str(exc)) from None
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None


@router.post("/jobs/store-summary", response={201: JobOut})
def start_store_summary(request):
    """Count samples per metric and events per kind over the whole store."""
    return _started(lambda: jobkinds.start_store_summary(request.user))


@router.post("/jobs/selfcheck", response={201: JobOut})
def start_selfcheck(request, payload: SelfcheckIn):
    """Measure how fast the store's engine scans rows (``rows`` in ``steps``)."""
    return _started(lambda: jobkinds.start_selfcheck(request.user, rows=payload.rows, steps=payload.steps))


@router.get("/jobs/{job_id}", response=JobOut)
def get_job(request, job_id: int):
    return get_object_or_404(BackgroundJob, pk=job_id)


@router.post("/jobs/{job_id}/cancel", response=JobOut)
def cancel_job(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    try:
        require_investigator(request.user, "cancelling jobs")
    except PermissionDenied as exc:
        raise HttpError(403, str(exc)) from None
    return jobs.cancel_job(job, user=request.user)
