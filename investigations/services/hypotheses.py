"""Hypotheses: pin one (from a case or on its own), link it to more cases, move its status.

A hypothesis names a signal — a catalog metric on a component scope, a condition
(threshold on the value, on its rate, or on its trend), an operator and threshold, a lead
window — and the outcome it predicts. The statement is stored verbatim (markup included)
and escaped where it is shown.

Status moves proposed → testing → confirmed | rejected; a confirmed or rejected
hypothesis can go back to testing when new evidence arrives, and a proposed one can be
rejected without a test. Nothing jumps straight from proposed to confirmed.
"""
from __future__ import annotations

import math

from django.db import IntegrityError, transaction

from investigations.models import Case, CaseHypothesis, Hypothesis
from investigations.services import activity
from investigations.roles import require_investigator
from telemetry import catalog, rules
from telemetry.queries import together
from telemetry.rules import COMPONENT_SCOPES, CONDITIONS, OPERATORS

STATUSES = tuple(Hypothesis.Status.values)
TRANSITIONS = {
    "proposed": ("testing", "rejected"),
    "testing": ("confirmed", "rejected", "proposed"),
    "confirmed": ("testing",),
    "rejected": ("testing",),
}
MAX_STATEMENT = 4000
MAX_OUTCOME = 500


def validate_signal(*, statement, metric, component_scope, condition, operator, threshold, lead_window_s,
                    outcome, combined_with: str = "") -> dict:
    """Clean the fields of a hypothesis; ValueError names the first bad field and why."""
    statement = (statement or "").strip()
    if not statement:
        raise ValueError("statement: required — say what you suspect, e.g. 'PCIe replays precede XID 79'")
    if len(statement) > MAX_STATEMENT:
        raise ValueError(f"statement: at most {MAX_STATEMENT} characters (got {len(statement)})")
    metric = (metric or "").strip()
    found = catalog.resolve(metric)
    if found is None:
        raise ValueError(f"metric: unknown metric {metric!r} — not a canonical name or alias in the metric catalog")
    if component_scope not in COMPONENT_SCOPES:
        raise ValueError(f"component_scope: {component_scope!r} is not one of {', '.join(COMPONENT_SCOPES)}")
    if condition not in CONDITIONS:
        raise ValueError(f"condition: {condition!r} is not one of {', '.join(CONDITIONS)}")
    if operator not in OPERATORS:
        raise ValueError(f"operator: {operator!r} is not one of {' '.join(OPERATORS)}")
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold: {threshold!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"threshold: {threshold!r} must be a finite number")
    lead_window_s = rules.check_lead_window(lead_window_s)
    outcome = (outcome or "").strip()
    if not outcome:
        raise ValueError("outcome: required — the interruption class or root cause it predicts, e.g. 'XID 79'")
    if len(outcome) > MAX_OUTCOME:
        raise ValueError(f"outcome: at most {MAX_OUTCOME} characters (got {len(outcome)})")
    combined_with = (combined_with or "").strip()
    if combined_with:
        pair = together.parse(combined_with)
        together.check(found.name, condition, operator, threshold, pair)
        combined_with = pair.text
    return {"statement": statement, "metric": found.name, "component_scope": component_scope,
            "condition": condition, "operator": operator, "threshold": threshold,
            "lead_window_s": lead_window_s, "outcome": outcome, "combined_with": combined_with}


@transaction.atomic
def pin_hypothesis(user, *, case: Case | None = None, statement: str, metric: str, component_scope: str,
                   condition: str, operator: str = ">", threshold: float, lead_window_s: int,
                   outcome: str, note: str = "", combined_with: str = "") -> Hypothesis:
    """Create a hypothesis; when ``case`` is given, link it to that case too."""
    require_investigator(user, "pinning a hypothesis")
    fields = validate_signal(statement=statement, metric=metric, component_scope=component_scope,
                             condition=condition, operator=operator, threshold=threshold,
                             lead_window_s=lead_window_s, outcome=outcome, combined_with=combined_with)
    hypothesis = Hypothesis.objects.create(author=user, **fields)
    activity.record(user, "hypothesis.created", hypothesis=hypothesis, case=case,
                    metric=hypothesis.metric, outcome=hypothesis.outcome)
    if case is not None:
        _link(user, hypothesis, case, note)
    return hypothesis


def _link(user, hypothesis: Hypothesis, case: Case, note: str) -> CaseHypothesis:
    try:
        with transaction.atomic():
            pin = CaseHypothesis.objects.create(case=case, hypothesis=hypothesis, pinned_by=user, note=note or "")
    except IntegrityError:
        return CaseHypothesis.objects.get(case=case, hypothesis=hypothesis)
    activity.record(user, "hypothesis.pinned", case=case, hypothesis=hypothesis, note=note or "")
    hypothesis.save(update_fields=["updated_at"])
    case.save(update_fields=["updated_at"])
    return pin


@transaction.atomic
def link_hypothesis(user, hypothesis: Hypothesis, case: Case, note: str = "") -> CaseHypothesis:
    """Link an existing hypothesis to a case (idempotent: a second link returns the first)."""
    require_investigator(user, "pinning a hypothesis to a case")
    return _link(user, hypothesis, case, (note or "").strip())


@transaction.atomic
def set_status(user, hypothesis: Hypothesis, status: str) -> Hypothesis:
    require_investigator(user, "changing a hypothesis's status")
    if status not in STATUSES:
        raise ValueError(f"status: {status!r} is not a hypothesis status; choose one of {', '.join(STATUSES)}")
    before = hypothesis.status
    if status == before:
        return hypothesis
    if status not in TRANSITIONS[before]:
        raise ValueError(f"status: {hypothesis.short_id} is {before}; it can move to "
                         f"{' or '.join(TRANSITIONS[before])}, not {status}")
    hypothesis.status = status
    hypothesis.save(update_fields=["status", "updated_at"])
    activity.record(user, "hypothesis.status_changed", hypothesis=hypothesis, before=before, after=status)
    return hypothesis
