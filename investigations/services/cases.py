"""Cases: one per interrupted job. Opening, assigning, closing — each writes its audit event."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q

from investigations.models import Case
from investigations.services import activity
from investigations.roles import require_investigator
from telemetry.queries.interruptions import MAX_HOSTS_LISTED, get_interruption

CASE_STATUSES = tuple(Case.Status.values)


def open_case(user, cluster: str, job_id: str) -> Case:
    """The case of this interruption; created (with the job facts from telemetry) on first call.

    Raises LookupError when the telemetry store knows no such job or the job did not end
    abnormally: a case always belongs to a real interruption."""
    require_investigator(user, "opening a case")
    cluster, job_id = (cluster or "").strip(), (job_id or "").strip()
    if not cluster or not job_id:
        raise ValueError("cluster and job_id are required to open a case")
    existing = Case.objects.filter(cluster=cluster, job_id=job_id).first()
    if existing is not None:
        return existing
    found = get_interruption(cluster, job_id)
    if found is None:
        raise LookupError(f"job {job_id} on cluster {cluster} is not a known interruption "
                          "(unknown job, still running, or it ended normally)")
    try:
        with transaction.atomic():
            case = Case.objects.create(
                cluster=cluster, job_id=job_id, job_name=found.name, state=found.state, t0=found.t0,
                n_hosts=found.n_hosts, hosts=list(found.hosts)[:MAX_HOSTS_LISTED], opened_by=user,
            )
            activity.record(user, "case.opened", case=case, cluster=cluster, job_id=job_id, state=found.state)
    except IntegrityError:
        # Two people opened the same interruption at once: both get the one case.
        return Case.objects.get(cluster=cluster, job_id=job_id)
    return case


def _user(value):
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return get_user_model().objects.get(username=value)
        except get_user_model().DoesNotExist:
            raise ValueError(f"assignee: no user named {value!r}") from None
    return value


@transaction.atomic
def assign_case(user, case: Case, assignee) -> Case:
    """Assign to a user (or a username); None unassigns."""
    require_investigator(user, "assigning a case")
    assignee = _user(assignee)
    before = case.assignee.get_username() if case.assignee_id else None
    case.assignee = assignee
    case.save(update_fields=["assignee", "updated_at"])
    activity.record(user, "case.assigned", case=case, before=before,
                    after=assignee.get_username() if assignee else None)
    return case


@transaction.atomic
def set_case_status(user, case: Case, status: str) -> Case:
    require_investigator(user, "changing a case's status")
    if status not in CASE_STATUSES:
        raise ValueError(f"status: {status!r} is not a case status; choose one of {', '.join(CASE_STATUSES)}")
    if case.status == status:
        return case
    before = case.status
    case.status = status
    case.save(update_fields=["status", "updated_at"])
    activity.record(user, "case.status_changed", case=case, before=before, after=status)
    return case


def list_cases(*, status: str | None = None, cluster: str | None = None, assignee=None, q: str = "",
               hypothesis=None, limit: int = 50, offset: int = 0):
    """Cases newest t0 first; ``q`` matches the job id exactly or the job name, cluster or '#<id>'."""
    if status and status not in CASE_STATUSES:
        raise ValueError(f"status: {status!r} is not a case status; choose one of {', '.join(CASE_STATUSES)}")
    if not (1 <= limit <= 500):
        raise ValueError(f"limit {limit}: must be between 1 and 500")
    qs = Case.objects.select_related("assignee", "opened_by").prefetch_related("pins", "verdicts__author")
    if status:
        qs = qs.filter(status=status)
    if cluster:
        qs = qs.filter(cluster=cluster)
    if assignee:
        qs = qs.filter(assignee__username=assignee) if isinstance(assignee, str) else qs.filter(assignee=assignee)
    if hypothesis is not None:
        qs = qs.filter(hypotheses=hypothesis)
    q = (q or "").strip()
    if q:
        cond = Q(job_id=q) | Q(job_name__icontains=q) | Q(cluster=q)
        if q.lstrip("#").isdigit():
            cond |= Q(pk=int(q.lstrip("#")))
        qs = qs.filter(cond)
    return list(qs[offset:offset + limit])
