"""The inbox (interruptions with their cases and verdicts), its charts, and the nav search box."""
from __future__ import annotations


from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from investigations import forms
from investigations.models import Case, Hypothesis
from investigations.roles import can_investigate, require_investigator
from investigations.services import board, cases, inbox as inbox_service
from investigations.views.common import first_line, store_error_message
from telemetry import store
from telemetry.queries import events as event_queries, overview


def _filter(form) -> tuple[inbox_service.InboxFilter, str]:
    f = form.cleaned_data if form.is_valid() else {}
    rng = f.get("range") or "7d"
    span_s = forms.RANGES[rng]
    if f.get("start") or f.get("end"):
        rng = "custom"
    return inbox_service.InboxFilter(
        span_s=span_s, start=f.get("start"), end=f.get("end"),
        cluster=(f.get("cluster") or "").strip() or None,
        state=f.get("state") or None,
        search=(f.get("q") or "").strip(),
        root_cause=(f.get("root_cause") or "").strip(),
        has_case=f.get("has_case") or "",
        page_no=f.get("page") or 1,
    ), rng


def inbox(request):
    form = forms.InboxFilterForm(request.GET or None)
    if request.GET and not form.is_valid():
        return render(request, "investigations/inbox.html",
                      {"form": form, "nav": "inbox", "error": "Some filters are not valid: " + forms.error_text(form)},
                      status=400)
    flt, rng = _filter(form)
    ctx = {"form": form, "nav": "inbox", "range": rng, "can_edit": can_investigate(request.user),
           "embedded": store.config().embedded}
    try:
        page = inbox_service.inbox_page(flt)
    except Exception as exc:  # the page still renders and says what is wrong
        ctx["error"] = store_error_message(exc)
        return render(request, "investigations/inbox.html", ctx)
    params = {k: v for k, v in request.GET.items() if k != "page" and v}
    ctx.update({
        "rows": page.rows, "total": page.total, "scanned_all": page.scanned_all,
        "scan_limit": inbox_service.FILTER_SCAN,
        "page_no": page.page_no, "has_prev": page.has_prev, "has_next": page.has_next,
        "prev_url": "?" + urlencode({**params, "page": page.page_no - 1}),
        "next_url": "?" + urlencode({**params, "page": page.page_no + 1}),
        "first_url": "?" + urlencode({**params, "page": 1}),
        "chart_url": reverse("inbox-chart") + ("?" + urlencode(params) if params else ""),
        "root_causes": inbox_service.root_cause_choices(),
        "clusters": page.clusters,
    })
    if not page.rows and not flt.post_filter and page.total == 0:
        try:
            ctx["totals"] = overview.store_totals()
        except Exception as exc:
            ctx["error"] = store_error_message(exc)
    return render(request, "investigations/inbox.html", ctx)


def inbox_chart(request):
    """Fragment: interruptions per week by state, and per root cause (from current verdicts)."""
    flt, _ = _filter(forms.InboxFilterForm(request.GET or None))
    try:
        figures, empty = inbox_service.weekly_figures(flt.span_s, flt.cluster, start=flt.start, end=flt.end)
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    return render(request, "investigations/_inbox_chart.html", {"figures": figures, "empty": empty})


@require_POST
def open_interruption(request):
    """One click from the inbox: the case of this interruption, created if needed."""
    require_investigator(request.user, "opening a case")
    cluster, job_id = request.POST.get("cluster", ""), request.POST.get("job_id", "")
    try:
        case = cases.open_case(request.user, cluster, job_id)
    except (LookupError, ValueError) as exc:
        return HttpResponseBadRequest(f"Cannot open a case: {first_line(exc)}", content_type="text/plain")
    return redirect(case.get_absolute_url())


def search(request):
    """The nav search box: H12 / #214 jump straight there; anything else lists matches."""
    q = request.GET.get("q", "").strip()[:200]
    if q[:1] in "Hh" and q[1:].isdigit() and Hypothesis.objects.filter(pk=int(q[1:])).exists():
        return redirect("hypothesis", pk=int(q[1:]))
    if q.startswith("#") and q[1:].isdigit() and Case.objects.filter(pk=int(q[1:])).exists():
        return redirect("case", pk=int(q[1:]))
    found_cases = cases.list_cases(q=q, limit=50) if q else []
    try:
        found_hosts = event_queries.hosts_matching(q) if q else []
    except Exception:  # the rest of the search still answers when the store cannot
        found_hosts = []
    found_h = board.board_rows(q=q)[:50] if q else []
    return render(request, "investigations/search.html",
                  {"q": q, "cases": found_cases, "hypotheses": found_h, "hosts": found_hosts,
                   "inbox_url": reverse("inbox") + "?" + urlencode({"q": q, "range": "all"})})
