"""API tokens, in two scopes that never mix:

- ``ingest``: for machines that push telemetry (Prometheus remote_write, scrape relays, log
  shippers, sacct cron jobs) to /api/ingest/*; it acts as nobody.
- ``api``: a person's token for the workspace API (cases, hypotheses, verdicts, comments, jobs)
  from scripts and notebooks; it acts as its owner, with the owner's current role, and stops
  working when the owner is deactivated.

A token is shown once, when it is created: ``prc_<prefix>_<secret>``. Only the
SHA-256 of the whole plaintext is stored, plus the short prefix so an admin can
tell tokens apart in a list. The secret carries 256 bits of randomness, so a
plain (unsalted, fast) hash is the right tool: there is nothing to brute-force.
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_SCHEME = "prc"
_LAST_USED_RESOLUTION = timedelta(minutes=1)  # one SQLite write per token per minute, not per push


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


SCOPES = {"ingest": "ingest (machines pushing telemetry)", "api": "workspace API (acts as its owner)"}


class ApiToken(models.Model):
    name = models.CharField(max_length=200)
    scope = models.CharField(max_length=16, choices=list(SCOPES.items()), default="ingest", db_index=True)
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        app_label = "investigations"
        ordering = ["-created_at"]

    def __str__(self):
        return f"token {self.prefix} ({self.name}{', revoked' if self.revoked else ''})"


def create_token(name: str, user=None, scope: str = "ingest") -> tuple[ApiToken, str]:
    """A new token and its plaintext (the only time the plaintext exists).

    An ``api`` token needs its owner ``user``: it acts as that user."""
    if scope not in SCOPES:
        raise ValueError(f"unknown token scope {scope!r}; choose one of {', '.join(SCOPES)}")
    if not name.strip():
        what = "what pushes with it, e.g. 'prometheus-rack12'" if scope == "ingest" else "where it is used, e.g. 'notebook'"
        raise ValueError(f"a token needs a name ({what})")
    if len(name.strip()) > 200:
        raise ValueError("a token name has at most 200 characters")
    if scope == "api" and user is None:
        raise ValueError("a workspace API token acts as a user: name its owner")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(name=name.strip(), scope=scope, prefix=prefix,
                                    token_hash=hash_token(plaintext), created_by=user)
    return token, plaintext


# Ingest tokens a push authenticated with lately: at fleet rate (~125 remote-write pushes/s per
# process) the ORM look-up and its database connection were ~1/3 of a push's Python time
# (bench ingest-fleet). A live ingest token found in the database is reused for
# INGEST_TOKEN_CACHE_S (settings, default 2 s): a revocation takes effect at once in the process
# that revoked it (``revoke`` clears this) and within that time in the others. Only hits of the
# ``ingest`` scope are kept (an ``api`` token acts as a person, checked every time); misses never.
_ingest_cache: dict[str, tuple[float, "ApiToken"]] = {}
_ingest_cache_lock = threading.Lock()
_INGEST_CACHE_MAX = 10_000


def forget_cached_tokens() -> None:
    with _ingest_cache_lock:
        _ingest_cache.clear()


def authenticate(plaintext: str | None, scope: str = "ingest") -> ApiToken | None:
    """The live token of ``scope`` for ``plaintext``, or None (unknown, malformed, revoked,
    another scope, or an ``api`` token whose owner is gone or deactivated)."""
    if not plaintext or not plaintext.startswith(f"{TOKEN_SCHEME}_") or len(plaintext) > 200:
        return None
    ttl = settings.INGEST_TOKEN_CACHE_S if scope == "ingest" else 0
    if ttl <= 0:
        return _authenticate(plaintext, scope)
    digest = hash_token(plaintext)
    now = time.monotonic()
    hit = _ingest_cache.get(digest)
    if hit is not None and hit[0] > now:
        return hit[1]
    token = _authenticate(plaintext, scope)
    if token is not None:
        with _ingest_cache_lock:
            if len(_ingest_cache) >= _INGEST_CACHE_MAX:
                _ingest_cache.clear()
            _ingest_cache[digest] = (now + ttl, token)
    return token


def _authenticate(plaintext: str, scope: str) -> ApiToken | None:
    token = (ApiToken.objects.select_related("created_by")
             .filter(token_hash=hash_token(plaintext), revoked=False, scope=scope).first())
    if token is None:
        return None
    if scope == "api" and (token.created_by is None or not token.created_by.is_active):
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(prefix: str, owner=None) -> int:
    """Revoke the live token(s) with ``prefix`` (only ``owner``'s when given)."""
    live = ApiToken.objects.filter(prefix=prefix, revoked=False)
    if owner is not None:
        live = live.filter(created_by=owner, scope="api")
    n = live.update(revoked=True)
    forget_cached_tokens()  # revoked here: refused at once in this process (others: INGEST_TOKEN_CACHE_S)
    return n
