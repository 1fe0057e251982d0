"""Shared fixtures: one embedded telemetry store per test session (schema applied
once, tables emptied between tests), users with each role, a logged-in client."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FORMATS = REPO.parent / "shared" / "reference" / "formats"

TELEMETRY_TABLES = ("samples", "samples_1m", "band_1m", "events", "jobs", "job_hosts", "hosts", "components", "series_labels")


def shared_file(name: str) -> Path:
    """A real sample from ../shared/reference/formats, or skip when that folder is absent."""
    path = SHARED_FORMATS / name
    if not path.exists():
        pytest.skip(f"../shared/reference/formats/{name} not present (a user's clone has no ../shared)")
    return path


@pytest.fixture(scope="session", autouse=True)
def collected_static(django_db_blocker):
    """STATIC_ROOT filled as `serve` fills it at start-up, so WhiteNoise serves what it serves live."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture(scope="session")
def telemetry_store():
    """The session's chDB store with every migration applied. No retention: the real
    reference samples are from 2024-25 and would otherwise expire on insert."""
    from telemetry import migrate, store

    migrate.migrate(store.get_client(), migrate.Target(cluster="", ttl_days=0), log=lambda m: None)
    return store


@pytest.fixture
def clean_store(telemetry_store):
    """An empty store for this test (and no memory of requests stored before it)."""
    from telemetry import rollup
    from telemetry.ingestion import group_commit, normalize

    group_commit.reset()
    rollup.discard()  # rows an earlier test deferred would roll into this test's emptied tables
    # label sets resolved by earlier tests would note no inventory or kept labels into the emptied
    # tables; forgetting them also forgets what this process knows of the inventory rows
    normalize.forget_label_sets()
    for table in TELEMETRY_TABLES:
        telemetry_store.command(f"TRUNCATE TABLE IF EXISTS {table}")
    yield telemetry_store
    group_commit.reset()
    rollup.discard()
    for table in TELEMETRY_TABLES:
        telemetry_store.command(f"TRUNCATE TABLE IF EXISTS {table}")


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model

    from investigations.roles import set_role

    def make(username: str, role: str = "investigator", password: str = "correct-horse-1"):
        user = get_user_model().objects.create_user(username=username, password=password)
        set_role(user, role)
        return user

    return make


@pytest.fixture
def investigator(make_user):
    return make_user("alice", "investigator")


@pytest.fixture
def viewer(make_user):
    return make_user("victor", "viewer")


@pytest.fixture
def admin_user(make_user):
    return make_user("ada", "admin")


@pytest.fixture
def alice_client(client, investigator):
    client.force_login(investigator)
    return client
