"""API tokens for machines that push telemetry (Prometheus remote_write, scrape
relays, log shippers, sacct cron jobs).

A token is shown once, when it is created: ``prc_<prefix>_<secret>``. Only the
SHA-256 of the whole plaintext is stored, plus the short prefix so an admin can
tell tokens apart in a list. The secret carries 256 bits of randomness, so a
plain (unsalted, fast) hash is the right tool: there is nothing to brute-force.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_SCHEME = "prc"
_LAST_USED_RESOLUTION = timedelta(minutes=1)  # one SQLite write per token per minute, not per push


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


class ApiToken(models.Model):
    name = models.CharField(max_length=200)
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


def create_token(name: str, user=None) -> tuple[ApiToken, str]:
    """A new token and its plaintext (the only time the plaintext exists)."""
    if not name.strip():
        raise ValueError("a token needs a name (what pushes with it, e.g. 'prometheus-rack12')")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(name=name.strip(), prefix=prefix, token_hash=hash_token(plaintext), created_by=user)
    return token, plaintext


def authenticate(plaintext: str | None) -> ApiToken | None:
    """The live token for ``plaintext``, or None (unknown, malformed or revoked)."""
    if not plaintext or not plaintext.startswith(f"{TOKEN_SCHEME}_") or len(plaintext) > 200:
        return None
    token = ApiToken.objects.filter(token_hash=hash_token(plaintext), revoked=False).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(prefix: str) -> int:
    return ApiToken.objects.filter(prefix=prefix, revoked=False).update(revoked=True)
