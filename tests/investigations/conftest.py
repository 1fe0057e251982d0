"""Fixtures shared by the ingest API tests: a full rate bucket per test and an ingest token."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fresh_rate_limit():
    """Every token's ingest rate bucket full before and after each test (the limiter is
    process-wide, so one test's requests would otherwise count against the next)."""
    from investigations.ingest_limits import rate_limiter

    rate_limiter.reset()
    yield rate_limiter
    rate_limiter.reset()


@pytest.fixture
def token(db, investigator) -> str:
    """The plaintext of a new ingest token of the investigator."""
    from investigations.tokens import create_token

    return create_token("ingest-test", investigator)[1]
