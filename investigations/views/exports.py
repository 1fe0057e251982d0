"""Labelled-dataset exports: the list, starting one, downloading its file."""
from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from investigations.models import BackgroundJob, Verdict
from investigations.roles import can_investigate, require_investigator
from investigations.services import exports
from investigations.services.inbox import case_clusters
from investigations.views.common import first_line


def exports_page(request):
    done = list(BackgroundJob.objects.filter(kind=exports.EXPORT_KIND).select_related("created_by")
                .order_by("-created_at")[:100])
    labelled = Verdict.objects.values("case_id").distinct().count()
    return render(request, "investigations/exports.html", {
        "exports": done, "nav": "exports", "can_edit": can_investigate(request.user), "labelled": labelled,
        "kinds": exports.VERDICT_KINDS, "formats": exports.FORMATS, "format_name": exports.FORMAT,
        "clusters": case_clusters(),
    })


@require_POST
def export_start(request):
    require_investigator(request.user, "exporting a dataset")
    try:
        hours = float(request.POST.get("lead_h", ""))
        job = exports.start_export(request.user, lead_window_s=int(round(hours * 3600)),
                                   kinds=request.POST.getlist("kinds") or None,
                                   controls=request.POST.get("controls") == "1", fmt=request.POST.get("format", "parquet"),
                                   cluster=request.POST.get("cluster") or None)
    except ValueError as exc:
        messages.error(request, "Export not started: " + first_line(exc))
        return redirect("exports")
    return redirect("job", job_id=job.pk)


def export_download(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    path = exports.export_file(job)
    if path is None:
        raise Http404("no finished export file for this job (not an export, not finished, or deleted)")
    return exports.file_response(path)
