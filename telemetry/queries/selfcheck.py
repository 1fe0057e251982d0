"""Engine self-check: scan and hash generated rows to measure raw engine speed."""
from __future__ import annotations

import time

from telemetry import store


def scan(rows: int, timeout_s: int | None = None) -> float:
    """Seconds the engine took to hash ``rows`` generated rows."""
    started = time.perf_counter()
    store.query_rows(
        "SELECT sum(cityHash64(number)) FROM numbers_mt({rows:UInt64})",
        {"rows": rows},
        tag="selfcheck.scan",
        timeout_s=timeout_s,
    )
    return time.perf_counter() - started
