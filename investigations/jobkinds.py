"""Job kinds that belong to no richer feature yet: store maintenance and summaries."""
from __future__ import annotations

from investigations.services.jobs import JobContext, job_kind
from telemetry.queries import overview


@job_kind("store_summary")
def store_summary(ctx: JobContext) -> dict:
    """Count samples per layer-metric over the whole store (a full scan on big stores)."""
    ctx.progress(0, 2, "counting samples per metric")
    metrics = overview.samples_per_metric(timeout_s=ctx.remaining_s())
    ctx.progress(1, 2, "counting events per kind")
    events = overview.events_per_kind(timeout_s=ctx.remaining_s())
    ctx.progress(2, 2, "done")
    return {"metrics": metrics, "events": events}
