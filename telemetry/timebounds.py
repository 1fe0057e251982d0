"""Absolute time bounds typed into filters (the events view, the inbox and its API): one
definition of what "from" and "to" accept.

A day ``YYYY-MM-DD`` is that whole day in UTC: as ``from`` its start, as ``to`` the next day's
start, so the day itself is included. An ISO date-time (``2026-11-02T10:30``, seconds optional,
``Z`` or ``+02:00`` allowed; without a zone it is UTC) is that instant: ``from`` includes it,
``to`` excludes it."""
from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

ACCEPTED = "a day YYYY-MM-DD or an ISO date-time YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM] (UTC unless it names a zone)"


def parse_bound(raw: str | None, *, end: bool = False, name: str = "from") -> datetime | None:
    """The UTC instant ``raw`` means as a lower (or, with ``end``, an exclusive upper) bound;
    None when empty. ValueError naming ``name``, the value and what is accepted otherwise."""
    text = (raw or "").strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            start = datetime.combine(date.fromisoformat(text), time(0), tzinfo=timezone.utc)
            return start + timedelta(days=1) if end else start
        if len(text) < 16 or text[10] not in "Tt ":
            raise ValueError(text)
        ts = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        raise ValueError(f"{name} {text[:40]!r}: not {ACCEPTED}") from None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def parse_range(raw_from: str | None, raw_to: str | None) -> tuple[datetime | None, datetime | None]:
    """(start, end) of a from/to pair; ValueError when either is bad or the range is empty."""
    start, stop = parse_bound(raw_from, name="from"), parse_bound(raw_to, end=True, name="to")
    if start is not None and stop is not None and stop <= start:
        raise ValueError(f"to {raw_to.strip()!r} is not after from {raw_from.strip()!r}: the range is empty")
    return start, stop
