"""Tiny helpers that read settings from the environment and fail loudly.

A bad value raises ConfigError naming the variable, the value and what is
expected; ``manage.py`` turns it into a one-line message and exit code 2.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path


class ConfigError(Exception):
    def __init__(self, variable: str, value: str, reason: str):
        self.variable = variable
        super().__init__(f"configuration error: {variable}={value!r} {reason}")


def envstr(name: str, default: str) -> str:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, value, "is not a boolean (use true/false, 1/0, yes/no, on/off)")


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ConfigError(name, value, "is not an integer") from None
    if minimum is not None and number < minimum:
        raise ConfigError(name, value, f"must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise ConfigError(name, value, f"must be at most {maximum}")
    return number


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ConfigError(name, value, "has an empty item (use a comma-separated list)")
    return items


def load_secret_key(data_dir: Path, *, debug: bool) -> str:
    """SECRET_KEY from the environment; else, in the embedded mode, one generated
    once and kept in the data dir. Production (a DATABASE_URL set, DEBUG off)
    must set it explicitly so several web processes agree."""
    value = os.environ.get("SECRET_KEY", "")
    if value:
        if len(value) < 32:
            raise ConfigError("SECRET_KEY", "***", "is too short (use at least 32 characters)")
        return value
    if os.environ.get("DATABASE_URL") and not debug:
        raise ConfigError("SECRET_KEY", "", "must be set in production (DATABASE_URL is set and DEBUG is off)")
    path = data_dir / "secret_key"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
        return path.read_text().strip()
    except FileExistsError:
        return path.read_text().strip()
    except OSError as exc:
        raise ConfigError("PRECURSOR_DATA_DIR", str(data_dir), f"is not writable: {exc.strerror}") from None
