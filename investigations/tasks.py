"""Celery tasks: thin wrappers that hand a job id to investigations.services.jobs."""
from celery import shared_task
from django.conf import settings


@shared_task(
    bind=True,
    name="precursor.run_job",
    acks_late=True,
    soft_time_limit=settings.JOB_SOFT_TIME_LIMIT_S,
    time_limit=settings.JOB_TIME_LIMIT_S,
    ignore_result=True,
)
def run_job(self, job_id: int) -> str:
    from django.db import close_old_connections

    from investigations.services import jobs

    close_old_connections()
    try:
        return jobs.run(job_id)
    finally:
        close_old_connections()


@shared_task(name="precursor.recover_stale_jobs", acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def recover_stale_jobs() -> int:
    """Production safety net (celery beat): re-enqueue jobs whose worker died mid-run.

    In the embedded mode ``serve`` does this at start-up; with separate worker
    processes a job whose heartbeat went silent is re-enqueued here, and the
    conditional claim makes sure only one worker picks it up."""
    from investigations.services import jobs

    return len(jobs.requeue_stale())
