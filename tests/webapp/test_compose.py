"""compose.yaml (no Docker engine here): every command it runs exists in the project,
every variable it sets for Precursor is one the settings read, and every service has a
health check."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
APP_SERVICES = ("migrate", "web", "worker", "beat")


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def settings_variables() -> set[str]:
    source = (REPO / "webapp" / "settings.py").read_text() + (REPO / "webapp" / "env.py").read_text()
    names = set(re.findall(r'env(?:str|bool|int|list)\(\s*"([A-Z_]+)"', source))
    names |= set(re.findall(r'os\.environ\.get\(\s*"([A-Z_]+)"', source))
    return names


def commands_of(service: dict) -> list[list[str]]:
    command = service.get("command")
    if command is None:
        return []
    if isinstance(command, str):
        command = command.split()
    if command[:2] == ["sh", "-c"]:
        return [part.split() for part in command[2].split("&&")]
    return [command]


def test_every_service_has_a_health_check_or_is_a_one_shot(compose):
    for name, service in compose["services"].items():
        assert "healthcheck" in service or service.get("restart") == "no", name


def test_every_manage_py_command_exists(compose):
    from django.core.management import get_commands

    known = set(get_commands())
    used = [cmd[2] for svc in compose["services"].values() for cmd in commands_of(svc) if cmd[:2] == ["python", "manage.py"]]
    assert used, "compose runs no manage.py command"
    assert set(used) <= known, set(used) - known


def test_the_wsgi_and_celery_entry_points_exist(compose):
    import importlib

    for name in APP_SERVICES:
        for cmd in commands_of(compose["services"][name]):
            if cmd[0] == "gunicorn":
                module, attr = cmd[1].split(":")
                assert callable(getattr(importlib.import_module(module), attr))
            if cmd[0] == "celery":
                app = importlib.import_module(cmd[cmd.index("-A") + 1]).celery_app
                assert cmd[3] in ("worker", "beat")
                if "-Q" in cmd:
                    declared = {q.name for q in app.conf.task_queues}
                    assert set(cmd[cmd.index("-Q") + 1].split(",")) <= declared


def test_every_variable_set_for_precursor_is_read_by_the_settings(compose):
    read = settings_variables()
    for name in APP_SERVICES:
        env = compose["services"][name]["environment"]
        assert set(env) <= read, (name, set(env) - read)
    # The production essentials are all wired.
    assert {"TELEMETRY_DSN", "DATABASE_URL", "REDIS_URL", "SECRET_KEY"} <= set(compose["services"]["web"]["environment"])


def test_the_telemetry_dsn_points_at_the_clickhouse_service_over_http(compose):
    dsn = compose["services"]["web"]["environment"]["TELEMETRY_DSN"]
    assert dsn.startswith("http://") and "@clickhouse:8123/" in dsn
    assert "clickhouse" in compose["services"]["web"]["depends_on"] or "migrate" in compose["services"]["web"]["depends_on"]


def test_the_dockerfile_copies_every_package(compose):
    dockerfile = (REPO / "Dockerfile").read_text()
    for package in ("webapp", "telemetry", "investigations", "templates", "manage.py"):
        assert f"COPY {package}" in dockerfile
