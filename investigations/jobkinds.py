"""Job kinds that belong to no richer feature yet: store maintenance and summaries, each with
the verb that starts it (the API's only way to start them)."""
from __future__ import annotations

from django.db import transaction

from investigations.models import BackgroundJob
from investigations.roles import require_investigator
from investigations.services import jobs
from investigations.services.jobs import JobContext, job_kind
from telemetry.queries import overview

SELFCHECK_MAX_ROWS = 100_000_000_000
SELFCHECK_MAX_STEPS = 100


def start_store_summary(user) -> BackgroundJob:
    require_investigator(user, "starting a store summary")
    with transaction.atomic():
        return jobs.start_job("store_summary", {}, user=user)


def _selfcheck_params(rows, steps) -> dict:
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= SELFCHECK_MAX_ROWS:
        raise ValueError(f"rows must be between 1 and 1e11, got {rows}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= SELFCHECK_MAX_STEPS:
        raise ValueError(f"steps must be between 1 and {SELFCHECK_MAX_STEPS}, got {steps}")
    return {"rows": rows, "steps": steps}


def start_selfcheck(user, *, rows: int = 200_000_000, steps: int = 4) -> BackgroundJob:
    require_investigator(user, "starting an engine self-check")
    params = _selfcheck_params(rows, steps)
    with transaction.atomic():
        return jobs.start_job("engine_selfcheck", params, user=user)


@job_kind("store_summary")
def store_summary(ctx: JobContext) -> dict:
    """Count samples per layer-metric over the whole store (a full scan on big stores)."""
    ctx.progress(0, 2, "counting samples per metric")
    metrics = overview.samples_per_metric(timeout_s=ctx.remaining_s())
    ctx.progress(1, 2, "counting events per kind")
    events = overview.events_per_kind(timeout_s=ctx.remaining_s())
    ctx.progress(2, 2, "done")
    return {"metrics": metrics, "events": events}


@job_kind("engine_selfcheck", queue="interactive")
def engine_selfcheck(ctx: JobContext) -> dict:
    """Measure how fast this store's engine scans and hashes rows, in steps.

    An admin runs it to size a deployment (and the test suite to keep a worker
    thread busy with real engine work while pages are served)."""
    from telemetry.queries import selfcheck

    rows = int(ctx.params.get("rows", 200_000_000))
    steps = max(1, min(int(ctx.params.get("steps", 4)), 100))
    if not 1 <= rows <= 100_000_000_000:
        raise ValueError(f"rows must be between 1 and 1e11, got {rows}")
    per_step = max(1, rows // steps)
    elapsed = 0.0
    for step in range(steps):
        ctx.progress(step, steps, f"scanning {per_step:,} rows ({step + 1}/{steps})")
        elapsed += selfcheck.scan(per_step, timeout_s=ctx.remaining_s())
    ctx.progress(steps, steps, "done")
    return {"rows": per_step * steps, "seconds": round(elapsed, 3), "rows_per_s": round(per_step * steps / elapsed) if elapsed else None}
