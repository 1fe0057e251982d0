"""API router of the investigations app: background jobs (cases and hypotheses follow)."""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status
from ninja.errors import HttpError

from investigations.models import BackgroundJob
from investigations.roles import can_investigate
from investigations.services import jobs

router = Router(tags=["jobs"])


class JobIn(Schema):
    kind: str
    params: dict = {}


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


@router.post("/jobs", response={201: JobOut})
def create_job(request, payload: JobIn):
    if not can_investigate(request.user):
        raise HttpError(403, "starting jobs needs the investigator or admin role")
    try:
        with transaction.atomic():
            job = jobs.start_job(payload.kind, payload.params, user=request.user)
    except jobs.UnknownJobKind as exc:
        raise HttpError(400, str(exc)) from None
    return Status(201, job)


@router.get("/jobs/{job_id}", response=JobOut)
def get_job(request, job_id: int):
    return get_object_or_404(BackgroundJob, pk=job_id)


@router.post("/jobs/{job_id}/cancel", response=JobOut)
def cancel_job(request, job_id: int):
    if not can_investigate(request.user):
        raise HttpError(403, "cancelling jobs needs the investigator or admin role")
    return jobs.cancel_job(get_object_or_404(BackgroundJob, pk=job_id), user=request.user)
