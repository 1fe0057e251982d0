"""The events view, the host page, hosts in search and the catalog page (Django test client,
real embedded store)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry import catalog_store, store
from tests.telemetry.queries import BASE, event_row, host_row, write_rows


@pytest.fixture
def history(clean_store):
    t = BASE + timedelta(hours=1)
    write_rows("events", [
        event_row("c1", "gpu-a017", t, "xid", 79, component="gpu3", message="fallen off the bus"),
        event_row("c1", "gpu-a017", t + timedelta(days=2), "xid", 48, component="gpu1", message="DBE <b>x</b>"),
        event_row("c1", "gpu-b203", t + timedelta(days=3), "link_down", component="mlx5_0", message="Link down"),
    ])
    write_rows("hosts", [host_row("c1", "gpu-a017", gpu_model="H100-SXM")])
    return t


def test_the_events_view_lists_filters_and_charts_events_without_a_job(alice_client, history):
    body = alice_client.get("/events/").content.decode()
    assert "3 events" in body and "gpu-a017" in body and "XID 79" in body and "data-plotly-figure" in body
    assert "DBE &lt;b&gt;x&lt;/b&gt;" in body  # ingested text is escaped
    only = alice_client.get("/events/", {"kind": "xid", "code": "48", "without_job": "1"}).content.decode()
    assert "1 events" in only and "XID 48" in only and "XID 79" not in only
    day = (history + timedelta(days=3)).strftime("%Y-%m-%d")
    ranged = alice_client.get("/events/", {"from": day, "to": day}).content.decode()
    assert "1 events" in ranged and "link_down" in ranged
    past_end = alice_client.get("/events/", {"page": "9"}).content.decode()
    assert "Back to the first page" in past_end


def test_the_host_page_shows_inventory_and_its_events_and_search_finds_hosts(alice_client, history):
    body = alice_client.get("/hosts/gpu-a017/", {"cluster": "c1"}).content.decode()
    assert "Host gpu-a017" in body and "H100-SXM" in body and "2 events" in body and "gpu-b203" not in body
    found = alice_client.get("/search/", {"q": "a017"}).content.decode()
    assert "/hosts/gpu-a017/?cluster=c1" in found


def test_the_catalog_page_lists_unknown_names_and_only_admins_map_them(client, viewer, admin_user, clean_store):
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    write_rows("samples", [{"ts": BASE, "cluster": "c1", "host": "n1", "component": "", "metric": "site_fan_rpm",
                            "value": 900.0}])
    try:
        client.force_login(viewer)
        body = client.get("/catalog/").content.decode()
        assert "site_fan_rpm" in body and "gpu.temp" in body and "add and map" not in body
        client.post("/catalog/add", {"alias": "site_fan_rpm", "target": "cooling.fan_speed"}, follow=True)
        assert not catalog_store.current()  # a viewer changes nothing
        client.force_login(admin_user)
        assert "add and map" in client.get("/catalog/").content.decode()
        page = client.post("/catalog/add", {"alias": "site_fan_rpm", "new_name": "cooling.site_fan_rpm",
                                            "layer": "cooling", "unit": "rpm", "kind": "gauge", "bad": "down",
                                            "component": "fan"}, follow=True).content.decode()
        assert "site_fan_rpm now maps to cooling.site_fan_rpm; 1 stored rows moved." in page
        bad = client.post("/catalog/add", {"new_name": "gpu.x", "layer": "host", "unit": "%", "kind": "gauge",
                                           "bad": "up"}, follow=True).content.decode()
        assert "Not added" in bad and "prefix does not match layer" in bad
    finally:
        store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
        catalog_store.refresh(force=True)


def test_the_host_page_charts_its_main_signals_first_with_samples_and_gaps(alice_client, history):
    from tests.telemetry.queries import every, write_samples

    import numpy as np

    t = history - timedelta(hours=1)  # BASE: a sample a minute for 4 h, a 2-hour hole, 2 h more
    write_samples("c1", "gpu-a017", "gpu3", "gpu.temp", every(t, 60, 240) + every(t + timedelta(hours=6), 60, 120),
                  np.full(360, 70.0))
    write_samples("c1", "gpu-a017", "", "site_thing", every(t, 60, 5), np.ones(5))
    day = t.strftime("%Y-%m-%d")
    body = alice_client.get("/hosts/gpu-a017/", {"cluster": "c1", "from": day, "to": day}).content.decode()
    signals, rest = body.split('<section id="signals">')[1].split("</section>", 1)
    assert "data-plotly-figure" in signals and "gpu.temp" in signals  # the chart, before inventory and events
    assert "Jobs" in rest and "H100-SXM" in rest
    row = signals.split('<td class="mono">gpu3</td>')[1].split("</tr>")[0]
    assert '<td class="num">360</td>' in row and '<td class="num warn">1</td>' in row and "2h01m" in row
    assert "site_thing" in signals and "map them on the catalog page" in signals
    # reachable from the events view: every row links to its host's signals around the event
    events = alice_client.get("/events/").content.decode()
    assert f"/hosts/gpu-a017/?cluster=c1&amp;from={(history - timedelta(days=1)):%Y-%m-%d}" in events
    assert "#signals" in events
    # without from/to: the last days up to its newest sample
    assert "the last days up to its newest sample" in alice_client.get("/hosts/gpu-a017/", {"cluster": "c1"}).content.decode()


def test_a_host_known_only_from_its_samples_is_found_and_charted(alice_client, clean_store):
    from tests.telemetry.queries import every, write_samples

    import numpy as np

    write_samples("c9", "bf-node-7", "gpu0", "gpu.temp", every(BASE, 60, 30), np.full(30, 50.0))
    found = alice_client.get("/search/", {"q": "node-7"}).content.decode()
    assert "/hosts/bf-node-7/?cluster=c9" in found
    body = alice_client.get("/hosts/bf-node-7/", {"cluster": "c9"}).content.decode()
    assert '<td class="num">30</td>' in body.split('<section id="signals">')[1].split("</section>")[0]
