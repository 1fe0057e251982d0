"""/api/catalog: admins add custom metrics and aliases (audited, versioned); a name stored
before it was known is moved to its metric; the picker, permalinks, scans and exports see it."""
from __future__ import annotations

import time

import pytest

from investigations.models import AuditEvent
from investigations.permalinks import parse_signals
from investigations.views.cases import _catalog_for_picker
from telemetry import catalog, catalog_store, store
from telemetry.ingestion import service
from telemetry.queries import windows

NOW_MS = (int(time.time()) // 60 * 60 - 3600) * 1000


@pytest.fixture
def user_catalog(clean_store):
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    yield
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)


METRIC = {"name": "gpu.mem_free_pct", "layer": "gpu", "unit": "%", "kind": "gauge", "bad": "down",
          "component": "gpu", "description": "Free GPU memory"}


def test_an_unknown_stored_name_is_mapped_to_a_new_metric_and_every_reader_sees_it(user_catalog, client, admin_user):
    scrape = "".join(f'mem_free_pct{{component="gpu{i}",hostname="n7"}} {50 + i}\n' for i in range(4))
    service.ingest_prometheus_text(scrape, "east", default_ts_ms=NOW_MS)
    client.force_login(admin_user)
    listed = client.get("/api/catalog").json()
    assert {"name": "mem_free_pct", "rows": 4} in listed["unknown"]

    added = client.post("/api/catalog/metrics", METRIC, content_type="application/json")
    assert added.status_code == 201, added.content
    mapped = client.post("/api/catalog/aliases", {"alias": "mem_free_pct", "metric": "gpu.mem_free_pct"},
                         content_type="application/json")
    assert mapped.status_code == 201 and mapped.json()["rows_moved"] == 4

    listed = client.get("/api/catalog").json()
    assert listed["unknown"] == [] and listed["aliases"] == {"mem_free_pct": "gpu.mem_free_pct"}
    row = next(m for m in listed["metrics"] if m["name"] == "gpu.mem_free_pct")
    assert row["custom"] is True and row["rows"] == 4 and row["aliases"] == ["mem_free_pct"]
    # picker, permalinks (also under the old name), scans and exports
    assert any(m["name"] == "gpu.mem_free_pct" for m in _catalog_for_picker())
    assert [s.metric for s in parse_signals("mem_free_pct@n7/gpu0,gpu.mem_free_pct@n7/gpu1")] == \
        ["gpu.mem_free_pct", "gpu.mem_free_pct"]
    assert "gpu.mem_free_pct" in [m for m, _, _ in windows.metrics_present("east")]
    assert list(AuditEvent.objects.order_by("pk").values_list("verb", flat=True)) == \
        ["catalog.metric_added", "catalog.alias_added"]
    history = client.get("/api/catalog/entries/gpu.mem_free_pct/history").json()
    assert [h["changed_by"] for h in history] == ["ada"]


def test_only_admins_change_the_catalog_and_bad_entries_get_400(user_catalog, client, investigator, admin_user):
    client.force_login(investigator)
    response = client.post("/api/catalog/metrics", METRIC, content_type="application/json")
    assert response.status_code == 403 and "admin" in response.json()["detail"]
    client.force_login(admin_user)
    bad = client.post("/api/catalog/metrics", {**METRIC, "layer": "network"}, content_type="application/json")
    assert bad.status_code == 400 and "prefix does not match layer" in bad.json()["detail"]
    assert not catalog.is_known("gpu.mem_free_pct") and catalog_store.history() == []


def test_removing_an_entry_keeps_its_history(user_catalog, client, admin_user):
    client.force_login(admin_user)
    client.post("/api/catalog/metrics", METRIC, content_type="application/json")
    assert client.delete("/api/catalog/entries/gpu.mem_free_pct").status_code == 200
    assert not catalog.is_known("gpu.mem_free_pct")
    assert [h["deleted"] for h in client.get("/api/catalog/entries/gpu.mem_free_pct/history").json()] == [True, False]
    assert client.delete("/api/catalog/entries/gpu.temp").status_code == 400  # entries in code stay
