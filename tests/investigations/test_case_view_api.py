"""The API offers what the inbox and a case's view show, from the same services as the pages:
the same rows, the same overlay figure, the same ranking."""
from __future__ import annotations

import json
import re
from datetime import timedelta

from .test_pages import case, fleet  # noqa: F401 (fixtures)


def test_the_api_inbox_lists_what_the_page_lists(alice_client, fleet):  # noqa: F811
    body = alice_client.get("/api/inbox").json()
    assert body["total"] == 1 and [r["job_id"] for r in body["rows"]] == ["4242"]
    row = body["rows"][0]
    assert row["state"] == "NODE_FAIL" and row["case_id"] is None and row["verdict"] is None
    page = alice_client.get("/").content.decode()
    assert row["job_id"] in page and row["cluster"] in page
    assert alice_client.get("/api/inbox", {"state": "NOPE"}).status_code == 400
    assert alice_client.get("/api/inbox", {"has_case": "yes"}).json()["total"] == 0


def test_the_api_inbox_takes_an_absolute_utc_range(alice_client, fleet):  # noqa: F811
    from .test_pages import T0

    day = T0.date().isoformat()
    assert alice_client.get("/api/inbox", {"from": day, "to": day}).json()["total"] == 1
    assert alice_client.get("/api/inbox", {"to": T0.isoformat()}).json()["total"] == 0  # to excludes the instant
    assert alice_client.get("/api/inbox", {"from": T0.isoformat()}).json()["total"] == 1
    later = (T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert alice_client.get("/api/inbox", {"from": later}).json()["total"] == 0
    bad = alice_client.get("/api/inbox", {"to": "2026-02-30"})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("to '2026-02-30': not a day YYYY-MM-DD")
    empty = alice_client.get("/api/inbox", {"from": day, "to": (T0 - timedelta(days=2)).date().isoformat()})
    assert empty.status_code == 400 and "the range is empty" in empty.json()["detail"]
    assert alice_client.get("/api/interruptions", {"from": day, "to": day}).json()["total"] == 1
    assert alice_client.get("/api/interruptions", {"from": later}).json()["total"] == 0
    assert alice_client.get("/api/interruptions", {"from": "noon"}).status_code == 400


def test_the_api_overlay_is_the_pages_figure(alice_client, case):  # noqa: F811
    params = {"w": "-7200,600", "s": "gpu.pcie.replay@n01/gpu3", "n": "300"}
    api = alice_client.get(f"/api/cases/{case.pk}/overlay", params)
    page = alice_client.get(f"/cases/{case.pk}/overlay", params)
    assert api.status_code == 200 and api.json() == page.json()
    bad = alice_client.get(f"/api/cases/{case.pk}/overlay", {"s": "gpu.nope@n01"})
    assert bad.status_code == 400 and "not in the metric catalog" in bad.json()["detail"]
    outside = alice_client.get(f"/api/cases/{case.pk}/overlay", {"s": "gpu.temp@elsewhere"})
    assert outside.status_code == 400 and "elsewhere" in outside.json()["detail"]
    assert alice_client.get(f"/api/cases/{case.pk}/overlay", {"w": "5,1", "s": params["s"]}).status_code == 400


def test_the_api_differences_rank_as_the_fragment_does(alice_client, case):  # noqa: F811
    body = alice_client.get(f"/api/cases/{case.pk}/differences", {"w": "-10800,900"}).json()
    html = alice_client.get(f"/cases/{case.pk}/differences?w=-10800,900").content.decode()
    assert [r["signal"] for r in body["rows"]] == re.findall(r'<tr data-signal="([^"]+)"', html)
    defaults = json.loads(html.split('id="diff-defaults" type="application/json">')[1].split("</script>")[0])
    assert body["defaults"] == defaults and body["rows"][0]["host"] == "n01" and body["lead_s"] == 10800
    assert body["peers"] == 4 and body["rows"][0]["scope"] == "gpu"


def test_the_interruptions_api_is_the_inbox_as_json_with_its_filters_and_pages(alice_client, fleet):  # noqa: F811
    from django.test import Client

    body = alice_client.get("/api/interruptions").json()
    assert (body["total"], body["page"], body["page_size"], body["has_next"]) == (1, 1, 50, False)
    row = body["rows"][0]
    assert (row["job_id"], row["state"], row["n_hosts"]) == ("4242", "NODE_FAIL", len(row["hosts"]))
    # the events nearest t0 as the inbox labels them, the XID on its GPU
    xid = next(e for e in row["events"] if e["kind"] == "xid")
    assert xid["code"] == 79 and xid["label"].startswith(f"XID 79 {xid['component']}@") and xid["component"]
    assert alice_client.get("/api/interruptions", {"state": "TIMEOUT"}).json()["total"] == 0
    assert alice_client.get("/api/interruptions", {"q": "llm-405b"}).json()["total"] == 1
    assert alice_client.get("/api/interruptions", {"page": 2}).json()["rows"] == []
    assert alice_client.get("/api/interruptions", {"range": "1y"}).status_code == 400
    assert Client().get("/api/interruptions").status_code == 401
    assert "/api/interruptions" in alice_client.get("/api/openapi.json").content.decode()
