"""API of the investigation workspace: cases, hypotheses, verdicts, comments, activity and
the audit log. Thin: every route calls the same service functions as the pages.

Auth (project-wide, see investigations/api_auth.py): a personal API token (Bearer, acts as its
owner, no CSRF) or the browser session (with CSRF).
Errors: 401 anonymous or a bad token, 403 when the
role does not allow the verb, 400 for bad input (the message names the field), 404 unknown
ids or a job that is not an interruption."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404
from ninja import Router, Status
from ninja.errors import HttpError

from investigations.api import JobOut
from investigations.models import BackgroundJob, Case, Hypothesis
from investigations.schemas import (
    AuditEventOut,
    CaseIn,
    CaseOut,
    CaseUpdate,
    CommentIn,
    CommentOut,
    ExportIn,
    FleetTestIn,
    HypothesisIn,
    HypothesisOut,
    HypothesisStatusIn,
    LagIn,
    LinkIn,
    PinOut,
    ScanIn,
    VerdictIn,
    VerdictOut,
)
from investigations.services import (activity, board, cases, comments, exports, fleet_test, hypotheses, lags,
                                     scans, verdicts)

router = Router(tags=["workspace"])


@contextmanager
def service_errors():
    """Turn the services' exceptions into HTTP answers with their message."""
    try:
        yield
    except PermissionDenied as exc:
        raise HttpError(403, str(exc) or "not allowed for your role") from None
    except ValidationError as exc:
        raise HttpError(400, "; ".join(exc.messages)) from None
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None
    except LookupError as exc:
        raise HttpError(404, str(exc.args[0]) if exc.args else "not found") from None


def _case(case_id: int) -> Case:
    return get_object_or_404(Case.objects.select_related("assignee", "opened_by"), pk=case_id)


def _hypothesis(hypothesis_id: int) -> Hypothesis:
    return get_object_or_404(Hypothesis.objects.select_related("author"), pk=hypothesis_id)


# --- cases --------------------------------------------------------------------------------------

@router.get("/cases", response=list[CaseOut])
def list_cases(request, status: str | None = None, cluster: str | None = None, assignee: str | None = None,
               q: str = "", hypothesis_id: int | None = None, limit: int = 50, offset: int = 0):
    hypothesis = _hypothesis(hypothesis_id) if hypothesis_id else None
    with service_errors():
        return cases.list_cases(status=status, cluster=cluster, assignee=assignee, q=q, hypothesis=hypothesis,
                                limit=limit, offset=offset)


@router.post("/cases", response={200: CaseOut, 201: CaseOut})
def open_case(request, payload: CaseIn):
    """Open the case of an interrupted job; opening it again returns the existing case (200)."""
    existed = Case.objects.filter(cluster=payload.cluster.strip(), job_id=payload.job_id.strip()).exists()
    with service_errors():
        case = cases.open_case(request.user, payload.cluster, payload.job_id)
    return Status(200 if existed else 201, case)


@router.get("/cases/{case_id}", response=CaseOut)
def get_case(request, case_id: int):
    return _case(case_id)


@router.patch("/cases/{case_id}", response=CaseOut)
def update_case(request, case_id: int, payload: CaseUpdate):
    case = _case(case_id)
    given = payload.model_fields_set
    with service_errors():
        if "assignee" in given:
            cases.assign_case(request.user, case, payload.assignee or None)
        if "status" in given and payload.status is not None:
            cases.set_case_status(request.user, case, payload.status)
    return case


@router.get("/cases/{case_id}/verdicts", response=list[VerdictOut])
def list_verdicts(request, case_id: int):
    """Every verdict of the case, newest (the current one) first."""
    return verdicts.verdict_history(_case(case_id))


@router.post("/cases/{case_id}/verdicts", response={201: VerdictOut})
def record_verdict(request, case_id: int, payload: VerdictIn):
    case = _case(case_id)
    hypothesis = _hypothesis(payload.hypothesis_id) if payload.hypothesis_id else None
    with service_errors():
        verdict = verdicts.record_verdict(request.user, case, kind=payload.kind, rationale=payload.rationale,
                                          hypothesis=hypothesis, root_cause=payload.root_cause)
    return Status(201, verdict)


@router.get("/cases/{case_id}/comments", response=list[CommentOut])
def list_case_comments(request, case_id: int):
    return comments.comments_on(case=_case(case_id))


@router.post("/cases/{case_id}/comments", response={201: CommentOut})
def comment_on_case(request, case_id: int, payload: CommentIn):
    case = _case(case_id)
    with service_errors():
        return Status(201, comments.add_comment(request.user, case=case, body=payload.body))


@router.get("/cases/{case_id}/activity", response=list[AuditEventOut])
def case_activity(request, case_id: int):
    """The case timeline, oldest first: every action, verdict change and job run."""
    return activity.case_activity(_case(case_id))


@router.get("/cases/{case_id}/hypotheses", response=list[HypothesisOut])
def case_hypotheses(request, case_id: int):
    """Hypotheses pinned to the case, in the order they were pinned."""
    return [pin.hypothesis for pin in _case(case_id).pins.select_related("hypothesis__author")]


@router.post("/cases/{case_id}/hypotheses", response={201: HypothesisOut})
def pin_new_hypothesis(request, case_id: int, payload: HypothesisIn):
    """Create a hypothesis and pin it to this case."""
    case = _case(case_id)
    return Status(201, _pin(request, payload, case))


@router.post("/cases/{case_id}/hypotheses/{hypothesis_id}", response={201: PinOut})
def link_hypothesis(request, case_id: int, hypothesis_id: int, payload: LinkIn):
    """Pin an existing hypothesis to this case (again = no change)."""
    case, hypothesis = _case(case_id), _hypothesis(hypothesis_id)
    with service_errors():
        return Status(201, hypotheses.link_hypothesis(request.user, hypothesis, case, payload.note))


# --- hypotheses ---------------------------------------------------------------------------------

def _pin(request, payload: HypothesisIn, case: Case | None) -> Hypothesis:
    with service_errors():
        return hypotheses.pin_hypothesis(
            request.user, case=case, statement=payload.statement, metric=payload.metric,
            component_scope=payload.component_scope, condition=payload.condition, operator=payload.operator,
            threshold=payload.threshold, lead_window_s=payload.lead_window_s, outcome=payload.outcome,
            note=payload.note, combined_with=payload.combined_with,
        )


@router.get("/hypotheses", response=list[HypothesisOut])
def list_hypotheses(request, q: str = "", status: str | None = None, author: str | None = None,
                    metric: str | None = None, component_scope: str | None = None, sort: str = "-updated_at"):
    """The team board: search and filter; sort by any column (prefix - for descending)."""
    with service_errors():
        rows = board.board_rows(q=q, status=status, author=author, metric=metric,
                                component_scope=component_scope, sort=sort)
    for row in rows:
        row.hypothesis._track_record = row.record
    return [row.hypothesis for row in rows]


@router.post("/hypotheses", response={201: HypothesisOut})
def create_hypothesis(request, payload: HypothesisIn):
    case = _case(payload.case_id) if payload.case_id else None
    return Status(201, _pin(request, payload, case))


@router.get("/hypotheses/{hypothesis_id}", response=HypothesisOut)
def get_hypothesis(request, hypothesis_id: int):
    return _hypothesis(hypothesis_id)


@router.post("/hypotheses/{hypothesis_id}/status", response=HypothesisOut)
def set_hypothesis_status(request, hypothesis_id: int, payload: HypothesisStatusIn):
    hypothesis = _hypothesis(hypothesis_id)
    with service_errors():
        return hypotheses.set_status(request.user, hypothesis, payload.status)


@router.post("/hypotheses/{hypothesis_id}/tests", response={201: JobOut})
def start_fleet_test(request, hypothesis_id: int, payload: FleetTestIn):
    """Start a fleet test of the hypothesis (a background job; poll GET /api/jobs/{id})."""
    hypothesis = _hypothesis(hypothesis_id)
    with service_errors():
        return Status(201, fleet_test.start_fleet_test(request.user, hypothesis, cluster=payload.cluster, days=payload.days))


@router.post("/scans", response={201: JobOut})
def start_scan(request, payload: ScanIn):
    """Rank every catalog metric by how it differs before the outcome (a background job; poll
    GET /api/jobs/{id}, the ranking is in its result's ``rows``)."""
    with service_errors():
        return Status(201, scans.start_scan(request.user, outcome=payload.outcome, lead_window_s=payload.lead_window_s,
                                            days=payload.days, cluster=payload.cluster))


@router.post("/lags", response={201: JobOut})
def start_lag(request, payload: LagIn):
    """Which of two signals leads, and by how much (a background job): two metrics give the
    cross-correlation over lags, two event kinds the lead-time histograms both ways. Poll
    GET /api/lags/{id} (or /api/jobs/{id}); the curve and the verdict are in its ``result``."""
    with service_errors():
        return Status(201, lags.start_lag(request.user, a=payload.a, b=payload.b, cluster=payload.cluster,
                                          component_a=payload.component_a, component_b=payload.component_b,
                                          host=payload.host, days=payload.days, start=payload.from_,
                                          end=payload.to, step_s=payload.step_s, max_lag_s=payload.max_lag_s))


@router.get("/lags/{job_id}", response=JobOut)
def get_lag(request, job_id: int):
    """A lag analysis: its state and progress, and its result once it has succeeded."""
    return get_object_or_404(BackgroundJob, pk=job_id, kind=lags.LAG_KIND)


@router.post("/exports", response={201: JobOut})
def start_export(request, payload: ExportIn):
    """Start a dataset export (a background job); download it from GET /api/exports/{job id}/file."""
    with service_errors():
        return Status(201, exports.start_export(request.user, lead_window_s=payload.lead_window_s,
                                                kinds=payload.kinds, controls=payload.controls, fmt=payload.format,
                                                cluster=payload.cluster))


@router.get("/exports/{job_id}/file")
def export_file(request, job_id: int):
    """The export's Parquet or CSV file (404 until the job has succeeded)."""
    path = exports.export_file(get_object_or_404(BackgroundJob, pk=job_id))
    if path is None:
        raise HttpError(404, f"job {job_id} has no finished export file")
    return exports.file_response(path)


@router.get("/hypotheses/{hypothesis_id}/cases", response=list[CaseOut])
def hypothesis_cases(request, hypothesis_id: int):
    return list(_hypothesis(hypothesis_id).cases.select_related("assignee", "opened_by"))


@router.get("/hypotheses/{hypothesis_id}/comments", response=list[CommentOut])
def list_hypothesis_comments(request, hypothesis_id: int):
    return comments.comments_on(hypothesis=_hypothesis(hypothesis_id))


@router.post("/hypotheses/{hypothesis_id}/comments", response={201: CommentOut})
def comment_on_hypothesis(request, hypothesis_id: int, payload: CommentIn):
    hypothesis = _hypothesis(hypothesis_id)
    with service_errors():
        return Status(201, comments.add_comment(request.user, hypothesis=hypothesis, body=payload.body))


@router.get("/hypotheses/{hypothesis_id}/activity", response=list[AuditEventOut])
def hypothesis_activity(request, hypothesis_id: int):
    return activity.hypothesis_activity(_hypothesis(hypothesis_id))


# --- audit log ----------------------------------------------------------------------------------

@router.get("/audit", response=list[AuditEventOut])
def audit_log(request, actor: str | None = None, verb: str | None = None, case_id: int | None = None,
              hypothesis_id: int | None = None, since: datetime | None = None, until: datetime | None = None,
              limit: int = 200, offset: int = 0):
    """Admins only. ``verb`` ending in '.' filters by prefix ("verdict.")."""
    with service_errors():
        return activity.audit_log(
            request.user, actor=actor, verb=verb, case=_case(case_id) if case_id else None,
            hypothesis=_hypothesis(hypothesis_id) if hypothesis_id else None,
            since=since, until=until, limit=limit, offset=offset,
        )
