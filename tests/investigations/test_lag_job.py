"""Lag analysis as a background job, end to end: started from the jobs page form and the API, run
by a real Celery worker thread against the embedded store (the fleet written through the normal
writer), shown on its job page (the lag curve first, then the numbers). Bad requests are 400s
naming the field; viewers get 403."""
from __future__ import annotations

import json

import pytest

from investigations.models import BackgroundJob
from investigations.services import hypotheses

from .factories import client_for
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "lagjob"


@pytest.fixture(scope="module")
def lagged(telemetry_store):
    from tests.telemetry.queries.test_lag import write_lagged

    return write_lagged(CLUSTER, seed=23)


def _figures(html: str) -> list[dict]:
    return [json.loads(part.split("</script>")[0]) for part in html.split('<script type="application/json">')[1:]]


def test_the_api_recovers_an_injected_lag_within_one_step(lagged, worker, investigator):
    from tests.telemetry.queries.test_lag import LAG_MIN

    c = client_for(investigator)
    r = c.post("/api/lags", json.dumps({"a": "gpu.power", "component_a": "gpu0", "b": "gpu.temp",
                                        "cluster": CLUSTER, "days": 7, "step_s": 60, "max_lag_s": 3600}),
               content_type="application/json")
    assert r.status_code == 201, r.content
    job_id = r.json()["id"]
    assert r.json()["kind"] == "lag" and r.json()["params"]["component_a"] == "gpu0"
    done = wait_for(job_id, timeout=120)
    assert done.state == "succeeded", done.error
    res = c.get(f"/api/lags/{job_id}").json()["result"]
    # power moves first: the peak at a positive lag, within one rollup step of the injected 17 min
    assert abs(res["best_lag_s"] - LAG_MIN * 60) <= 60 and res["best_corr"] > 0.8
    assert res["hosts"] == 4 and res["best_pairs"] > 4 * 2000
    lo, hi = res["best_lag_interval_s"]
    assert lo <= res["best_lag_s"] <= hi
    assert res["verdict"] == f"gpu.power on gpu0 leads gpu.temp by {LAG_MIN} min"
    assert done.progress_done == done.progress_total == 4 and done.stage == "done"

    html = c.get(f"/jobs/{job_id}/").content.decode()
    assert "/static/vendor/plotly-" in html
    section = html.split('id="lag-result"')[1]
    # the plot first, then the numbers
    assert section.index("data-plotly-figure") < section.index("best lag</th>")
    fig = _figures(html)[0]
    assert [t["name"] for t in fig["data"]] == ["correlation", "best lag"]
    assert fig["data"][1]["x"] == [res["best_lag_s"] / 60]
    assert f"on 4 hosts" in json.dumps(fig["layout"]["annotations"])
    assert "pairs behind the peak" in section and "+17m" in section


def test_events_before_events_and_interruptions_from_the_page(lagged, worker, investigator):
    c = client_for(investigator)
    resp = c.post("/jobs/lag", {"a": "link down", "b": "XID 79", "cluster": CLUSTER, "days": "7", "step_min": "1",
                                "max_lag_min": "60"})
    job = BackgroundJob.objects.get(kind="lag")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    r = done.result
    assert (r["forward"]["n_later"], r["forward"]["n_preceded"]) == (6, 5)
    assert r["reverse"]["n_preceded"] == 0  # no XID 79 comes before a link-down within the hour
    assert r["verdict"].startswith("link down precedes XID 79: 5 of 6 XID 79 had link down within 1 h before "
                                   "(median 15 min")
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    section = html.split('id="lag-result"')[1]
    assert section.index("data-plotly-figure") < section.index("<table")
    names = [t["name"] for t in _figures(html)[0]["data"]]
    assert names == ["link down before XID 79 (5 of 6)", "XID 79 before link down (0 of 5)"]


def test_what_the_api_and_the_form_refuse(lagged, investigator, viewer):
    c = client_for(investigator)

    def post(**body):
        return c.post("/api/lags", json.dumps({"cluster": CLUSTER, **body}), content_type="application/json")

    cases = [
        ({"a": "gpu.nope", "b": "gpu.temp"}, "a: 'gpu.nope' is neither a catalog metric nor an event kind"),
        ({"a": "gpu.temp", "b": "XID 79"}, "gpu.temp is a metric and XID 79 an event"),
        ({"a": "NODE_FAIL", "b": "XID 79"}, "a: interruptions can only be the later signal (b)"),
        ({"a": "XID 79", "b": "link down", "component_b": "mlx5_0"}, "b: a component ('mlx5_0')"),
        ({"a": "gpu.temp", "b": "gpu.power", "step_s": 90}, "step_s: 90 must be a whole number of minutes"),
        ({"a": "gpu.temp", "b": "gpu.power", "max_lag_s": 10 * 86400}, "max_lag_s: 864000 must be between"),
        ({"a": "gpu.temp", "b": "gpu.power", "days": 0}, "days: 0 must be a whole number of days"),
        ({"a": "gpu.temp", "b": "gpu.power", "from": "yesterday"}, "from 'yesterday': not a day YYYY-MM-DD"),
        ({"a": "gpu.temp", "b": "gpu.temp"}, "b: the same metric on the same component as a"),
    ]
    for body, message in cases:
        r = post(**body)
        assert r.status_code == 400 and message in r.json()["detail"], (body, r.content)
    assert c.post("/api/lags", json.dumps({"a": "gpu.temp", "b": "gpu.power", "cluster": ""}),
                  content_type="application/json").json()["detail"].startswith("cluster: required")
    assert client_for(viewer).post("/api/lags", json.dumps({"a": "gpu.temp", "b": "gpu.power", "cluster": CLUSTER}),
                                   content_type="application/json").status_code == 403
    page = c.post("/jobs/lag", {"a": "gpu.temp", "b": "XID 79", "cluster": CLUSTER, "days": "7"}, follow=True)
    assert "Lag analysis not started: gpu.temp is a metric and XID 79 an event" in page.content.decode()
    assert not BackgroundJob.objects.filter(kind="lag").exists()
    assert c.get("/api/lags/999999").status_code == 404


def test_the_form_is_reachable_from_a_hypothesis(investigator):
    h = hypotheses.pin_hypothesis(investigator, statement="temp follows power", metric="gpu.power",
                                  component_scope="gpu", condition="threshold", operator=">", threshold=600,
                                  lead_window_s=3600, outcome="XID 79")
    c = client_for(investigator)
    page = c.get(h.get_absolute_url()).content.decode()
    assert 'href="/jobs/?lag_a=gpu.power#lag-form"' in page
    jobs_page = c.get("/jobs/?lag_a=gpu.power").content.decode()
    assert 'id="lag-form"' in jobs_page and 'name="a" list="lag-kinds" required value="gpu.power"' in jobs_page
