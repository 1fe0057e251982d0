"""Personal workspace API tokens: a script sends ``Authorization: Bearer prc_…`` and acts as the
token's owner with the owner's role, without CSRF. Ingest and API tokens never stand in for each
other; revoked tokens and deactivated owners get 401; the tokens page shows a new token once."""
from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from investigations import tokens
from investigations.models import AuditEvent, Comment, Verdict

from .factories import make_case

pytestmark = pytest.mark.django_db


def bearer(plaintext: str) -> Client:
    """A script's HTTP client: no session cookie, CSRF checks on, the token in every request."""
    return Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def test_an_api_token_acts_as_its_owner_without_csrf(investigator):
    case = make_case()
    _, plaintext = tokens.create_token("notebook", investigator, scope="api")
    c = bearer(plaintext)
    assert c.get(f"/api/cases/{case.pk}").json()["id"] == case.pk
    r = post(c, f"/api/cases/{case.pk}/comments", {"body": "from a notebook"})
    assert r.status_code == 201, r.content
    assert Comment.objects.get().author == investigator
    r = post(c, f"/api/cases/{case.pk}/verdicts", {"kind": "inconclusive", "rationale": "scripted triage"})
    assert r.status_code == 201 and Verdict.objects.get().author == investigator
    assert AuditEvent.objects.filter(actor=investigator, verb="verdict.recorded").exists()
    assert tokens.ApiToken.objects.get().last_used_at is not None


def test_a_viewers_token_reads_but_cannot_write(viewer):
    case = make_case()
    _, plaintext = tokens.create_token("dash", viewer, scope="api")
    c = bearer(plaintext)
    assert c.get("/api/cases").status_code == 200
    r = post(c, f"/api/cases/{case.pk}/verdicts", {"kind": "inconclusive", "rationale": "hm"})
    assert r.status_code == 403 and "investigator role" in r.json()["detail"]
    assert not Verdict.objects.exists()


def test_ingest_and_api_tokens_never_stand_in_for_each_other(investigator, telemetry_store):
    _, ingest = tokens.create_token("prometheus-rack12", investigator)  # scope ingest, creator recorded
    _, api = tokens.create_token("notebook", investigator, scope="api")
    r = bearer(ingest).get("/api/cases")
    assert r.status_code == 401 and "ingest tokens only work on /api/ingest" in r.json()["detail"]
    r = Client(HTTP_AUTHORIZATION=f"Bearer {api}").get("/api/ingest/stats", {"cluster": "c1"})
    assert r.status_code == 401
    assert Client(HTTP_AUTHORIZATION=f"Bearer {ingest}").get("/api/ingest/stats", {"cluster": "c1"}).status_code == 200


@pytest.mark.parametrize("header, reason", [
    ("Bearer prc_deadbeef_not-a-real-token", "unknown"),
    ("bearer prc_deadbeef_not-a-real-token", "unknown"),
    ("Bearer ", "must be 'Bearer <token>'"),
])
def test_a_bad_bearer_token_is_401_not_a_fallback_to_the_session(investigator, header, reason):
    case = make_case()
    c = Client(HTTP_AUTHORIZATION=header)
    c.force_login(investigator)  # a valid session must not rescue a bad token
    r = c.get(f"/api/cases/{case.pk}")
    assert r.status_code == 401 and reason in r.json()["detail"]


@pytest.mark.parametrize("header", ["Basic dXNlcjpwdw==", "Token abc"])
def test_other_authorization_schemes_are_left_to_the_session(investigator, header):
    """A proxy in front of Precursor may do HTTP basic auth: the browser then sends it on
    every request, and the session still decides."""
    case = make_case()
    c = Client(HTTP_AUTHORIZATION=header)
    assert c.get(f"/api/cases/{case.pk}").status_code == 401  # no session: nobody
    c.force_login(investigator)
    assert c.get(f"/api/cases/{case.pk}").json()["id"] == case.pk


def test_revoked_tokens_and_deactivated_owners_get_401(investigator, make_user):
    case = make_case()
    token, plaintext = tokens.create_token("old", investigator, scope="api")
    assert bearer(plaintext).get(f"/api/cases/{case.pk}").status_code == 200
    assert tokens.revoke(token.prefix, owner=investigator) == 1
    assert bearer(plaintext).get(f"/api/cases/{case.pk}").status_code == 401

    bob = make_user("bob", "investigator")
    _, bobs = tokens.create_token("bob's", bob, scope="api")
    bob.is_active = False
    bob.save()
    assert bearer(bobs).get(f"/api/cases/{case.pk}").status_code == 401


def test_a_session_post_without_csrf_is_still_refused(investigator):
    case = make_case()
    c = Client(enforce_csrf_checks=True)
    c.force_login(investigator)
    r = post(c, f"/api/cases/{case.pk}/comments", {"body": "x"})
    assert r.status_code == 403 and not Comment.objects.exists()


def test_create_token_rules():
    with pytest.raises(ValueError, match="acts as a user"):
        tokens.create_token("notebook", None, scope="api")
    with pytest.raises(ValueError, match="unknown token scope"):
        tokens.create_token("x", None, scope="admin")
    with pytest.raises(ValueError, match="needs a name"):
        tokens.create_token("  ", None)
    assert not tokens.ApiToken.objects.exists()


def test_create_token_command_makes_api_tokens_for_a_named_user(investigator, capsys):
    with pytest.raises(CommandError, match="add --user"):
        call_command("create_token", "notebook", "--scope", "api")
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("create_token", "notebook", "--scope", "api", "--user", "nobody")
    call_command("create_token", "notebook", "--scope", "api", "--user", "alice")
    plaintext = capsys.readouterr().out.strip()
    token = tokens.ApiToken.objects.get()
    assert token.scope == "api" and token.created_by == investigator and plaintext.startswith("prc_")
    assert bearer(plaintext).get("/api/cases").status_code == 200


def test_tokens_page_shows_a_new_token_once_and_revokes_only_your_own(alice_client, investigator, make_user):
    page = alice_client.get("/account/tokens")
    assert page.status_code == 200 and "No tokens yet" in page.content.decode()
    r = alice_client.post("/account/tokens/new", {"name": "notebook <b>x</b>"})
    assert r.status_code == 302
    html = alice_client.get("/account/tokens").content.decode()
    token = tokens.ApiToken.objects.get(created_by=investigator)
    plaintext = html.split('<code id="new-token" class="mono">')[1].split("</code>")[0]
    assert plaintext.startswith(f"prc_{token.prefix}_") and tokens.hash_token(plaintext) == token.token_hash
    assert "notebook &lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert plaintext not in alice_client.get("/account/tokens").content.decode()  # shown once
    assert bearer(plaintext).get("/api/cases").status_code == 200

    bob = make_user("bob", "investigator")
    bobs, _ = tokens.create_token("bob's", bob, scope="api")
    r = alice_client.post(f"/account/tokens/{bobs.prefix}/revoke", follow=True)
    assert "you hold no live token" in r.content.decode()
    bobs.refresh_from_db()
    assert not bobs.revoked

    alice_client.post(f"/account/tokens/{token.prefix}/revoke")
    token.refresh_from_db()
    assert token.revoked and bearer(plaintext).get("/api/cases").status_code == 401
    verbs = list(AuditEvent.objects.filter(actor=investigator).values_list("verb", flat=True))
    assert "token.created" in verbs and "token.revoked" in verbs
    assert plaintext not in json.dumps(list(AuditEvent.objects.values_list("data", flat=True)))


def test_tokens_page_rejects_a_blank_name_and_needs_login(alice_client):
    r = alice_client.post("/account/tokens/new", {"name": "   "})
    assert r.status_code == 400 and "needs a name" in r.content.decode()
    assert not tokens.ApiToken.objects.exists()
    anonymous = Client()
    r = anonymous.get("/account/tokens")
    assert r.status_code == 302 and "/login" in r["Location"]
    assert anonymous.post("/account/tokens/new", {"name": "x"}).status_code == 302
    assert not tokens.ApiToken.objects.exists()


def test_openapi_documents_the_bearer_scheme(alice_client):
    spec = alice_client.get("/api/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= schemes["UserTokenAuth"].items()
    assert {"UserTokenAuth": []} in spec["paths"]["/api/cases"]["get"]["security"]
