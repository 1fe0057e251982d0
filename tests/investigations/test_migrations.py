"""Migration 0005: stored fleet-test jobs of the old kind keep rendering — renamed to fleet_test,
their hypothesis a foreign key filled from the id in their params (int or string)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.slow  # see ./precursor test --fast

BEFORE = [("investigations", "0004_token_scope")]
AFTER = [("investigations", "0005_fleet_test")]


@pytest.mark.django_db(transaction=True)
def test_old_hypothesis_test_jobs_become_fleet_tests_with_their_hypothesis():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    User = old.get_model("auth", "User")
    Hypothesis = old.get_model("investigations", "Hypothesis")
    Job = old.get_model("investigations", "BackgroundJob")
    author = User.objects.create(username="old-author")
    h = Hypothesis.objects.create(statement="s", metric="gpu.pcie.replay", component_scope="gpu", condition="rate",
                                  operator=">", threshold=5, lead_window_s=3600, outcome="XID 79", author=author)
    as_int = Job.objects.create(kind="hypothesis_test", params={"hypothesis_id": h.pk}).pk
    as_str = Job.objects.create(kind="hypothesis_test", params={"hypothesis_id": str(h.pk)}).pk
    gone = Job.objects.create(kind="hypothesis_test", params={"hypothesis_id": 999999}).pk
    other = Job.objects.create(kind="store_summary", params={}).pk

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    Job = new.get_model("investigations", "BackgroundJob")
    rows = {j.pk: (j.kind, j.hypothesis_id) for j in Job.objects.all()}
    assert rows[as_int] == rows[as_str] == ("fleet_test", h.pk)
    assert rows[gone] == ("fleet_test", None)  # renders; running it says the hypothesis does not exist
    assert rows[other] == ("store_summary", None)

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)  # and back
    Job = executor.loader.project_state(BEFORE).apps.get_model("investigations", "BackgroundJob")
    assert set(Job.objects.values_list("kind", flat=True)) == {"hypothesis_test", "store_summary"}
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
