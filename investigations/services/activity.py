"""The audit trail: every verb of the workspace writes one AuditEvent here; the case
timeline, the hypothesis history and the admins' audit log read them back.

Other modules (background jobs, exports) call ``record`` for their own verbs, e.g.
``record(user, "job.started", case=case, job_id=job.pk, kind=job.kind)``.
"""
from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from investigations.models import AuditEvent, CaseHypothesis
from investigations.roles import require_admin

AUDIT_LOG_MAX = 1000


def _json_safe(value):
    """Audit data is JSON: keep ids and strings, never model instances."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "pk"):
        return value.pk
    return str(value)



def record(actor, verb: str, case=None, hypothesis=None, **data) -> AuditEvent:
    """Write one audit event. ``actor`` may be None for the system (e.g. a scheduled job)."""
    if not verb or len(verb) > 64:
        raise ValueError(f"verb: {verb!r} must be 1..64 characters")
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None
    return AuditEvent.objects.create(actor=actor, verb=verb, case=case, hypothesis=hypothesis,
                                     data=_json_safe(data))


# Events of a hypothesis (recorded without a case) that belong on the timeline of every case it
# is pinned to: the team changing its mind about an idea is part of each case's story.
HYPOTHESIS_VERBS_ON_CASES = ("hypothesis.status_changed", "job.started", "job.succeeded", "job.failed", "job.cancelled")


def case_activity(case) -> list[AuditEvent]:
    """Everything that happened on a case, oldest first (a timeline reads forwards), with the
    status changes of the hypotheses pinned to it."""
    pinned = CaseHypothesis.objects.filter(case=case).values("hypothesis_id")
    return list(AuditEvent.objects
                .filter(Q(case=case) | Q(case__isnull=True, hypothesis__in=pinned, verb__in=HYPOTHESIS_VERBS_ON_CASES))
                .select_related("actor", "hypothesis").order_by("created_at", "pk"))


def hypothesis_activity(hypothesis) -> list[AuditEvent]:
    """The history of a hypothesis (its own events and verdicts naming it), oldest first."""
    return list(AuditEvent.objects.filter(hypothesis=hypothesis).select_related("actor", "case")
                .order_by("created_at", "pk"))


def audit_log(user, *, actor=None, verb: str | None = None, case=None, hypothesis=None,
              since: datetime | None = None, until: datetime | None = None, q: str = "",
              limit: int = 200, offset: int = 0) -> list[AuditEvent]:
    """Admins only: events newest first, filtered. ``actor`` is a user or a username;
    ``verb`` matches exactly, or a prefix when it ends with '.' ("verdict.")."""
    require_admin(user, "the audit log")
    if not (1 <= limit <= AUDIT_LOG_MAX):
        raise ValueError(f"limit {limit}: must be between 1 and {AUDIT_LOG_MAX}")
    if offset < 0:
        raise ValueError(f"offset {offset}: must not be negative")
    qs = AuditEvent.objects.select_related("actor", "case", "hypothesis")
    if actor:
        qs = qs.filter(actor__username=actor) if isinstance(actor, str) else qs.filter(actor=actor)
    if verb:
        qs = qs.filter(verb__startswith=verb) if verb.endswith(".") else qs.filter(verb=verb)
    if case is not None:
        qs = qs.filter(case=case)
    if hypothesis is not None:
        qs = qs.filter(hypothesis=hypothesis)
    if since:
        qs = qs.filter(created_at__gte=since)
    if until:
        qs = qs.filter(created_at__lt=until)
    if q:
        qs = qs.filter(Q(verb__icontains=q) | Q(actor__username__icontains=q))
    return list(qs.order_by("-created_at", "-pk")[offset:offset + limit])
