"""Comments on a case or on a hypothesis (exactly one). Bodies are stored verbatim and
escaped where shown."""
from __future__ import annotations

from django.db import transaction

from investigations.models import Case, Comment, Hypothesis
from investigations.services import activity
from investigations.roles import require_investigator

MAX_BODY = 10000


@transaction.atomic
def add_comment(user, *, case: Case | None = None, hypothesis: Hypothesis | None = None, body: str) -> Comment:
    require_investigator(user, "commenting")
    if (case is None) == (hypothesis is None):
        raise ValueError("a comment belongs to exactly one case or one hypothesis")
    body = (body or "").strip()
    if not body:
        raise ValueError("body: a comment cannot be empty")
    if len(body) > MAX_BODY:
        raise ValueError(f"body: at most {MAX_BODY} characters (got {len(body)})")
    comment = Comment.objects.create(case=case, hypothesis=hypothesis, author=user, body=body)
    activity.record(user, "comment.added", case=case, hypothesis=hypothesis, comment_id=comment.pk)
    (case or hypothesis).save(update_fields=["updated_at"])
    return comment


def comments_on(*, case: Case | None = None, hypothesis: Hypothesis | None = None) -> list[Comment]:
    """Oldest first, as a conversation reads."""
    if (case is None) == (hypothesis is None):
        raise ValueError("give exactly one of case or hypothesis")
    qs = Comment.objects.filter(case=case) if case is not None else Comment.objects.filter(hypothesis=hypothesis)
    return list(qs.select_related("author").order_by("created_at", "pk"))
