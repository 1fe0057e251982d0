"""A case's page and its parts. Heavy parts (topology, overlay, "what's different") load as
fragments so the header shows at once; the view (window, signals) lives in the URL
(investigations/permalinks.py)."""
from __future__ import annotations

from datetime import timezone

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from investigations import forms
from investigations.models import Case, CaseHypothesis, Hypothesis
from investigations.permalinks import (DEFAULT_WINDOW, WINDOW_PRESETS, parse_points, parse_signals, parse_window,
                                       signal_param, view_query)
from investigations.roles import can_investigate, require_investigator
from investigations.services import activity, case_signals, comments, hypotheses, records, verdicts
from investigations.services import cases as case_verbs
from investigations.templatetags.precursor import fmt_offset
from investigations.views.common import first_line, store_error_message
from telemetry import catalog
from telemetry.queries import interruptions
from telemetry.queries.overlay import InvalidSignal, SignalSpec
from webapp.security import allows_eval

LAYER_ROWS = (  # overlay rows, top to bottom
    ("gpu", "GPU"), ("nvswitch", "NVSwitch / NVLink"), ("network", "Network"),
    ("host", "Host / power / cooling"), ("storage", "Storage"),
)
ACTIVITY_TEXT = {
    "case.opened": "opened the case", "case.assigned": "assigned the case", "case.status_changed": "set the status",
    "comment.added": "commented", "hypothesis.created": "created", "hypothesis.pinned": "pinned",
    "hypothesis.status_changed": "changed the status of", "verdict.recorded": "recorded a verdict",
    "job.started": "started", "job.succeeded": "finished", "job.failed": "failed:",
    "job.cancelled": "cancelled", "job.cancel_requested": "asked to cancel",
}


def described(events: list) -> list:
    for e in events:
        e.text = ACTIVITY_TEXT.get(e.verb, e.verb)
    return events


def _utc(ts):
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _timeline(case: Case) -> list:
    events = described(activity.case_activity(case))
    t0 = _utc(case.t0)
    for e in events:
        e.rel = fmt_offset((_utc(e.created_at) - t0).total_seconds())
    return events


def _case_or_404(pk: int) -> Case:
    return get_object_or_404(Case.objects.select_related("assignee", "opened_by"), pk=pk)


def _catalog_for_picker() -> list[dict]:
    return [{"name": m.name, "layer": m.layer, "unit": m.unit + ("/s" if m.is_counter else ""), "kind": m.kind,
             "component": m.component, "description": m.description} for m in catalog.CATALOG.values()]


def _case_context(request, case: Case, *, w=None, signals=None, pin_form=None, verdict_form=None,
                  comment_form=None, link_form=None) -> dict:
    w = w or DEFAULT_WINDOW
    signals = signals or []
    pins = list(CaseHypothesis.objects.filter(case=case).select_related("hypothesis", "hypothesis__author", "pinned_by"))
    tracks = records.track_records([p.hypothesis for p in pins])
    pinned_ids = {p.hypothesis_id for p in pins}
    history = verdicts.verdict_history(case)
    can_edit = can_investigate(request.user)
    return {
        "case": case, "nav": "inbox", "can_edit": can_edit,
        "window": w, "presets": [(label, f"{a},{b}", (a, b) == w) for label, (a, b) in WINDOW_PRESETS],
        "signals": [{"param": signal_param(s), "label": s.label} for s in signals],
        "signals_param": ",".join(signal_param(s) for s in signals),
        "permalink": request.build_absolute_uri(case.get_absolute_url() + view_query(w, signals)),
        "pins": [(p, tracks.get(p.hypothesis_id)) for p in pins],
        "verdict": history[0] if history else None,
        "verdict_history": history,
        "comments": comments.comments_on(case=case),
        "activity": _timeline(case),
        "users": list(get_user_model().objects.filter(is_active=True).order_by("username").values_list("username", flat=True)[:500]) if can_edit else [],
        "pin_form": pin_form or forms.PinHypothesisForm(initial={"outcome": case.state, "lead_window_min": 360,
                                                                 "condition": "rate", "operator": ">"}),
        "verdict_form": verdict_form or forms.VerdictForm(case=case),
        "comment_form": comment_form or forms.CommentForm(),
        "link_form": link_form,
        "linkable": list(Hypothesis.objects.exclude(pk__in=pinned_ids).order_by("-updated_at")[:200]) if can_edit else [],
        "catalog": _catalog_for_picker(),
        "layers": LAYER_ROWS,
        "t0_iso": _utc(case.t0).isoformat(),
    }


@allows_eval  # the overlay's WebGL traces (plotly's regl) compile with Function(): webapp/security.py
def case_page(request, pk: int):
    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
        signals = parse_signals(request.GET.get("s"))
        case_signals.check_view(case, signals)
    except InvalidSignal as exc:
        return HttpResponseBadRequest(f"Cannot show this view of case #{case.pk}: {exc}", content_type="text/plain")
    ctx = _case_context(request, case, w=w, signals=signals)
    # No s= at all (an explicit empty s= means "nothing"): the differences fragment names the
    # signals to chart, case.js draws them and writes them into the URL. Ranking takes seconds on
    # a real fleet, so it is not done before the header is sent.
    ctx["auto_signals"] = "s" not in request.GET
    return render(request, "investigations/case.html", ctx)


def case_overlay(request, pk: int):
    """JSON: the overlay figure for ?w=&s= (and n = points per series, from the chart's width)."""
    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
        signals = parse_signals(request.GET.get("s"))
        n = parse_points(request.GET.get("n"))
        if not signals:
            return JsonResponse({"figure": None, "message": "No signals yet: add one with “+ signal”, from the "
                                 "topology, or from “What's different here”."})
        case_signals.validate_overlay(case, w, signals, n)
    except InvalidSignal as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        found = case_signals.case_overlay(case, w, signals, n)
    except InvalidSignal as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except Exception as exc:
        return JsonResponse({"error": store_error_message(exc)}, status=503)
    return HttpResponse(found.as_json(), content_type="application/json")


def case_topology(request, pk: int):
    """Fragment: job -> hosts -> GPUs / NVSwitches / NICs (-> switch ports), each a signal target."""
    from telemetry.queries import topology

    case = _case_or_404(pk)
    try:
        topo = topology.job_topology(case.cluster, case.job_id)
        found = interruptions.get_interruption(case.cluster, case.job_id)
    except topology.UnknownJob as exc:
        return render(request, "investigations/_fragment_error.html", {"error": first_line(exc)})
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    marks: dict[str, list[str]] = {}
    for e in (found.events if found else []):
        marks.setdefault(e.first_host, []).append(e.label.split(" ")[0] + (f" {e.code}" if e.kind == "xid" else ""))
    hosts = []
    for i, h in enumerate(topo.hosts):
        hosts.append({"node": h, "marks": marks.get(h.host, []), "open": bool(marks.get(h.host)) or i == 0})
    hosts.sort(key=lambda x: (not x["marks"],))
    return render(request, "investigations/_topology.html", {"case": case, "topo": topo, "hosts": hosts})


def case_differences(request, pk: int):
    """Fragment: the lead-window components that differ most from healthy peers."""
    from telemetry.queries.differences import Z_CAP

    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
    except InvalidSignal as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain")
    try:
        found = case_signals.case_differences(case, w)
    except case_signals.NoPeers as exc:
        return render(request, "investigations/_fragment_error.html", {"error": str(exc)})
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    rows = [{"d": d, "signal": signal_param(SignalSpec(d.metric, d.host, d.component)),
             "scope": case_signals.scope_of_metric(d.metric), "capped": abs(d.z) >= Z_CAP} for d in found.rows]
    return render(request, "investigations/_differences.html",
                  {"case": case, "rows": rows, "lead_s": found.lead_s, "n_peers": found.n_peers,
                   "defaults": case_signals.default_signals(found.rows), "can_edit": can_investigate(request.user)})


def case_activity(request, pk: int):
    case = _case_or_404(pk)
    return render(request, "investigations/_activity.html", {"activity": _timeline(case)})


# --- verbs ----------------------------------------------------------------------------------

def _back_to_case(request, case: Case) -> str:
    nxt = request.POST.get("next", "")
    if nxt.startswith(case.get_absolute_url()):
        return nxt
    return case.get_absolute_url()


def _case_with_errors(request, case: Case, status: int = 400, **forms_):
    return render(request, "investigations/case.html", _case_context(request, case, **forms_), status=status)


@require_POST
def case_pin(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "pinning a hypothesis")
    form = forms.PinHypothesisForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, pin_form=form)
    d = form.cleaned_data
    try:
        h = hypotheses.pin_hypothesis(
            request.user, case=case, statement=d["statement"], metric=d["metric"],
            component_scope=d["component_scope"], condition=d["condition"], operator=d["operator"],
            threshold=d["threshold"], lead_window_s=d["lead_window_min"] * 60, outcome=d["outcome"], note=d["note"],
            combined_with=d["combined_with"])
    except (ValueError, ValidationError) as exc:
        form.add_error(None, first_line(exc))
        return _case_with_errors(request, case, pin_form=form)
    messages.success(request, f"Pinned {h.short_id} to case #{case.pk}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_link(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "pinning a hypothesis")
    form = forms.LinkHypothesisForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, link_form=form)
    hypotheses.link_hypothesis(request.user, form.cleaned_data["hypothesis"], case, form.cleaned_data["note"])
    messages.success(request, f"Pinned {form.cleaned_data['hypothesis'].short_id} to case #{case.pk}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_verdict(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "recording a verdict")
    form = forms.VerdictForm(request.POST, case=case)
    if not form.is_valid():
        return _case_with_errors(request, case, verdict_form=form)
    d = form.cleaned_data
    try:
        v = verdicts.record_verdict(request.user, case, kind=d["kind"], rationale=d["rationale"],
                                    hypothesis=d["hypothesis"], root_cause=d["root_cause"])
    except (ValueError, ValidationError) as exc:
        form.add_error(None, first_line(exc))
        return _case_with_errors(request, case, verdict_form=form)
    messages.success(request, f"Verdict recorded: {v.get_kind_display()}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_comment(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "commenting")
    form = forms.CommentForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, comment_form=form)
    try:
        comments.add_comment(request.user, case=case, body=form.cleaned_data["body"])
    except ValueError as exc:
        form.add_error("body", first_line(exc))
        return _case_with_errors(request, case, comment_form=form)
    return redirect(_back_to_case(request, case) + "#comments")


@require_POST
def case_assign(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "assigning a case")
    try:
        case_verbs.assign_case(request.user, case, request.POST.get("assignee", "").strip() or None)
    except ValueError as exc:
        messages.error(request, first_line(exc))
    return redirect(_back_to_case(request, case))


@require_POST
def case_status(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request.user, "changing a case's status")
    try:
        case_verbs.set_case_status(request.user, case, request.POST.get("status", ""))
    except ValueError as exc:
        messages.error(request, first_line(exc))
    return redirect(_back_to_case(request, case))
