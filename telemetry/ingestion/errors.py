"""The one error type every ingestion parser raises on bad input.

A rejected batch must tell the sender exactly what was wrong, so an
``IngestError`` carries the 1-based line number (when the input is line
oriented), the field that failed and a human reason. The HTTP layer returns
``as_dict()`` as JSON; ``str()`` is the same information as one sentence.
"""
from __future__ import annotations


class IngestError(ValueError):
    """Bad input for an ingestion parser: ``line`` (1-based), ``field``, ``reason``."""

    def __init__(self, reason: str, *, line: int | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason

    def __str__(self) -> str:
        return self._render()

    def as_dict(self) -> dict:
        return {"line": self.line, "field": self.field, "reason": self.reason}

    def __reduce__(self):
        # Keyword-only constructor args: pickling (Celery results) needs help.
        return (_rebuild, (self.reason, self.line, self.field))


def _rebuild(reason: str, line: int | None, field: str | None) -> IngestError:
    return IngestError(reason, line=line, field=field)
