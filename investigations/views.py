"""Pages of the investigations app. Thin: they call services and query runners."""
from __future__ import annotations

from django.shortcuts import get_object_or_404, render

from investigations.models import BackgroundJob
from telemetry import store
from telemetry.queries import overview


def inbox(request):
    try:
        totals = overview.store_totals()
        store_error = None
    except Exception as exc:  # the page still renders and says what is wrong
        totals, store_error = None, str(exc).splitlines()[0]
    return render(
        request,
        "investigations/inbox.html",
        {"totals": totals, "store_error": store_error, "embedded": store.config().embedded},
    )


def job_page(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    return render(request, "investigations/job.html", {"job": job})


def job_progress(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    return render(request, "investigations/_job_progress.html", {"job": job})
