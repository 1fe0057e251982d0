"""API router of the investigations app (jobs for now; cases and hypotheses follow)."""
from __future__ import annotations

from datetime import datetime

from django.shortcuts import get_object_or_404
from ninja import Router, Schema

from investigations.models import BackgroundJob

router = Router(tags=["jobs"])


class JobOut(Schema):
    id: int
    kind: str
    state: str
    stage: str
    progress_done: int
    progress_total: int
    error: str
    result: dict | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@router.get("/jobs/{job_id}", response=JobOut)
def get_job(request, job_id: int):
    return get_object_or_404(BackgroundJob, pk=job_id)
