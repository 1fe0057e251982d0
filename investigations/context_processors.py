"""Template context for every page: the signed-in user's role (evaluated only when a template
asks, so pages that never look at it cost no query)."""
from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from investigations.roles import role_of


def roles(request):
    return {"user_role": SimpleLazyObject(lambda: role_of(request.user) or "")}
