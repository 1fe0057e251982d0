"""Login throttling (django-axes, audited), production settings from PRECURSOR_HTTPS,
`check --deploy` clean under the production variables, the Content-Security-Policy
header, /api/docs without a CDN, and 401 for anonymous API writes (issue 12)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.test import Client

from investigations.models import AuditEvent
from tests.webapp.test_serve import REPO

pytestmark = pytest.mark.django_db


def _login(client, username, password):
    return client.post("/login/", {"username": username, "password": password, "next": "/"})


def test_repeated_wrong_passwords_lock_the_account_with_a_clear_message_and_the_audit_log_says_so(
        investigator, settings):
    client = Client(REMOTE_ADDR="10.1.2.3")
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        response = _login(client, "alice", "wrong-password")
        assert response.status_code == 200 and "did not match" in response.content.decode()
    locked = _login(client, "alice", "wrong-password")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed logins" in page and f"after {limit} wrong passwords" in page
    assert "try again in 15 minutes" in page
    # Locked: the right password is refused too, and no session is made.
    right = _login(client, "alice", "correct-horse-1")
    assert right.status_code == 429 and "_auth_user_id" not in client.session
    failed = AuditEvent.objects.filter(verb="auth.login_failed")
    assert failed.count() >= limit and {e.data["username"] for e in failed} == {"alice"}
    assert all(e.data["address"] == "10.1.2.3" and "password" not in e.data for e in failed)
    # One record when the lock begins and one for each attempt it refuses (the right password here).
    locks = AuditEvent.objects.filter(verb="auth.locked_out")
    assert locks.count() == 2 and all(e.data == {"username": "alice", "address": "10.1.2.3"} for e in locks)
    # Another address is not locked out by this one's failures.
    other = Client(REMOTE_ADDR="10.9.9.9")
    assert _login(other, "alice", "correct-horse-1").status_code == 302
    # An admin lifts the lock.
    call_command("axes_reset_username", "alice", verbosity=0)
    assert _login(client, "alice", "correct-horse-1").status_code == 302


def test_a_successful_login_clears_earlier_failures(investigator, settings):
    client = Client(REMOTE_ADDR="10.1.2.4")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _login(client, "alice", "wrong-password")
    assert _login(client, "alice", "correct-horse-1").status_code == 302
    client.post("/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, "alice", "wrong-password").status_code == 200
    assert _login(client, "alice", "correct-horse-1").status_code == 302


def _production_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env.update({
        "DATABASE_URL": "postgres://precursor:pw@db.internal:5432/precursor",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "precursor.example.org",
        "PRECURSOR_HTTPS": "true",
        "PRECURSOR_DATA_DIR": os.environ["PRECURSOR_DATA_DIR"],
    })
    env.update(extra)
    return env


def _check_deploy(env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_under_the_production_variables():
    out = _check_deploy(_production_env())
    assert out.returncode == 0, out.stderr
    assert "System check identified no issues (0 silenced)." in out.stdout
    assert "WARNING" not in (out.stdout + out.stderr).upper(), out.stdout + out.stderr


@pytest.mark.slow
def test_check_deploy_names_what_is_missing_without_https():
    out = _check_deploy(_production_env(PRECURSOR_HTTPS="false"))
    text = out.stdout + out.stderr
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in text, text


def _settings_under(**env) -> dict:
    code = ("import django, json; django.setup(); from django.conf import settings as s; "
            "print(json.dumps({k: getattr(s, k, None) for k in ('SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
            "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
            "'SECURE_PROXY_SSL_HEADER', 'SECURE_REDIRECT_EXEMPT')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**_production_env(**env), "DJANGO_SETTINGS_MODULE": "webapp.settings"})
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout)


@pytest.mark.slow
def test_precursor_https_turns_on_hsts_the_redirect_and_secure_cookies():
    on = _settings_under()
    assert on["SECURE_SSL_REDIRECT"] is True and on["SECURE_HSTS_SECONDS"] == 31_536_000
    assert on["SESSION_COOKIE_SECURE"] is True and on["CSRF_COOKIE_SECURE"] is True
    assert on["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert on["SECURE_REDIRECT_EXEMPT"] == ["^healthz$"]
    off = _settings_under(PRECURSOR_HTTPS="")
    assert not off["SECURE_SSL_REDIRECT"] and not off["SECURE_HSTS_SECONDS"]
    assert not off["SESSION_COOKIE_SECURE"] and not off["CSRF_COOKIE_SECURE"]


@pytest.mark.slow
def test_a_bad_precursor_https_value_stops_start_up_naming_it():
    out = _check_deploy(_production_env(PRECURSOR_HTTPS="maybe"))
    assert out.returncode != 0 and "PRECURSOR_HTTPS" in out.stderr


def test_https_answers_redirect_plain_http_and_carry_hsts(settings, investigator):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    client = Client()
    plain = client.get("/login/")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/login/"
    secure = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert client.get("/healthz").status_code != 301  # load balancers probe over plain HTTP


def test_every_page_carries_a_content_security_policy_without_third_party_sources(alice_client):
    for path in ("/login/", "/board/", "/api/docs"):
        response = alice_client.get(path)
        policy = response["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert "http" not in policy and "unsafe-eval" not in policy


def test_api_docs_load_swagger_ui_from_our_own_static_files(alice_client):
    page = alice_client.get("/api/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page and "/static/ninja/swagger-ui.css" in page
    assert "cdn" not in page.lower() and "https://" not in page


@pytest.mark.parametrize("method, path, body", [
    ("post", "/api/cases", {"cluster": "c", "job_id": "1"}),
    ("post", "/api/hypotheses", {"statement": "x"}),
    ("post", "/api/exports", {"kinds": ["confirmed"]}),
    ("patch", "/api/cases/1", {"status": "closed"}),
    ("post", "/api/jobs/1/cancel", None),
])
def test_anonymous_api_writes_get_401_not_a_csrf_403(client, method, path, body):
    import json

    response = getattr(client, method)(path, data=json.dumps(body) if body else None, content_type="application/json")
    assert response.status_code == 401, (path, response.status_code, response.content)


def test_a_logged_in_browser_session_still_needs_its_csrf_token(investigator):
    import json

    client = Client(enforce_csrf_checks=True)
    client.force_login(investigator)
    response = client.post("/api/hypotheses", data=json.dumps({"statement": "x"}), content_type="application/json")
    assert response.status_code == 403


def test_only_the_case_page_lets_plotlys_webgl_engine_compile_and_still_runs_no_inline_script(alice_client):
    from tests.investigations.factories import make_case

    case = make_case()
    policy = alice_client.get(f"/cases/{case.pk}/")["Content-Security-Policy"]
    assert "script-src 'self' 'unsafe-eval';" in policy and "unsafe-inline'; img-src" in policy
    assert "unsafe-eval" not in alice_client.get("/board/")["Content-Security-Policy"]
