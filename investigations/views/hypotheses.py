"""The hypothesis board, one hypothesis's page, and its verbs (status, comment, fleet test)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from investigations import analysis_charts, forms
from investigations.models import CaseHypothesis, Hypothesis, Verdict
from investigations.roles import can_investigate, require_investigator
from investigations.services import activity, board, comments, fleet_test, hypotheses, records
from investigations.services.inbox import case_clusters
from investigations.views.cases import described
from investigations.views.common import first_line, history_days
from telemetry import rules

BOARD_COLUMNS = (
    ("id", "id"), ("statement", "statement"), ("metric", "signal"), ("outcome", "outcome"), ("status", "status"),
    ("confirmed", "track record"), ("latest_test", "latest fleet test"), ("precision", "precision (95% CI)"),
    ("author", "author"), ("updated_at", "last activity"),
)


def board_page(request):
    sort = request.GET.get("sort") or "-updated_at"
    status = request.GET.get("status") or None
    author = request.GET.get("author") or None
    scope = request.GET.get("scope") or None
    q = request.GET.get("q", "")[:200]
    try:
        rows = board.board_rows(q=q, status=status, author=author, component_scope=scope, sort=sort)
    except ValueError as exc:
        return HttpResponseBadRequest(f"Cannot show the board: {first_line(exc)}", content_type="text/plain")
    base = {k: v for k, v in request.GET.items() if k != "sort" and v}
    columns = []
    for key, label in BOARD_COLUMNS:
        active = sort.lstrip("-") == key
        nxt = key if (active and sort.startswith("-")) else "-" + key
        columns.append({"label": label, "url": "?" + urlencode({**base, "sort": nxt}), "active": active,
                        "desc": sort.startswith("-")})
    return render(request, "investigations/board.html", {
        "rows": rows, "columns": columns, "q": q, "status": status or "", "author": author or "", "scope": scope or "",
        "statuses": hypotheses.STATUSES, "scopes": rules.COMPONENT_SCOPES, "nav": "board",
        "authors": list(get_user_model().objects.filter(hypotheses__isnull=False).distinct()
                        .order_by("username").values_list("username", flat=True)),
    })


def hypothesis_page(request, pk: int):
    h = get_object_or_404(Hypothesis.objects.select_related("author"), pk=pk)
    pins = list(CaseHypothesis.objects.filter(hypothesis=h).select_related("case", "pinned_by").order_by("-case__t0"))
    current = Verdict.objects.current_for(p.case_id for p in pins)
    return render(request, "investigations/hypothesis.html", {
        "h": h, "nav": "board", "record": records.track_record(h),
        "pins": [(p, current.get(p.case_id)) for p in pins],
        "tests": [(t, _test_summary(t.result)) for t in fleet_test.fleet_tests_of(h)[:50]],
        "comments": comments.comments_on(hypothesis=h), "history": described(activity.hypothesis_activity(h)),
        "can_edit": can_investigate(request.user), "transitions": hypotheses.TRANSITIONS.get(h.status, ()),
        "comment_form": forms.CommentForm(), "untestable": _untestable(h),
        "test_clusters": case_clusters(),
    })


def _test_summary(r) -> dict:
    """What the hypothesis page's list says of one test beyond lift and p: its controls (used, left
    out) and whether the rule held on the failing part (siblings, own past) or moved job-wide."""
    if not isinstance(r, dict):
        return {}
    out = {}
    if r.get("controls_excluded") is not None:
        out["used"] = sum((r.get("controls") or {}).values())
        out["left"] = analysis_charts.controls_left_out(r)
    c = r.get("component_contrasts")
    if c:
        failed = [name for key, name in (("siblings", "siblings"), ("own_history", "own past"))
                  if (c.get(key) or {}).get("p") is not None and not c[key]["holds"]]
        out["part"] = ("⚑ job-wide" if (c.get("job_wide") or {}).get("flagged") else
                       "✗ " + ", ".join(failed) if failed else "✓ holds")
    if r.get("side_by_side"):
        out["pair"] = "beats each alone" if r.get("beats_each_alone") else "does not beat both alone"
    return out


def _untestable(h: Hypothesis) -> str:
    try:
        fleet_test.check_testable(h)
    except ValueError as exc:
        return str(exc)
    return ""


@require_POST
def hypothesis_comment(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request.user, "commenting")
    try:
        comments.add_comment(request.user, hypothesis=h, body=request.POST.get("body", ""))
    except ValueError as exc:
        messages.error(request, first_line(exc))
    return redirect(h.get_absolute_url() + "#comments")


@require_POST
def hypothesis_status(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request.user, "changing a hypothesis's status")
    try:
        hypotheses.set_status(request.user, h, request.POST.get("status", ""))
    except ValueError as exc:
        messages.error(request, first_line(exc))
    return redirect(h.get_absolute_url())


@require_POST
def hypothesis_fleet_test(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request.user, "starting a fleet test")
    try:
        job = fleet_test.start_fleet_test(request.user, h, cluster=request.POST.get("cluster") or None,
                                          days=history_days(request))
    except ValueError as exc:
        messages.error(request, first_line(exc))
        return redirect(h.get_absolute_url())
    return redirect("job", job_id=job.pk)
