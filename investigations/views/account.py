"""A person's own workspace API tokens: list, create (plaintext shown once), revoke; and the
audit log, for admins.

Every signed-in user may hold tokens; a token acts with its owner's current role, so a viewer's
token reads and nothing more. Creation and revocation go to the audit log.
"""
from __future__ import annotations

from zoneinfo import ZoneInfo

from django.contrib import messages
from django.db import transaction
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from investigations import tokens
from investigations.models import AuditEvent, Preference
from investigations.roles import require_admin
from investigations.services import activity
from webapp.middleware import DISPLAY_TZ_SESSION_KEY

MAX_LIVE_TOKENS = 20


def _live(user):
    return tokens.ApiToken.objects.filter(created_by=user, scope="api", revoked=False)


def _page(request, *, new_plaintext=None, error=None, name="", status=200):
    mine = tokens.ApiToken.objects.filter(created_by=request.user, scope="api").order_by("revoked", "-created_at")
    return render(request, "investigations/tokens.html", {
        "tokens": mine[:100], "new_plaintext": new_plaintext, "max_live": MAX_LIVE_TOKENS,
        "error": error, "name": name[:200],
    }, status=status)


def api_tokens(request):
    return _page(request, new_plaintext=request.session.pop("new_api_token", None))


@require_POST
def api_token_create(request):
    name = (request.POST.get("name") or "").strip()
    error = None
    if _live(request.user).count() >= MAX_LIVE_TOKENS:
        error = f"you already hold {MAX_LIVE_TOKENS} live tokens: revoke one you no longer use first"
    else:
        try:
            with transaction.atomic():  # the token and its audit record together, or neither
                token, plaintext = tokens.create_token(name, request.user, scope="api")
                activity.record(request.user, "token.created", prefix=token.prefix, name=token.name, scope="api")
        except ValueError as exc:
            error = str(exc)
    if error:
        return _page(request, error=error, name=name, status=400)
    # Shown once, on the page the redirect lands on (not in the URL, not in a log line).
    request.session["new_api_token"] = plaintext
    return redirect("api-tokens")


@require_POST
def api_token_revoke(request, prefix: str):
    with transaction.atomic():
        revoked = tokens.revoke(prefix, owner=request.user)
        if revoked:
            activity.record(request.user, "token.revoked", prefix=prefix, scope="api")
    if revoked:
        messages.success(request, f"token {prefix} revoked: scripts using it now get 401")
    else:
        messages.error(request, f"you hold no live token {prefix}")
    return redirect("api-tokens")


def audit_page(request):
    """Admins only: the audit log, filtered."""
    require_admin(request.user, "the audit log")
    actor = request.GET.get("actor") or None
    verb = request.GET.get("verb") or None
    q = request.GET.get("q", "")[:200]
    events = activity.audit_log(request.user, actor=actor, verb=verb, q=q, limit=500)
    return render(request, "investigations/audit.html", {
        "events": events, "actor": actor or "", "verb": verb or "", "q": q, "nav": "audit",
        "verbs": list(AuditEvent.objects.order_by("verb").values_list("verb", flat=True).distinct()),
    })


@require_POST
def set_display_tz(request):
    """The top bar's time-zone selector: an IANA name (America/Los_Angeles) or UTC, saved to the
    person's account (their next sessions start with it) and this session; an unknown name is
    refused with a message and changes nothing."""
    name = request.POST.get("tz", "").strip()[:64]
    try:
        ZoneInfo(name)
        if not name or name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
    except (ValueError, LookupError):
        messages.error(request, f"Unknown time zone {name!r}: use an IANA name such as UTC or America/Los_Angeles.")
    else:
        request.session[DISPLAY_TZ_SESSION_KEY] = name
        Preference.objects.update_or_create(user=request.user, defaults={"display_tz": name})
        messages.info(request, f"Times are shown in {name}.")
    back = request.POST.get("next", "")
    return redirect(back if url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}) else "inbox")
