"""Naive wall-clock times in a named zone: ``--tz`` / ``tz=`` on every ingest path.

Many sources print local time without a zone (Slurm's ``sacct``, syslog, ``dmesg -T``,
CSV exports). Without a zone Precursor takes them as UTC; with ``tz`` (an IANA name
such as ``America/Los_Angeles``) each naive time is read as that zone's wall clock.
Times that carry their own offset (``...Z``, ``+02:00``) and epoch numbers are never
shifted.

Twice a year a zone's wall clock is ambiguous or skipped:

- **ambiguous** (the fall-back hour, e.g. 01:30 on 2017-11-05 in US-Pacific happens
  twice): taken as the *first* occurrence (daylight time);
- **missing** (the spring-forward gap, e.g. 02:30 on 2017-03-12 never happens): read
  with the offset before the gap, which lands it one hour later on the clock.

Both are counted and named (line and text) in the ingest report, never silent.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from telemetry.ingestion.errors import IngestError

SHOWN = 10  # lines named per kind in a report


def zone(name: str | None, field: str = "tz") -> ZoneInfo | None:
    """The IANA zone called ``name`` (None for '' / None); IngestError for an unknown name."""
    if name is None or not str(name).strip():
        return None
    name = str(name).strip()
    try:
        if name.startswith(("/", ".")) or ".." in name:
            raise ValueError
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        close = sorted(z for z in available_timezones() if z.lower().endswith(name.lower().split("/")[-1]))[:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise IngestError(f"unknown time zone {name!r}: use an IANA name like America/Los_Angeles or UTC{hint}",
                          field=field) from None


class Localizer:
    """Reads naive wall-clock times in one zone and remembers the ambiguous and missing ones."""

    def __init__(self, tz: ZoneInfo | None):
        self.tz = tz
        self.ambiguous: list[tuple[int | None, str]] = []
        self.missing: list[tuple[int | None, str]] = []
        self.localised = 0

    @property
    def name(self) -> str:
        return self.tz.key if self.tz is not None else "UTC"

    def naive_to_ms(self, dt: datetime, line: int | None = None) -> int:
        """ms since the epoch of a naive wall-clock time in this zone (UTC without a zone)."""
        if self.tz is None:
            return round(dt.replace(tzinfo=timezone.utc).timestamp() * 1000)
        self.localised += 1
        first = dt.replace(tzinfo=self.tz, fold=0)
        second = dt.replace(tzinfo=self.tz, fold=1)
        if first.utcoffset() != second.utcoffset():
            # Ambiguous (both exist) or missing (neither round-trips): which one decides the note.
            back = first.astimezone(timezone.utc).astimezone(self.tz).replace(tzinfo=None)
            (self.ambiguous if back == dt else self.missing).append((line, dt.isoformat(sep=" ")))
        return round(first.timestamp() * 1000)

    def wall_ms_to_ms(self, wall_ms: int | None, line: int | None = None) -> int | None:
        """A time parsed as if UTC (wall clock digits as ms) -> the same wall clock in this zone."""
        if wall_ms is None or self.tz is None:
            return wall_ms
        dt = datetime(1970, 1, 1) + timedelta(milliseconds=wall_ms)
        return self.naive_to_ms(dt, line)

    def notes(self) -> dict:
        """The report's ``time_zone`` part."""
        out: dict = {"tz": self.name, "localised": self.localised}
        for key, items, rule in (
            ("ambiguous", self.ambiguous, "taken as the first occurrence (daylight time)"),
            ("missing", self.missing, "in the spring-forward gap: read with the offset before it (one hour later)"),
        ):
            if items:
                out[key] = {
                    "count": len(items),
                    "rule": rule,
                    "examples": [f"line {line}: {text}" if line is not None else text for line, text in items[:SHOWN]],
                }
        return out
