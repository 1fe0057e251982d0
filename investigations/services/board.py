"""The team's hypothesis board: every hypothesis with its status, supporting and
contradicting cases, track record, author and last activity; searchable, filterable,
sortable by each column."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from investigations.models import Hypothesis
from telemetry.rules import COMPONENT_SCOPES
from investigations.services.hypotheses import STATUSES
from investigations.services.records import TrackRecord, track_records


@dataclass(frozen=True)
class BoardRow:
    hypothesis: Hypothesis
    record: TrackRecord
    n_cases: int
    author: str
    last_activity: datetime

    @property
    def supporting(self) -> int:
        return self.record.confirmed

    @property
    def contradicting(self) -> int:
        return self.record.false_positive


def _latest_test_time(row: BoardRow):
    test = row.record.latest_test
    return test["finished_at"].timestamp() if test and test.get("finished_at") else float("-inf")


def _none_last(value):
    return float("-inf") if value is None else value


# Sort keys: column name; "-" prefix = descending. A missing value (no verdicts, no test) counts as lowest.
SORTS = {
    "id": lambda r: r.hypothesis.pk,
    "statement": lambda r: r.hypothesis.statement.lower(),
    "metric": lambda r: r.hypothesis.metric,
    "component_scope": lambda r: r.hypothesis.component_scope,
    "lead_window_s": lambda r: r.hypothesis.lead_window_s,
    "outcome": lambda r: r.hypothesis.outcome.lower(),
    "status": lambda r: STATUSES.index(r.hypothesis.status),
    "confirmed": lambda r: r.record.confirmed,
    "false_positive": lambda r: r.record.false_positive,
    "n_cases": lambda r: r.n_cases,
    "precision": lambda r: _none_last(r.record.precision),
    "latest_test": _latest_test_time,
    "lift": lambda r: _none_last((r.record.latest_test or {}).get("lift")),
    "author": lambda r: r.author.lower(),
    "created_at": lambda r: r.hypothesis.created_at,
    "updated_at": lambda r: r.last_activity,
}


def board_rows(*, q: str = "", status: str | None = None, author=None, metric: str | None = None,
               component_scope: str | None = None, sort: str = "-updated_at") -> list[BoardRow]:
    """Rows of the board. ``q`` matches 'H12', the statement, metric or outcome (case-insensitive);
    ``author`` is a user or a username; ``sort`` is a key of SORTS, '-' for descending."""
    key = sort.lstrip("-")
    if key not in SORTS:
        raise ValueError(f"sort: {sort!r} is not a column; choose one of {', '.join(sorted(SORTS))} (prefix - to reverse)")
    if status and status not in STATUSES:
        raise ValueError(f"status: {status!r} is not a hypothesis status; choose one of {', '.join(STATUSES)}")
    if component_scope and component_scope not in COMPONENT_SCOPES:
        raise ValueError(f"component_scope: {component_scope!r} is not one of {', '.join(COMPONENT_SCOPES)}")
    qs = Hypothesis.objects.select_related("author").prefetch_related("pins")
    if status:
        qs = qs.filter(status=status)
    if author:
        qs = qs.filter(author__username=author) if isinstance(author, str) else qs.filter(author=author)
    if metric:
        qs = qs.filter(metric=metric)
    if component_scope:
        qs = qs.filter(component_scope=component_scope)
    q = (q or "").strip()
    if q:
        cond = Q(statement__icontains=q) | Q(metric__icontains=q) | Q(outcome__icontains=q)
        if q[:1] in "Hh" and q[1:].isdigit():
            cond |= Q(pk=int(q[1:]))
        elif q.isdigit():
            cond |= Q(pk=int(q))
        qs = qs.filter(cond)
    hypotheses = list(qs)
    records = track_records(hypotheses)
    rows = [BoardRow(hypothesis=h, record=records[h.pk], n_cases=records[h.pk].linked,
                     author=h.author.get_username() if h.author_id else "", last_activity=h.updated_at)
            for h in hypotheses]
    descending = sort.startswith("-")
    rows.sort(key=lambda r: r.hypothesis.pk, reverse=True)  # stable tie-break: newest id first
    rows.sort(key=SORTS[key], reverse=descending)
    return rows
