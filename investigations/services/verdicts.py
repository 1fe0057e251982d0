"""Verdicts on cases: confirmed (naming the hypothesis or the root cause), false positive
(the signal was noise), inconclusive. A rationale is always required.

History is kept: every call adds a row, nothing is updated or deleted; the case's current
verdict is its newest row.
"""
from __future__ import annotations

from django.db import transaction

from investigations.models import Case, CaseHypothesis, Hypothesis, Verdict
from investigations.services import activity
from investigations.roles import require_investigator

KINDS = tuple(Verdict.Kind.values)
MAX_RATIONALE = 10000
MAX_ROOT_CAUSE = 500


@transaction.atomic
def record_verdict(user, case: Case, *, kind: str, rationale: str, hypothesis: Hypothesis | None = None,
                   root_cause: str = "") -> Verdict:
    require_investigator(user, "recording a verdict")
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not a verdict; choose one of {', '.join(KINDS)}")
    rationale = (rationale or "").strip()
    if not rationale:
        raise ValueError("rationale: required — say why (what you looked at and what it showed)")
    if len(rationale) > MAX_RATIONALE:
        raise ValueError(f"rationale: at most {MAX_RATIONALE} characters (got {len(rationale)})")
    root_cause = (root_cause or "").strip()
    if len(root_cause) > MAX_ROOT_CAUSE:
        raise ValueError(f"root_cause: at most {MAX_ROOT_CAUSE} characters (got {len(root_cause)})")
    if kind == Verdict.Kind.CONFIRMED and hypothesis is None and not root_cause:
        raise ValueError("a confirmed verdict names what was confirmed: give a hypothesis or a root_cause")
    if hypothesis is not None and not CaseHypothesis.objects.filter(case=case, hypothesis=hypothesis).exists():
        raise ValueError(f"hypothesis: {hypothesis.short_id} is not pinned to case #{case.pk}; pin it first")
    previous = case.current_verdict
    verdict = Verdict.objects.create(case=case, kind=kind, hypothesis=hypothesis, root_cause=root_cause,
                                     rationale=rationale, author=user)
    activity.record(
        user, "verdict.recorded", case=case, hypothesis=hypothesis, verdict_id=verdict.pk, kind=kind,
        root_cause=root_cause, previous_kind=previous.kind if previous else None,
        previous_verdict_id=previous.pk if previous else None,
    )
    case.save(update_fields=["updated_at"])
    if hypothesis is not None:
        hypothesis.save(update_fields=["updated_at"])
    return verdict


def current_verdict(case: Case) -> Verdict | None:
    return case.current_verdict


def verdict_history(case: Case) -> list[Verdict]:
    """Every verdict of the case, newest (= current) first."""
    return list(case.verdicts.select_related("author", "hypothesis").newest_first())
