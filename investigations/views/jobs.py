"""Background jobs: the list, one job's page and its progress fragment, cancelling, and the
signal scan's start and pin (a scan is started from the jobs page)."""
from __future__ import annotations

import json

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from investigations.models import BackgroundJob, Case
from investigations.roles import can_investigate, require_investigator
from investigations.services import causes, exports, fleet_test, jobs, lags, scans
from investigations.services.inbox import case_clusters
from investigations.templatetags.precursor import fmt_offset
from investigations.views.common import first_line, history_days

LAG_EXAMPLES = ("gpu.temp", "gpu.power", "XID 79", "XID 48/94", "link down", "NODE_FAIL")
SCAN_OUTCOMES = ("any interruption", "NODE_FAIL", "FAILED", "TIMEOUT", "REQUEUED", "XID 79", "XID 48/94", "XID 74")


def scan_outcomes() -> list[tuple[str, str]]:
    """The scan form's outcome choices, (value, label): the classes the data has (Slurm states,
    XIDs at t0, link down; signal_scan.outcome_classes) and the root causes confirmed on cases
    (causes.causes_present), each with its interruptions; the usual ones where the store has none."""
    from telemetry.queries import signal_scan

    try:
        present = signal_scan.outcome_classes(timeout_s=20)
    except Exception:  # the form still works without the store: the usual outcomes
        present = []
    found = [*(c for c in present if c["outcome"] != "any interruption"), *causes.causes_present(),
             *(c for c in present if c["outcome"] == "any interruption")]
    if not found:
        return [(o, o) for o in SCAN_OUTCOMES]
    every = (scans.EVERY_CLASS, f"{scans.EVERY_CLASS} · one scan per class above, in one job")
    return [(c["outcome"], f"{c['outcome']} · {c['interruptions']} interruption{'s' if c['interruptions'] != 1 else ''}")
            for c in found] + [every]


def jobs_page(request):
    rows = list(BackgroundJob.objects.select_related("created_by").order_by("-created_at")[:200])
    return render(request, "investigations/jobs.html", {
        "jobs": rows, "nav": "jobs", "can_edit": can_investigate(request.user), "outcomes": scan_outcomes(),
        "clusters": case_clusters(), "lag_a": request.GET.get("lag_a", "")[:200],
        "lag_b": request.GET.get("lag_b", "")[:200], "lag_kinds": LAG_EXAMPLES,
    })


def _job_context(request, job: BackgroundJob) -> dict:
    ctx = {"job": job, "can_edit": can_investigate(request.user), "result_text": json.dumps(job.result, indent=2, sort_keys=True, default=str)[:200_000]
           if job.result is not None else ""}
    if job.kind == fleet_test.FLEET_TEST_KIND and job.state == "succeeded" and isinstance(job.result, dict):
        ctx["test"] = _fleet_test_view(job)
    if job.kind == scans.SCAN_KIND and job.state == "succeeded" and isinstance(job.result, dict):
        if "classes" in job.result:  # 'every class': one scan per class, a summary first
            ctx["class_scans"] = [{**_scan_view(r), "n": i + 1} for i, r in enumerate(job.result["classes"])]
            from investigations import charts

            ctx["class_figure"] = charts.class_scan_bars(job.result["classes"]).to_json()
        else:
            ctx["scan"] = _scan_view(job.result)
    if job.kind == lags.LAG_KIND and job.state == "succeeded" and isinstance(job.result, dict):
        ctx["lag"] = _lag_view(job.result)
    if job.kind == exports.EXPORT_KIND and job.state == "succeeded":
        ctx["export"] = {"r": job.result, "available": exports.export_file(job) is not None}
    return ctx


def _with_pin(row: dict) -> dict:
    """The row with the threshold its pin would set and what it rests on (rules.pin_basis)."""
    from telemetry import rules

    try:
        basis = rules.pin_basis(row, row.get("bad") or "none")
    except ValueError:
        basis = None
    return {**row, "pin": basis, "pin_text": rules.pin_text(row, row.get("bad") or "none")}


def _scan_view(r: dict) -> dict:
    from investigations import charts

    rows = [_with_pin(row) for row in r.get("rows") or []]
    tested = [row for row in rows if row.get("auc") is not None]
    figure = charts.scan_bars(tested[:20]).to_json() if tested else None
    with_contrasts = [row for row in tested[:10] if row.get("contrasts") and any(
        (c or {}).get("p") is not None for c in row["contrasts"].values())]
    named, total = r.get("components_named") or 0, r.get("outcome_interruptions") or 0
    caption = (f"where an event names the failing part ({named} of {total} interruptions: the outcome's XID or "
               "link-down, or for a state the interruption's own hardware event near t0): each finding against "
               "healthy parts at the same time, the sibling parts of the same job, and the part's own past (a "
               "finding must hold against all of them; ⚑ flagged)" + (
                   f"; the other {total - named}, with no such event, are read over every host of their job"
                   if total > named else "")) if named else (
               f"the outcome names no failing part ({r.get('outcome_interruptions')} interruptions): each finding's "
               "within-job contrast — how far the job's most extreme host stands out from its other hosts, against "
               "the same in the controls; a finding that moved on every host of the job must hold here (⚑ flagged)")
    return {"r": r, "rows": rows, "figure": figure, "lead": fmt_offset(-int(r.get("lead_window_s") or 0)),
            "contrasts_figure": charts.scan_contrasts(with_contrasts).to_json() if with_contrasts else None,
            "contrasts_caption": caption, "significant": sum(1 for row in tested if row["q"] < 0.05),
            "untested": [row for row in rows if row.get("not_tested")]}


def _lag_view(r: dict) -> dict:
    """A lag analysis as the job page shows it: the figure first, then the numbers."""
    from investigations import analysis_charts

    if r.get("kind") == "series":
        figure = analysis_charts.lag_curve(r).to_json() if r.get("best_lag_s") is not None else None
        iv = r.get("best_lag_interval_s")
        return {"r": r, "figure": figure, "best": fmt_lag(r.get("best_lag_s")),
                "interval": f"{fmt_lag(iv[0])} … {fmt_lag(iv[1])}" if iv else None}
    rows = [d for d in (r.get("forward"), r.get("reverse")) if d]
    for d in rows:
        d["median"] = fmt_lag(d["median_lead_s"]) if d.get("median_lead_s") is not None else None
        iv = d.get("median_lead_interval_s")
        d["median_iv"] = f"{fmt_lag(iv[0])} … {fmt_lag(iv[1])}" if iv else None
    return {"r": r, "rows": rows, "figure": analysis_charts.event_lead_bars(r).to_json() if any(d["n_later"] for d in rows)
            else None}


def fmt_lag(seconds) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    return ("+" if s > 0 else "−" if s < 0 else "") + fmt_offset(abs(s)).lstrip("t+")


def _fleet_test_view(job: BackgroundJob) -> dict:
    """A fleet test's result as the job page shows it: numbers, figures, examples with links."""
    from investigations import analysis_charts, charts

    r = job.result
    examples = r.get("examples") or []
    found = {(c.cluster, c.job_id): c for c in Case.objects.filter(
        job_id__in=[e["job_id"] for e in examples]).only("pk", "cluster", "job_id")}
    for e in examples:
        case = found.get((e["cluster"], e["job_id"]))
        e["case_url"] = case.get_absolute_url() if case else None
        e["lead"] = fmt_offset(-e["lead_s"]) if e.get("lead_s") is not None else ""
    h = job.hypothesis
    figures = [("firing before the outcome vs in control windows", charts.firing_rates(r).to_json())]
    controls = None
    if r.get("controls_excluded") is not None:
        used = sum((r.get("controls") or {}).values())
        left = analysis_charts.controls_left_out(r)
        controls = {"figure": analysis_charts.control_windows(r).to_json(), "used": used, "left": left,
                    "reasons": [(label, r["controls_excluded"].get(key, 0)) for key, label in analysis_charts.CONTROL_REASONS]}
    if r.get("lead_times_s"):
        figures.append(("lead time: first firing before t0", charts.lead_time_histogram(r["lead_times_s"]).to_json()))
    pair = None
    if r.get("side_by_side"):
        t = r.get("table") or {}
        within = int((r.get("combination") or {}).get("within_s") or 0)
        pair = {"figure": analysis_charts.together_bars(r["side_by_side"]).to_json(), "within": fmt_lag(within).lstrip("+"),
                "windows": sum(t.get(k, 0) for k in "abcd")}
    parts = None
    if r.get("component_contrasts"):
        c = r["component_contrasts"]
        parts = {"figure": analysis_charts.part_contrasts(r).to_json(), "c": c,
                 "rows": [("its siblings in the same job and window", c["siblings"]),
                          ("its own earlier windows", c["own_history"])]}
    return {"r": r, "h": h, "examples": examples, "figures": figures, "together": pair, "controls": controls,
            "parts": parts,
            "lead_median": fmt_offset(-r["lead_median_s"]) if r.get("lead_median_s") is not None else None}


def job_page(request, job_id: int):
    job = get_object_or_404(BackgroundJob.objects.select_related("created_by", "hypothesis"), pk=job_id)
    return render(request, "investigations/job.html", {
        **_job_context(request, job), "nav": "jobs",
        "params_text": json.dumps(job.params, sort_keys=True, default=str)[:500],
    })


def job_progress(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    return render(request, "investigations/_job_progress.html", _job_context(request, job))


@require_POST
def job_cancel(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    require_investigator(request.user, "cancelling jobs")
    job = jobs.cancel_job(job, user=request.user)
    messages.info(request, f"job {job.pk}: " + ("cancelled" if job.state == "cancelled" else
                                                 "cancel requested; it stops at its next step" if job.is_active else
                                                 f"already {job.state}"))
    return redirect("job", job_id=job.pk)


@require_POST
def scan_start(request):
    require_investigator(request.user, "starting a signal scan")
    try:
        hours = float(request.POST.get("lead_h", ""))
        job = scans.start_scan(request.user, outcome=request.POST.get("outcome", ""),
                               lead_window_s=int(round(hours * 3600)), days=history_days(request),
                               cluster=request.POST.get("cluster") or None)
    except ValueError as exc:
        messages.error(request, "Signal scan not started: " + first_line(exc))
        return redirect("jobs")
    return redirect("job", job_id=job.pk)


@require_POST
def lag_start(request):
    require_investigator(request.user, "starting a lag analysis")
    try:
        days = request.POST.get("days", "7")
        if days not in ("1", "7", "30", "90"):
            raise ValueError(f"days: {days!r} is not one of 1, 7, 30 or 90")
        job = lags.start_lag(request.user, a=request.POST.get("a", ""), b=request.POST.get("b", ""),
                             cluster=request.POST.get("cluster", ""), component_a=request.POST.get("component_a", ""),
                             component_b=request.POST.get("component_b", ""), host=request.POST.get("host", ""),
                             days=int(days), step_s=_whole(request.POST.get("step_min", "1"), "step") * 60,
                             max_lag_s=_whole(request.POST.get("max_lag_min", "60"), "max lag") * 60)
    except ValueError as exc:
        messages.error(request, "Lag analysis not started: " + first_line(exc))
        return redirect(reverse("jobs") + "#lag-form")
    return redirect("job", job_id=job.pk)


def _whole(text: str, field: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: {text!r} is not a whole number of minutes") from None


@require_POST
def scan_pin(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    require_investigator(request.user, "pinning a hypothesis")
    try:
        h = scans.pin_finding(request.user, job, request.POST.get("metric", ""), request.POST.get("outcome") or None)
    except ValueError as exc:
        messages.error(request, first_line(exc))
        return redirect("job", job_id=job.pk)
    messages.success(request, f"{h.short_id} pinned from the scan: run a fleet test to see how it holds up")
    return redirect(h.get_absolute_url())
