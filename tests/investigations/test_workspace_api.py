"""The workspace API over HTTP: auth (401 anonymous, 403 viewers, CSRF on session POSTs),
bad input as 400 naming the field, verbatim text, verdict history, audit rows for every verb."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from investigations.models import AuditEvent, Case, Hypothesis, Verdict

from .factories import make_case, make_hypothesis, write_job

pytestmark = pytest.mark.django_db

SIGNAL = {"statement": "PCIe replays precede XID 79", "metric": "gpu.pcie.replay", "component_scope": "gpu",
          "condition": "rate", "operator": ">", "threshold": 5, "lead_window_s": 21600, "outcome": "XID 79"}


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def viewer_client(viewer):
    c = Client()
    c.force_login(viewer)
    return c


@pytest.fixture
def admin_client(admin_user):
    c = Client()
    c.force_login(admin_user)
    return c


def test_anonymous_requests_get_401(client):
    case = make_case()
    assert client.get("/api/cases").status_code == 401
    assert client.get(f"/api/cases/{case.pk}").status_code == 401
    assert client.get("/api/hypotheses").status_code == 401
    assert post(client, f"/api/cases/{case.pk}/verdicts", {"kind": "inconclusive", "rationale": "x"}).status_code == 401
    assert not Verdict.objects.exists()


def test_a_viewer_reads_but_cannot_record_verdicts(viewer_client):
    case = make_case()
    assert viewer_client.get(f"/api/cases/{case.pk}").json()["id"] == case.pk
    r = post(viewer_client, f"/api/cases/{case.pk}/verdicts", {"kind": "inconclusive", "rationale": "hm"})
    assert r.status_code == 403 and "investigator role" in r.json()["detail"]
    assert post(viewer_client, "/api/hypotheses", SIGNAL).status_code == 403
    assert post(viewer_client, f"/api/cases/{case.pk}/comments", {"body": "x"}).status_code == 403
    assert not Verdict.objects.exists() and not Hypothesis.objects.exists()


def test_csrf_is_enforced_for_session_authenticated_posts(investigator):
    case = make_case()
    c = Client(enforce_csrf_checks=True)
    c.force_login(investigator)
    body = {"kind": "inconclusive", "rationale": "no telemetry"}
    r = post(c, f"/api/cases/{case.pk}/verdicts", body)
    assert r.status_code == 403 and "CSRF" in r.content.decode()
    assert not Verdict.objects.exists()
    c.get("/login/")  # sets the csrftoken cookie
    token = c.cookies["csrftoken"].value
    r = c.post(f"/api/cases/{case.pk}/verdicts", json.dumps(body), content_type="application/json",
               headers={"X-CSRFToken": token})
    assert r.status_code == 201, r.content
    assert Verdict.objects.count() == 1


def test_open_case_through_the_api(alice_client, clean_store):
    write_job("c9", "5001", state="FAILED", hosts=("h1", "h2"))
    r = post(alice_client, "/api/cases", {"cluster": "c9", "job_id": "5001"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["cluster"], body["job_id"], body["state"], body["hosts"]) == ("c9", "5001", "FAILED", ["h1", "h2"])
    assert body["url"] == f"/cases/{body['id']}/" and body["current_verdict"] is None
    again = post(alice_client, "/api/cases", {"cluster": "c9", "job_id": "5001"})
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    missing = post(alice_client, "/api/cases", {"cluster": "c9", "job_id": "nope"})
    assert missing.status_code == 404 and "not a known interruption" in missing.json()["detail"]


def test_markup_in_statements_is_stored_verbatim_and_returned_as_data(alice_client):
    text = '<img src=x onerror="alert(1)"> replays & <b>XID</b>'
    r = post(alice_client, "/api/hypotheses", {**SIGNAL, "statement": text})
    assert r.status_code == 201, r.content
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["statement"] == text
    assert Hypothesis.objects.get(pk=r.json()["id"]).statement == text
    assert alice_client.get(f"/api/hypotheses/{r.json()['id']}").json()["statement"] == text


def test_an_unknown_metric_is_rejected_with_400_naming_it(alice_client):
    r = post(alice_client, "/api/hypotheses", {**SIGNAL, "metric": "gpu.bogus_rate"})
    assert r.status_code == 400
    assert "gpu.bogus_rate" in r.json()["detail"] and "metric" in r.json()["detail"]
    assert not Hypothesis.objects.exists()


def test_pin_to_a_case_link_and_board(alice_client, investigator):
    case, other = make_case(), make_case()
    r = post(alice_client, f"/api/cases/{case.pk}/hypotheses", {**SIGNAL, "note": "gpu3 on n0412"})
    assert r.status_code == 201, r.content
    h = r.json()
    assert h["short_id"] == f"H{h['id']}" and h["case_ids"] == [case.pk] and h["status"] == "proposed"
    assert h["track_record"]["linked"] == 1 and h["track_record"]["precision"] is None
    link = post(alice_client, f"/api/cases/{other.pk}/hypotheses/{h['id']}", {"note": "same again"})
    assert link.status_code == 201 and link.json()["pinned_by"] == "alice"
    assert [x["id"] for x in alice_client.get(f"/api/cases/{other.pk}/hypotheses").json()] == [h["id"]]
    assert {c["id"] for c in alice_client.get(f"/api/hypotheses/{h['id']}/cases").json()} == {case.pk, other.pk}
    board = alice_client.get("/api/hypotheses", {"q": "replays", "status": "proposed"}).json()
    assert [row["id"] for row in board] == [h["id"]] and board[0]["track_record"]["linked"] == 2
    assert alice_client.get("/api/hypotheses", {"status": "confirmed"}).json() == []
    bad = alice_client.get("/api/hypotheses", {"sort": "nonsense"})
    assert bad.status_code == 400 and "sort" in bad.json()["detail"]
    moved = post(alice_client, f"/api/hypotheses/{h['id']}/status", {"status": "testing"})
    assert moved.status_code == 200 and moved.json()["status"] == "testing"
    assert post(alice_client, f"/api/hypotheses/{h['id']}/status", {"status": "proposed!"}).status_code == 400


def test_verdict_history_is_kept_over_the_api(alice_client, investigator):
    case = make_case()
    h = make_hypothesis(investigator, cases=[case])
    url = f"/api/cases/{case.pk}/verdicts"
    first = post(alice_client, url, {"kind": "false_positive", "rationale": "firmware noise"})
    second = post(alice_client, url, {"kind": "confirmed", "hypothesis_id": h.pk, "rationale": "replays led by 6 h"})
    assert first.status_code == second.status_code == 201
    history = alice_client.get(url).json()
    assert [v["kind"] for v in history] == ["confirmed", "false_positive"]
    assert Verdict.objects.filter(case=case).count() == 2
    assert alice_client.get(f"/api/cases/{case.pk}").json()["current_verdict"]["id"] == second.json()["id"]
    empty = post(alice_client, url, {"kind": "inconclusive", "rationale": " "})
    assert empty.status_code == 400 and "rationale: required" in empty.json()["detail"]
    record = alice_client.get(f"/api/hypotheses/{h.pk}").json()["track_record"]
    assert (record["confirmed"], record["false_positive"]) == (1, 0)


def test_precision_interval_narrows_over_the_api(alice_client, investigator):
    h = make_hypothesis(investigator)
    widths = []
    for i in range(8):
        case = make_case()
        post(alice_client, f"/api/cases/{case.pk}/hypotheses/{h.pk}", {})
        kind = "false_positive" if i % 4 == 3 else "confirmed"
        body = {"kind": kind, "rationale": f"case {i}", **({"hypothesis_id": h.pk} if kind == "confirmed" else {})}
        assert post(alice_client, f"/api/cases/{case.pk}/verdicts", body).status_code == 201
        rec = alice_client.get(f"/api/hypotheses/{h.pk}").json()["track_record"]
        widths.append(rec["ci_high"] - rec["ci_low"])
    assert widths[-1] < widths[3] < widths[0]


def test_every_verb_writes_an_audit_row_and_only_admins_read_the_log(alice_client, admin_client, viewer_client,
                                                                       clean_store, make_user):
    make_user("bob")
    write_job("c9", "5002", hosts=("h1",))
    case_id = post(alice_client, "/api/cases", {"cluster": "c9", "job_id": "5002"}).json()["id"]
    patched = alice_client.patch(f"/api/cases/{case_id}", json.dumps({"assignee": "bob"}), content_type="application/json")
    assert patched.status_code == 200 and patched.json()["assignee"] == "bob"
    alice_client.patch(f"/api/cases/{case_id}", json.dumps({"status": "closed"}), content_type="application/json")
    hid = post(alice_client, f"/api/cases/{case_id}/hypotheses", SIGNAL).json()["id"]
    post(alice_client, f"/api/hypotheses/{hid}/status", {"status": "testing"})
    post(alice_client, f"/api/cases/{case_id}/verdicts", {"kind": "confirmed", "hypothesis_id": hid, "rationale": "r"})
    post(alice_client, f"/api/cases/{case_id}/comments", {"body": "nice"})
    post(alice_client, f"/api/hypotheses/{hid}/comments", {"body": "agreed"})
    expected = ["case.opened", "case.assigned", "case.status_changed", "hypothesis.created", "hypothesis.pinned",
                "hypothesis.status_changed", "verdict.recorded", "comment.added", "comment.added"]
    assert list(AuditEvent.objects.order_by("pk").values_list("verb", flat=True)) == expected
    assert set(AuditEvent.objects.values_list("actor__username", flat=True)) == {"alice"}
    timeline = alice_client.get(f"/api/cases/{case_id}/activity").json()
    # The case's own events and its pinned hypothesis's status change; not the hypothesis's comment.
    assert [e["verb"] for e in timeline] == expected[:8]
    assert timeline[0]["actor"] == "alice"
    log = admin_client.get("/api/audit", {"verb": "comment."})
    assert log.status_code == 200 and [e["verb"] for e in log.json()] == ["comment.added"] * 2
    assert alice_client.get("/api/audit").status_code == 403
    assert viewer_client.get("/api/audit").status_code == 403
    comments = alice_client.get(f"/api/hypotheses/{hid}/comments").json()
    assert [(c["author"], c["body"]) for c in comments] == [("alice", "agreed")]
    assert Case.objects.get(pk=case_id).status == "closed"


def test_openapi_lists_the_workspace_routes(alice_client):
    paths = alice_client.get("/api/openapi.json").json()["paths"]
    for path in ("/api/cases", "/api/cases/{case_id}/verdicts", "/api/hypotheses", "/api/cases/{case_id}/comments",
                 "/api/audit"):
        assert path in paths


def test_listing_cases_and_the_board_takes_a_bounded_number_of_queries(alice_client, investigator,
                                                                        django_assert_max_num_queries):
    from .factories import make_verdict

    for _ in range(12):
        case = make_case()
        h = make_hypothesis(investigator, cases=[case])
        make_verdict(case, "confirmed", hypothesis=h)
    with django_assert_max_num_queries(12):
        cases = alice_client.get("/api/cases").json()
    assert len(cases) == 12 and all(c["current_verdict"]["kind"] == "confirmed" for c in cases)
    with django_assert_max_num_queries(15):
        board = alice_client.get("/api/hypotheses").json()
    assert len(board) == 12 and all(row["track_record"]["confirmed"] == 1 for row in board)
