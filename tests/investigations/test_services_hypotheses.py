"""Hypotheses: validated signal fields (catalog metrics only), pinning and linking to cases,
status moves, comments, the board's search/filter/sort — each verb audited."""
from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from investigations.models import AuditEvent, CaseHypothesis, Comment, Hypothesis
from investigations.services import activity, board, comments, hypotheses

from .factories import make_case, make_hypothesis, make_verdict

pytestmark = pytest.mark.django_db

SIGNAL = {"statement": "PCIe replays precede XID 79", "metric": "gpu.pcie.replay", "component_scope": "gpu",
          "condition": "rate", "operator": ">", "threshold": 5, "lead_window_s": 21600, "outcome": "XID 79"}


def test_pin_from_a_case_creates_links_and_audits(investigator):
    case = make_case()
    h = hypotheses.pin_hypothesis(investigator, case=case, note="replays climb on gpu3", **SIGNAL)
    assert (h.metric, h.component_scope, h.condition, h.operator, h.threshold, h.lead_window_s, h.outcome) == (
        "gpu.pcie.replay", "gpu", "rate", ">", 5.0, 21600, "XID 79")
    assert h.status == "proposed" and h.author == investigator and h.short_id == f"H{h.pk}"
    assert h.get_absolute_url() == f"/hypotheses/{h.pk}/"
    assert list(case.hypotheses.all()) == [h]
    assert CaseHypothesis.objects.get(case=case, hypothesis=h).note == "replays climb on gpu3"
    verbs = list(AuditEvent.objects.order_by("pk").values_list("verb", "case_id", "hypothesis_id"))
    assert verbs == [("hypothesis.created", case.pk, h.pk), ("hypothesis.pinned", case.pk, h.pk)]
    assert h.signal_text == "gpu.pcie.replay rate > 5 on gpu, 6h before"


def test_markup_in_a_statement_is_stored_verbatim(investigator):
    text = '<script>alert("x")</script> & <b>bold</b>'
    h = hypotheses.pin_hypothesis(investigator, **{**SIGNAL, "statement": text})
    assert Hypothesis.objects.get(pk=h.pk).statement == text


def test_an_alias_is_stored_as_the_canonical_metric(investigator):
    h = hypotheses.pin_hypothesis(investigator, **{**SIGNAL, "metric": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"})
    assert h.metric == "gpu.pcie.replay"


@pytest.mark.parametrize("field, value, message", [
    ("metric", "gpu.made_up_metric", "metric: unknown metric 'gpu.made_up_metric'"),
    ("metric", "", "metric: unknown metric ''"),
    ("statement", "   ", "statement: required"),
    ("component_scope", "rack", "component_scope: 'rack' is not one of"),
    ("condition", "spike", "condition: 'spike' is not one of"),
    ("operator", ">=", "operator: '>=' is not one of"),
    ("threshold", float("nan"), "threshold: nan must be a finite number"),
    ("threshold", "many", "threshold: 'many' is not a number"),
    ("lead_window_s", 0, "lead_window_s: 0 must be between"),
    ("lead_window_s", 1.5, "lead_window_s: 1.5 is not a whole number"),
    ("outcome", "", "outcome: required"),
])
def test_bad_signal_fields_are_rejected_naming_the_field(investigator, field, value, message):
    with pytest.raises(ValueError) as info:
        hypotheses.pin_hypothesis(investigator, **{**SIGNAL, field: value})
    assert message in str(info.value)
    assert not Hypothesis.objects.exists() and not AuditEvent.objects.exists()


def test_a_viewer_cannot_pin_link_move_or_comment(viewer, investigator):
    case, h = make_case(), make_hypothesis(investigator)
    for call in (lambda: hypotheses.pin_hypothesis(viewer, **SIGNAL),
                 lambda: hypotheses.link_hypothesis(viewer, h, case),
                 lambda: hypotheses.set_status(viewer, h, "testing"),
                 lambda: comments.add_comment(viewer, hypothesis=h, body="hm")):
        with pytest.raises(PermissionDenied, match="investigator role"):
            call()
    assert Hypothesis.objects.count() == 1 and not CaseHypothesis.objects.exists() and not Comment.objects.exists()


def test_one_hypothesis_links_to_many_cases_once_each(investigator):
    h = make_hypothesis(investigator)
    a, b = make_case(), make_case()
    first = hypotheses.link_hypothesis(investigator, h, a, note="same pattern")
    again = hypotheses.link_hypothesis(investigator, h, a)
    hypotheses.link_hypothesis(investigator, h, b)
    assert first.pk == again.pk
    assert set(h.cases.all()) == {a, b}
    assert AuditEvent.objects.filter(verb="hypothesis.pinned", hypothesis=h).count() == 2


def test_status_moves_along_the_allowed_path(investigator):
    h = make_hypothesis(investigator)
    with pytest.raises(ValueError, match=f"H{h.pk} is proposed; it can move to testing or rejected, not confirmed"):
        hypotheses.set_status(investigator, h, "confirmed")
    with pytest.raises(ValueError, match="'maybe' is not a hypothesis status"):
        hypotheses.set_status(investigator, h, "maybe")
    hypotheses.set_status(investigator, h, "testing")
    hypotheses.set_status(investigator, h, "confirmed")
    assert Hypothesis.objects.get(pk=h.pk).status == "confirmed"
    assert [(e.data["before"], e.data["after"]) for e in activity.hypothesis_activity(h)] == [
        ("proposed", "testing"), ("testing", "confirmed")]


def test_comments_on_cases_and_hypotheses(investigator):
    case, h = make_case(), make_hypothesis(investigator)
    c1 = comments.add_comment(investigator, case=case, body="  <i>link flaps</i> first  ")
    c2 = comments.add_comment(investigator, hypothesis=h, body="seen on 3 clusters")
    assert c1.body == "<i>link flaps</i> first"
    assert comments.comments_on(case=case) == [c1] and comments.comments_on(hypothesis=h) == [c2]
    with pytest.raises(ValueError, match="exactly one case or one hypothesis"):
        comments.add_comment(investigator, case=case, hypothesis=h, body="x")
    with pytest.raises(ValueError, match="body: a comment cannot be empty"):
        comments.add_comment(investigator, case=case, body=" ")
    assert [(e.verb, e.case_id, e.hypothesis_id) for e in AuditEvent.objects.order_by("pk")] == [
        ("comment.added", case.pk, None), ("comment.added", None, h.pk)]


def test_board_search_filters_and_sorts(investigator, make_user):
    bob = make_user("bob")
    h1 = make_hypothesis(investigator, statement="ECC SBE accumulate before XID 48", outcome="XID 48")
    h2 = make_hypothesis(bob, statement="Link flaps precede NCCL timeouts", outcome="NCCL timeout",
                         component_scope="nic", status="testing")
    c1, c2, c3 = make_case(), make_case(), make_case()
    hypotheses.link_hypothesis(investigator, h2, c1)
    hypotheses.link_hypothesis(investigator, h2, c2)
    hypotheses.link_hypothesis(investigator, h1, c3)
    make_verdict(c1, "confirmed", hypothesis=h2)
    make_verdict(c2, "false_positive")
    rows = board.board_rows()
    assert {r.hypothesis.pk for r in rows} == {h1.pk, h2.pk}
    row2 = next(r for r in rows if r.hypothesis == h2)
    assert (row2.supporting, row2.contradicting, row2.n_cases, row2.author) == (1, 1, 2, "bob")
    assert [r.hypothesis.pk for r in board.board_rows(q="nccl")] == [h2.pk]
    assert [r.hypothesis.pk for r in board.board_rows(q=f"H{h1.pk}")] == [h1.pk]
    assert [r.hypothesis.pk for r in board.board_rows(status="testing")] == [h2.pk]
    assert [r.hypothesis.pk for r in board.board_rows(author="alice")] == [h1.pk]
    assert [r.hypothesis.pk for r in board.board_rows(component_scope="nic")] == [h2.pk]
    assert [r.hypothesis.pk for r in board.board_rows(sort="-n_cases")] == [h2.pk, h1.pk]
    assert [r.hypothesis.pk for r in board.board_rows(sort="n_cases")] == [h1.pk, h2.pk]
    assert [r.hypothesis.pk for r in board.board_rows(sort="-precision")] == [h2.pk, h1.pk]
    with pytest.raises(ValueError, match="sort: 'colour' is not a column"):
        board.board_rows(sort="colour")


def test_status_changes_of_a_pinned_hypothesis_show_on_each_case_timeline(investigator):
    first, second, elsewhere = make_case(), make_case(), make_case()
    h = hypotheses.pin_hypothesis(investigator, case=first, **SIGNAL)
    hypotheses.link_hypothesis(investigator, h, second)
    other = hypotheses.pin_hypothesis(investigator, case=elsewhere, **{**SIGNAL, "statement": "another idea"})
    hypotheses.set_status(investigator, h, "testing")
    hypotheses.set_status(investigator, other, "rejected")
    for case in (first, second):
        timeline = [(e.verb, e.hypothesis_id, e.data.get("after")) for e in activity.case_activity(case)]
        assert timeline[-1] == ("hypothesis.status_changed", h.pk, "testing")
        assert ("hypothesis.status_changed", other.pk, "rejected") not in timeline
    assert [e.verb for e in activity.case_activity(elsewhere)][-1] == "hypothesis.status_changed"
