"""The Celery app. Queues are named by purpose: ``interactive`` for short jobs a
person waits on, ``analysis`` for long fleet scans. The broker only wakes
workers; job state lives in the Django database (investigations.BackgroundJob).
"""
import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("precursor")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue="analysis",
    task_queues=(Queue("analysis"), Queue("interactive")),
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    broker_transport_options={"visibility_timeout": 4 * 3600},
)
app.autodiscover_tasks(["investigations"])


from celery.signals import task_prerun  # noqa: E402


@task_prerun.connect
def _fresh_catalog(**_):
    """A job (scan, fleet test, export) sees catalog entries added in any process."""
    from telemetry import catalog_store

    catalog_store.refresh()
