"""Roles: viewer (reads), investigator (opens cases, pins hypotheses, records verdicts, runs jobs),
admin (everything, plus the audit log and user management). Stored as Django groups."""
from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied

ROLES = ("viewer", "investigator", "admin")


def set_role(user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    groups = [Group.objects.get_or_create(name=name)[0] for name in ROLES]
    user.groups.remove(*groups)
    user.groups.add(Group.objects.get(name=role))
    user.is_staff = role == "admin"
    user.is_superuser = role == "admin"
    user.save(update_fields=["is_staff", "is_superuser"])


def role_of(user) -> str | None:
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return "admin"
    names = set(user.groups.values_list("name", flat=True))
    for role in reversed(ROLES):
        if role in names:
            return role
    return None


def can_investigate(user) -> bool:
    return role_of(user) in ("investigator", "admin")


def is_admin(user) -> bool:
    return role_of(user) == "admin"


def require_investigator(user, what: str) -> None:
    """The one role check before a change: viewers read, investigators and admins change things.
    Pages, the API and every service verb call it (PermissionDenied -> HTTP 403)."""
    if user is None or not getattr(user, "is_authenticated", False):
        raise PermissionDenied(f"{what} needs a logged-in user")
    if not can_investigate(user):
        raise PermissionDenied(f"{what} needs the investigator role")


def require_admin(user, what: str) -> None:
    if not is_admin(user):
        raise PermissionDenied(f"{what} needs the admin role")
