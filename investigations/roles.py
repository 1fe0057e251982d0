"""Roles: viewer (reads), investigator (opens cases, pins hypotheses, records verdicts, runs jobs),
admin (everything, plus the audit log and user management). Stored as Django groups."""
from __future__ import annotations

from django.contrib.auth.models import Group

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
