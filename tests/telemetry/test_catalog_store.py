"""User entries of the catalog: stored versioned in the telemetry store, merged into
telemetry.catalog, used by ingestion, and a name stored before it was known moved to its
metric without re-ingesting."""
from __future__ import annotations

import time

import pytest

from telemetry import catalog, catalog_store, store
from telemetry.ingestion import service


@pytest.fixture
def user_catalog(clean_store):
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    yield
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    assert not catalog.USER_METRICS and not catalog.USER_ALIASES


NOW_S = int(time.time()) // 60 * 60 - 3600


def scrape(name: str, n: int = 4) -> str:
    return "".join(f'{name}{{component="gpu{i}",hostname="n7",slot="{i}"}} {50 + i}\n' for i in range(n))


def test_a_custom_metric_is_in_the_catalog_of_every_reader(user_catalog):
    entry = catalog_store.add_metric("gpu.mem_free_pct", layer="gpu", unit="%", kind="gauge", bad="down",
                                     component="gpu", description="Free GPU memory", actor="ada")
    assert entry.version > 0 and entry.changed_by == "ada"
    assert catalog.is_known("gpu.mem_free_pct") and catalog.get("gpu.mem_free_pct").bad == "down"
    assert "gpu.mem_free_pct" in catalog.CATALOG and catalog.USER_METRICS == {"gpu.mem_free_pct"}
    assert len(catalog.CATALOG) == len(catalog._BUILTIN) + 1


def test_entries_that_do_not_fit_the_catalog_are_refused_and_nothing_is_stored(user_catalog):
    with pytest.raises(catalog_store.CatalogError, match="prefix does not match layer"):
        catalog_store.add_metric("gpu.x", layer="network", unit="%", kind="gauge", bad="up", actor="ada")
    with pytest.raises(catalog_store.CatalogError, match="already in the catalog"):
        catalog_store.add_metric("gpu.temp", layer="gpu", unit="C", kind="gauge", bad="up", actor="ada")
    with pytest.raises(catalog_store.CatalogError, match="no metric 'gpu.nope'"):
        catalog_store.add_alias("x", "gpu.nope", actor="ada")
    with pytest.raises(catalog_store.CatalogError, match="maps to both"):
        catalog_store.add_alias("DCGM_FI_DEV_GPU_TEMP", "gpu.util", actor="ada")
    assert catalog_store.history() == []


def test_ingest_uses_a_new_alias_and_names_stored_before_are_moved_without_reingesting(user_catalog):
    report = service.ingest_prometheus_text(scrape("mem_free_pct"), "c", default_ts_ms=NOW_S * 1000)
    assert report.unknown_metrics == ["mem_free_pct"]
    assert ("mem_free_pct", 4) in catalog_store.unknown_stored()
    catalog_store.add_metric("gpu.mem_free_pct", layer="gpu", unit="%", kind="gauge", bad="down",
                             component="gpu", description="Free GPU memory", actor="ada")
    entry, moved = catalog_store.add_alias("mem_free_pct", "gpu.mem_free_pct", actor="ada")
    assert moved == 4 and entry.target == "gpu.mem_free_pct"
    got = store.query_rows("SELECT metric, component, value FROM samples ORDER BY component", tag="test")
    assert got == [("gpu.mem_free_pct", f"gpu{i}", 50.0 + i) for i in range(4)]
    minutes = store.query_rows("SELECT metric, sum(count) FROM samples_1m GROUP BY metric", tag="test")
    assert minutes == [("gpu.mem_free_pct", 4)]  # the rollup follows the move
    kept = store.query_rows("SELECT metric, component, labels FROM series_labels FINAL ORDER BY component", tag="test")
    assert kept == [("gpu.mem_free_pct", f"gpu{i}", {"slot": str(i)}) for i in range(4)]  # kept labels follow it
    # the next scrape under the old name lands under the metric (the parsers' caches were dropped)
    report = service.ingest_prometheus_text(scrape("mem_free_pct"), "c", default_ts_ms=(NOW_S + 60) * 1000)
    assert report.unknown_metrics == []
    assert store.query_rows("SELECT count() FROM samples WHERE metric = 'gpu.mem_free_pct'", tag="test") == [(8,)]
    assert catalog_store.unknown_stored() == []


def test_entries_are_versioned_and_removing_one_keeps_its_history(user_catalog):
    catalog_store.add_metric("host.fan_x", layer="host", unit="rpm", kind="gauge", bad="down", actor="ada")
    catalog_store.add_metric("host.fan_x", layer="host", unit="RPM", kind="gauge", bad="down", actor="bob")
    assert catalog.get("host.fan_x").unit == "RPM"
    catalog_store.remove("host.fan_x", actor="ada")
    assert not catalog.is_known("host.fan_x")
    versions = catalog_store.history("host.fan_x")
    assert [(v.unit, v.deleted, v.changed_by) for v in versions] == [("RPM", True, "ada"), ("RPM", False, "bob"),
                                                                     ("rpm", False, "ada")]


def test_a_file_adds_metrics_and_aliases(user_catalog):
    data = (b"entry,name,target,layer,unit,kind,bad,component,description,scale\n"
            b"alias,MY_GPU_FREE,gpu.mem_free_pct,,,,,,,100\n"
            b"metric,gpu.mem_free_pct,,gpu,%,gauge,down,gpu,Free GPU memory,\n")
    done = catalog_store.import_entries(catalog_store.read_file(data), actor="file")
    assert done == ["metric gpu.mem_free_pct (gpu, %, gauge, bad down)", "alias MY_GPU_FREE -> gpu.mem_free_pct"]
    assert catalog.resolve("MY_GPU_FREE").name == "gpu.mem_free_pct"
    assert catalog.get("gpu.mem_free_pct").scale_for("MY_GPU_FREE") == 100.0
    with pytest.raises(catalog_store.CatalogError, match="unknown field"):
        catalog_store.read_file(b"entry,name,colour\nmetric,x,red\n")


def test_the_catalog_command_imports_a_file_and_lists_entries(user_catalog, tmp_path):
    import io

    from django.core.management import call_command

    path = tmp_path / "catalog.json"
    path.write_text('[{"entry": "metric", "name": "cooling.pump_rpm", "layer": "cooling", "unit": "rpm", '
                    '"kind": "gauge", "bad": "down", "component": "fan"}, '
                    '{"entry": "alias", "name": "pump_speed", "target": "cooling.pump_rpm"}]')
    out = io.StringIO()
    call_command("catalog", "import", str(path), "--actor", "ops", stdout=out)
    assert "added metric cooling.pump_rpm (cooling, rpm, gauge, bad down)" in out.getvalue()
    assert "added alias pump_speed -> cooling.pump_rpm" in out.getvalue()
    out = io.StringIO()
    call_command("catalog", "list", stdout=out)
    assert "alias  pump_speed -> cooling.pump_rpm x1" in out.getvalue() and "by cli:ops" in out.getvalue()
    # CSV backfills map user aliases too
    report = service.ingest_bulk(b"ts,host,metric,value\n" + f"{NOW_S},n1,pump_speed,900\n".encode(), "csv",
                                 cluster="c")
    assert report.aliases == {"pump_speed": "cooling.pump_rpm"}
