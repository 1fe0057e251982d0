"""Failed logins and lockouts in the audit log.

django-axes counts the failures and locks the (username, address) pair out; the
audit log keeps the story an admin reads: who was tried, from where, and when a
lockout began. The password is never recorded.
"""
from __future__ import annotations

from investigations.services import activity

USERNAME_MAX = 150


def _client(request) -> str:
    if request is None:
        return ""
    return (getattr(request, "axes_ip_address", None) or request.META.get("REMOTE_ADDR") or "")[:64]


def _username(credentials: dict | None) -> str:
    return str((credentials or {}).get("username") or "")[:USERNAME_MAX]


def login_failed(sender, credentials=None, request=None, **kwargs):
    activity.record(None, "auth.login_failed", username=_username(credentials), address=_client(request))


def locked_out(sender, request=None, username=None, ip_address=None, **kwargs):
    activity.record(None, "auth.locked_out", username=str(username or "")[:USERNAME_MAX],
                    address=str(ip_address or _client(request))[:64])


def connect() -> None:
    from axes.signals import user_locked_out
    from django.contrib.auth.signals import user_login_failed

    user_login_failed.connect(login_failed, dispatch_uid="precursor.audit.login_failed")
    user_locked_out.connect(locked_out, dispatch_uid="precursor.audit.locked_out")
