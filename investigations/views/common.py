"""What the page modules share: error texts a person can act on, the forms' history choice."""
from __future__ import annotations

from telemetry import store

from investigations.services import fleet_test


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text.splitlines()[0]


def store_error_message(exc: BaseException) -> str:
    """What a person can act on when the telemetry store did not answer."""
    message = store.public_message(exc)  # no internal paths or engine error codes: the log has those
    return message[:1].upper() + message[1:] + "."


def history_days(request) -> int | None:
    """The analysis forms' history choice: 7, 30, 90 days, or None for all; ValueError otherwise."""
    choice = request.POST.get("days", "")
    if choice not in fleet_test.RANGES:
        raise ValueError(f"days: {choice!r} is not one of 7, 30, 90 or all")
    return fleet_test.RANGES[choice]
