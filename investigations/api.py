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


class ScanIn(Schema):
    """Start a signal scan: which outcome, how long a lead window, how much history, which cluster."""
    outcome: str
    lead_window_s: int
    days: int | None = None
    cluster: str | None = None


@router.post("/scans", response={201: JobOut})
def start_scan(request, payload: ScanIn):
    """Rank every catalog metric by how it differs before the outcome (a background job; poll
    GET /api/jobs/{id}, the ranking is in its result's ``rows``)."""
    from django.core.exceptions import PermissionDenied

    from investigations.services import scans

    try:
        return Status(201, scans.start_scan(request.user, outcome=payload.outcome, lead_window_s=payload.lead_window_s,
                                            days=payload.days, cluster=payload.cluster))
    except PermissionDenied as exc:
        raise HttpError(403, str(exc)) from None
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None


class ExportIn(Schema):
    """Export the verdicts as a labelled dataset (see investigations/services/exports.py)."""
    lead_window_s: int = 6 * 3600
    kinds: list[str] | None = None
    controls: bool = True
    format: str = "parquet"
    cluster: str | None = None


@router.post("/exports", response={201: JobOut})
def start_export(request, payload: ExportIn):
    """Start a dataset export (a background job); download it from GET /api/exports/{job id}/file."""
    from django.core.exceptions import PermissionDenied

    from investigations.services import exports

    try:
        return Status(201, exports.start_export(request.user, lead_window_s=payload.lead_window_s,
                                                kinds=payload.kinds, controls=payload.controls, fmt=payload.format,
                                                cluster=payload.cluster))
    except PermissionDenied as exc:
        raise HttpError(403, str(exc)) from None
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None


@router.get("/exports/{job_id}/file")
def export_file(request, job_id: int):
    """The export's Parquet or CSV file (404 until the job has succeeded)."""
    from django.http import FileResponse

    from investigations.services import exports

    path = exports.export_file(get_object_or_404(BackgroundJob, pk=job_id))
    if path is None:
        raise HttpError(404, f"job {job_id} has no finished export file")
    ctype = "application/vnd.apache.parquet" if path.suffix == ".parquet" else "text/csv"
    return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name, content_type=ctype)


@router.get("/jobs/{job_id}", response=JobOut)
def get_job(request, job_id: int):
    return get_object_or_404(BackgroundJob, pk=job_id)


@router.post("/jobs/{job_id}/cancel", response=JobOut)
def cancel_job(request, job_id: int):
    if not can_investigate(request.user):
        raise HttpError(403, "cancelling jobs needs the investigator or admin role")
    return jobs.cancel_job(get_object_or_404(BackgroundJob, pk=job_id), user=request.user)
