"""Cases: opened from a real interruption in the telemetry store, idempotent, assigned,
closed; every verb audited; viewers cannot change anything."""
from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from investigations.models import AuditEvent, Case
from investigations.services import activity, cases

from .factories import make_case, write_job

pytestmark = pytest.mark.django_db


def test_open_case_fills_the_job_facts_from_telemetry(clean_store, investigator):
    t0 = write_job("c1", "4711", state="NODE_FAIL", hosts=("n0412", "n0413", "n0414"), name="llm-405b-7")
    case = cases.open_case(investigator, "c1", "4711")
    assert (case.cluster, case.job_id, case.job_name, case.state) == ("c1", "4711", "llm-405b-7", "NODE_FAIL")
    assert case.t0 == t0 and case.n_hosts == 3 and case.hosts == ["n0412", "n0413", "n0414"]
    assert case.status == "open" and case.opened_by == investigator
    assert case.get_absolute_url() == f"/cases/{case.pk}/"
    events = list(AuditEvent.objects.filter(case=case).values_list("verb", "actor__username"))
    assert events == [("case.opened", "alice")]


def test_opening_the_same_interruption_again_returns_the_same_case(clean_store, investigator, make_user):
    write_job("c1", "4712", state="FAILED", hosts=("n1",))
    first = cases.open_case(investigator, "c1", "4712")
    again = cases.open_case(make_user("bob"), "c1", "4712")
    assert again.pk == first.pk and Case.objects.count() == 1
    assert AuditEvent.objects.filter(verb="case.opened").count() == 1


def test_a_job_that_ended_normally_or_is_unknown_has_no_case(clean_store, investigator):
    write_job("c1", "4713", state="COMPLETED", hosts=("n1", "n2"))
    with pytest.raises(LookupError, match="4713 on cluster c1 is not a known interruption"):
        cases.open_case(investigator, "c1", "4713")
    with pytest.raises(LookupError, match="nope"):
        cases.open_case(investigator, "c1", "nope")
    assert Case.objects.count() == 0


def test_a_viewer_cannot_open_assign_or_close(viewer, investigator):
    case = make_case(opened_by=investigator)
    with pytest.raises(PermissionDenied, match="investigator role"):
        cases.open_case(viewer, "c1", "1")
    with pytest.raises(PermissionDenied, match="investigator role"):
        cases.assign_case(viewer, case, investigator)
    with pytest.raises(PermissionDenied, match="investigator role"):
        cases.set_case_status(viewer, case, "closed")
    case.refresh_from_db()
    assert case.assignee is None and case.status == "open"
    assert not AuditEvent.objects.exists()


def test_assign_by_user_or_username_and_unassign_are_audited(investigator, make_user):
    bob = make_user("bob")
    case = make_case()
    cases.assign_case(investigator, case, bob)
    assert Case.objects.get(pk=case.pk).assignee == bob
    cases.assign_case(investigator, case, "alice")
    assert Case.objects.get(pk=case.pk).assignee == investigator
    cases.assign_case(investigator, case, None)
    assert Case.objects.get(pk=case.pk).assignee is None
    with pytest.raises(ValueError, match="assignee: no user named 'nobody'"):
        cases.assign_case(investigator, case, "nobody")
    data = [e.data for e in activity.case_activity(case) if e.verb == "case.assigned"]
    assert data == [{"before": None, "after": "bob"}, {"before": "bob", "after": "alice"},
                    {"before": "alice", "after": None}]


def test_status_changes_are_checked_and_audited(investigator):
    case = make_case()
    with pytest.raises(ValueError, match="status: 'done' is not a case status"):
        cases.set_case_status(investigator, case, "done")
    cases.set_case_status(investigator, case, "closed")
    cases.set_case_status(investigator, case, "closed")  # no change, no event
    assert Case.objects.get(pk=case.pk).status == "closed"
    events = AuditEvent.objects.filter(case=case, verb="case.status_changed")
    assert [e.data for e in events] == [{"before": "open", "after": "closed"}]


def test_list_cases_filters_and_searches(investigator):
    a = make_case(job_name="llm-405b-7", cluster="c1")
    b = make_case(job_name="mm-70b", cluster="c2", status="closed", assignee=investigator)
    assert {c.pk for c in cases.list_cases()} == {a.pk, b.pk}
    assert [c.pk for c in cases.list_cases(status="closed")] == [b.pk]
    assert [c.pk for c in cases.list_cases(q="405B")] == [a.pk]
    assert [c.pk for c in cases.list_cases(q=f"#{b.pk}")] == [b.pk]
    assert [c.pk for c in cases.list_cases(assignee="alice")] == [b.pk]
    assert [c.pk for c in cases.list_cases(cluster="c1")] == [a.pk]


def test_record_is_callable_by_other_modules_for_their_verbs(investigator):
    case = make_case()
    event = activity.record(investigator, "job.started", case=case, job_id=7, kind="hypothesis_test")
    assert event.verb == "job.started" and event.data == {"job_id": 7, "kind": "hypothesis_test"}
    assert [e.verb for e in activity.case_activity(case)] == ["job.started"]
