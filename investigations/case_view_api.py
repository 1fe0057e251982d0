"""API of what the inbox and a case's view show, from the same services as the pages
(services/inbox.py, services/case_signals.py): the inbox rows, a case's overlay figure and its
"what's different here" ranking. Bad view parameters are 400 naming the parameter; a telemetry
store that does not answer is 503."""
from __future__ import annotations

from contextlib import contextmanager

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Query, Router
from ninja.errors import HttpError

from investigations import forms
from investigations.models import Case
from investigations.permalinks import parse_points, parse_signals, parse_window, signal_param
from investigations.services import case_signals, inbox
from telemetry.queries.overlay import InvalidSignal, SignalSpec

router = Router(tags=["inbox and case views"])


@contextmanager
def _answers():
    try:
        yield
    except InvalidSignal as exc:
        raise HttpError(400, str(exc)) from None
    except case_signals.NoPeers as exc:
        raise HttpError(404, str(exc)) from None
    except HttpError:
        raise
    except Exception as exc:  # the telemetry store did not answer: transient
        raise HttpError(503, f"telemetry store unavailable: {type(exc).__name__}") from None


def _inbox_page(range, cluster, state, q, root_cause, has_case, page, from_="", to=""):
    form = forms.InboxFilterForm({"range": range, "cluster": cluster, "state": state, "q": q,
                                  "root_cause": root_cause, "has_case": has_case, "page": page,
                                  "from": from_, "to": to})
    if not form.is_valid():
        raise HttpError(400, forms.error_text(form))
    f = form.cleaned_data
    flt = inbox.InboxFilter(span_s=forms.RANGES[f["range"] or "7d"], start=f["start"], end=f["end"],
                            cluster=f["cluster"].strip() or None,
                            state=f["state"] or None, search=f["q"].strip(), root_cause=f["root_cause"].strip(),
                            has_case=f["has_case"], page_no=f["page"] or 1)
    with _answers():
        return inbox.inbox_page(flt)


@router.get("/interruptions")
def list_interruptions(request, range: str = "7d", cluster: str = "", state: str = "", q: str = "",
                       root_cause: str = "", has_case: str = "", page: int = 1,
                       from_: str = Query("", alias="from"), to: str = ""):
    """Interruptions, newest first, 50 a page, with the inbox page's filters: ``range`` (24h, 7d,
    30d, 90d, all) or absolute ``from``/``to`` (a day YYYY-MM-DD, whole, or an ISO date-time;
    UTC unless a zone is named; they replace ``range``), ``cluster``, ``state`` (a Slurm interruption state), ``q`` (job name or id),
    ``root_cause`` and ``has_case`` (yes/no: filters on the team's cases). Each row: the job, its run (a
    requeued job has one row per run that ended abnormally), hosts, the events nearest t0 as the
    inbox shows them (``XID 94 gpu3@host``), and the case and current verdict if any."""
    found = _inbox_page(range, cluster, state, q, root_cause, has_case, page, from_, to)
    rows = []
    for r in found.rows:
        it = r.item
        rows.append({
            "cluster": it.cluster, "job_id": it.job_id, "name": it.name, "user": it.user, "partition": it.partition,
            "state": it.state, "exit_code": it.exit_code, "reason": it.reason,
            "start": it.start_ts.isoformat() if it.start_ts else None, "t0": it.t0.isoformat(),
            "n_hosts": it.n_hosts, "n_gpus": it.n_gpus, "hosts": list(it.hosts),
            "events": [{"label": e.label, "kind": e.kind, "code": e.code, "count": e.count, "host": e.first_host,
                        "component": e.first_component, "offset_s": e.first_offset_s, "meaning": e.meaning}
                       for e in it.events],
            "event_total": it.event_total, "xid_codes": list(it.xid_codes), "link_downs": it.link_flaps,
            "case_id": r.case.pk if r.case else None, "verdict": r.verdict.kind if r.verdict else None,
            "root_cause": inbox.cause_label(r.verdict) if r.verdict else None,
        })
    return {"total": found.total, "page": found.page_no, "page_size": inbox.PAGE_SIZE, "has_next": found.has_next,
            "scanned_all": found.scanned_all, "rows": rows}


@router.get("/inbox")
def get_inbox(request, range: str = "7d", cluster: str = "", state: str = "", q: str = "", root_cause: str = "",
              has_case: str = "", page: int = 1, from_: str = Query("", alias="from"), to: str = ""):
    """Interruptions with their case and current verdict; the inbox page's filters. Absolute
    ``from``/``to`` (a day YYYY-MM-DD or an ISO date-time, UTC) replace ``range``."""
    found = _inbox_page(range, cluster, state, q, root_cause, has_case, page, from_, to)
    return {
        "total": found.total, "page": found.page_no, "page_size": inbox.PAGE_SIZE, "scanned_all": found.scanned_all,
        "rows": [{"cluster": r.item.cluster, "job_id": r.item.job_id, "state": r.item.state,
                  "t0": r.item.t0.isoformat(), "hosts": list(r.item.hosts),
                  "case_id": r.case.pk if r.case else None,
                  "verdict": r.verdict.kind if r.verdict else None,
                  "root_cause": inbox.cause_label(r.verdict) if r.verdict else None} for r in found.rows],
    }


@router.get("/cases/{case_id}/overlay")
def get_overlay(request, case_id: int, w: str = "", s: str = "", n: int = 600):
    """The overlay figure (plotly JSON) and its meta for window ``w`` and signals ``s``, as on the page."""
    case = get_object_or_404(Case, pk=case_id)
    with _answers():
        window, signals = parse_window(w or None), parse_signals(s or None)
        if not signals:
            raise HttpError(400, "s: name at least one signal, metric@host[/component]")
        found = case_signals.case_overlay(case, window, signals, parse_points(str(n)))
    return HttpResponse(found.as_json(), content_type="application/json")


@router.get("/cases/{case_id}/differences")
def get_differences(request, case_id: int, w: str = ""):
    """The lead-window components that differ most from healthy peers, best first."""
    case = get_object_or_404(Case, pk=case_id)
    with _answers():
        found = case_signals.case_differences(case, parse_window(w or None))
    return {
        "lead_s": found.lead_s, "peers": found.n_peers, "defaults": case_signals.default_signals(found.rows),
        "rows": [{"signal": signal_param(SignalSpec(d.metric, d.host, d.component)), "metric": d.metric,
                  "host": d.host, "component": d.component, "z": d.z, "value": d.affected_value,
                  "peer_median": d.peer_median, "peer_p95": d.peer_p95, "unit": d.unit,
                  "scope": case_signals.scope_of_metric(d.metric)} for d in found.rows],
    }
