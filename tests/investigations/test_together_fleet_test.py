"""A hypothesis of two signals together, end to end: created through the API (a bad combination is
a 400 naming what is wrong), fleet-tested by a real Celery worker thread, and shown on the job page
with the pair beside each signal alone (the grouped bars first, then the table)."""
from __future__ import annotations

import json

import pytest

from investigations.models import BackgroundJob, Hypothesis

from .factories import client_for, make_case
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "togetherjob"
PAIR = {"statement": "replays, then symbol errors, before node failures", "metric": "gpu.pcie.replay",
        "component_scope": "gpu", "condition": "rate", "operator": ">", "threshold": 0.1,
        "lead_window_s": 6 * 3600, "outcome": "NODE_FAIL",
        "combined_with": "then net.symbol_errors rate > 0.1 within 30 min"}


@pytest.fixture(scope="module")
def pair_fleet(telemetry_store):
    from tests.telemetry.queries.test_together import write_pair_fleet

    return write_pair_fleet(CLUSTER)


def test_a_combined_hypothesis_is_tested_against_each_signal_alone(pair_fleet, worker, investigator):
    c = client_for(investigator)
    r = c.post("/api/hypotheses", json.dumps(PAIR), content_type="application/json")
    assert r.status_code == 201 and r.json()["combined_with"] == "then net.symbol_errors rate > 0.1 within 30 min"
    h = Hypothesis.objects.get(pk=r.json()["id"])
    assert h.signal_text == ("gpu.pcie.replay rate > 0.1 on gpu then net.symbol_errors rate > 0.1 within 30 min, "
                             "6h before")
    job = c.post(f"/api/hypotheses/{h.pk}/tests", json.dumps({"cluster": CLUSTER}), content_type="application/json")
    assert job.status_code == 201
    done = wait_for(job.json()["id"], timeout=180)
    assert done.state == "succeeded", done.error
    res = done.result
    assert res["beats_each_alone"] is True and [row["role"] for row in res["side_by_side"]] == [
        "together", "A alone", "B alone"]
    assert res["table"]["a"] == 6 and res["table"]["b"] == 0 and done.stage == "done"

    html = c.get(f"/jobs/{done.pk}/").content.decode()
    part = html.split('id="together"')[1]
    assert part.index("data-plotly-figure") < part.index("<table")  # the bars first, then the table
    assert "the pair beats each signal alone" in part and "within 30m" in part
    fig = json.loads(part.split('<script type="application/json">')[1].split("</script>")[0])
    assert [t["name"].split(":")[0] for t in fig["data"]] == ["together", "A alone", "B alone"]
    assert fig["data"][0]["text"] == ["6/6", "0/144", "6/6"]  # every bar carries its count
    table = part.split("<tbody>")[1].split("</table>")[0]
    assert table.count("<tr><th>") == 3 and "100 % (" in table
    # the board and the hypothesis page keep reading the pair's lift and p
    assert f"/jobs/{done.pk}/" in c.get("/board/").content.decode()


def test_a_bad_combination_is_refused_by_the_api_and_the_case_form(investigator):
    c = client_for(investigator)
    for text, message in [("or net.symbol_errors > 1 within 5 min", "combined_with: starts with 'and'"),
                          ("then net.nope > 1 within 5 min", "combined_with: unknown metric 'net.nope'"),
                          ("then net.symbol_errors > 1 within a while", "combined_with: 'within a while' is not"),
                          ("and gpu.pcie.replay rate > 0.1 within 5 min", "the second signal is the first one again")]:
        r = c.post("/api/hypotheses", json.dumps({**PAIR, "combined_with": text}), content_type="application/json")
        assert r.status_code == 400 and message in r.json()["detail"], (text, r.content)
    case = make_case(cluster=CLUSTER)
    page = c.post(f"/cases/{case.pk}/pin", {"statement": "x", "metric": "gpu.pcie.replay", "component_scope": "gpu",
                                            "condition": "rate", "operator": ">", "threshold": "0.1",
                                            "lead_window_min": "360", "outcome": "NODE_FAIL",
                                            "combined_with": "then net.symbol_errors > 1 within forever"})
    assert page.status_code in (200, 400) and "combined_with: &#x27;within forever&#x27; is not a duration" in \
        page.content.decode()
    assert not Hypothesis.objects.exists() and not BackgroundJob.objects.exists()
