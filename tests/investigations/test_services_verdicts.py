"""Verdicts: a rationale is required, a confirmed verdict names what it confirms, history
is append-only (the newest row is current), viewers cannot record them."""
from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from investigations.models import AppendOnly, AuditEvent, Verdict
from investigations.services import activity, verdicts

from .factories import make_case, make_hypothesis

pytestmark = pytest.mark.django_db


def test_verdict_history_is_kept_and_the_newest_is_current(investigator, make_user):
    case = make_case()
    h = make_hypothesis(investigator, cases=[case])
    first = verdicts.record_verdict(investigator, case, kind="false_positive", rationale="replays were a firmware bug")
    second = verdicts.record_verdict(make_user("bob"), case, kind="confirmed", hypothesis=h,
                                     rationale="replays on gpu3 rose 6 h before XID 79")
    assert Verdict.objects.filter(case=case).count() == 2
    assert case.current_verdict == second == verdicts.current_verdict(case)
    assert verdicts.verdict_history(case) == [second, first]
    assert Verdict.objects.get(pk=first.pk).kind == "false_positive"  # untouched
    events = [e for e in activity.case_activity(case) if e.verb == "verdict.recorded"]
    assert [(e.actor.username, e.data["kind"], e.data["previous_kind"]) for e in events] == [
        ("alice", "false_positive", None), ("bob", "confirmed", "false_positive")]
    assert events[1].hypothesis == h


def test_verdict_rows_cannot_be_changed_or_deleted(investigator):
    case = make_case()
    v = verdicts.record_verdict(investigator, case, kind="inconclusive", rationale="no telemetry for n0412")
    v.kind = "confirmed"
    with pytest.raises(AppendOnly):
        v.save()
    with pytest.raises(AppendOnly):
        v.delete()
    assert Verdict.objects.get(pk=v.pk).kind == "inconclusive"


def test_the_database_refuses_an_empty_rationale():
    case = make_case()
    with pytest.raises(IntegrityError), transaction.atomic():
        Verdict.objects.create(case=case, kind="inconclusive", rationale="")


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "confirmed", "rationale": "   "}, "rationale: required"),
    ({"kind": "maybe", "rationale": "x"}, "kind: 'maybe' is not a verdict"),
    ({"kind": "confirmed", "rationale": "it is"}, "a confirmed verdict names what was confirmed"),
])
def test_bad_verdicts_are_rejected_with_a_clear_message(investigator, kwargs, message):
    case = make_case()
    with pytest.raises(ValueError, match=message):
        verdicts.record_verdict(investigator, case, **kwargs)
    assert not Verdict.objects.exists() and not AuditEvent.objects.exists()


def test_a_confirmed_verdict_may_name_a_root_cause_instead(investigator):
    case = make_case()
    v = verdicts.record_verdict(investigator, case, kind="confirmed", root_cause="HBM3 failure on gpu5",
                                rationale="row remap failures, then XID 48")
    assert (v.hypothesis, v.root_cause) == (None, "HBM3 failure on gpu5")


def test_the_named_hypothesis_must_be_pinned_to_the_case(investigator):
    case = make_case()
    h = make_hypothesis(investigator)
    with pytest.raises(ValueError, match=f"H{h.pk} is not pinned to case #{case.pk}; pin it first"):
        verdicts.record_verdict(investigator, case, kind="confirmed", hypothesis=h, rationale="it fits")


def test_a_viewer_cannot_record_a_verdict(viewer):
    case = make_case()
    with pytest.raises(PermissionDenied, match="recording a verdict needs the investigator role"):
        verdicts.record_verdict(viewer, case, kind="inconclusive", rationale="hm")
    assert not Verdict.objects.exists()


def test_an_admin_can_record_a_verdict_and_read_the_audit_log(admin_user, investigator, viewer):
    case = make_case()
    verdicts.record_verdict(admin_user, case, kind="inconclusive", rationale="waiting for RMA report")
    log = activity.audit_log(admin_user, verb="verdict.")
    assert [(e.verb, e.actor.username) for e in log] == [("verdict.recorded", "ada")]
    assert activity.audit_log(admin_user, actor="alice") == []
    for user in (investigator, viewer):
        with pytest.raises(PermissionDenied, match="admin role"):
            activity.audit_log(user)
