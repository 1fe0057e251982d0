"""Signal scans end to end: started from the Jobs page or the API, run by a real Celery worker
thread against the embedded store, shown ranked on the job page (figure, q, medians), and a
finding pinned as a hypothesis in one click, ready for its fleet test. Bad requests: viewers
get 403; an outcome the scan cannot find, a lead window out of range and bad ranges get 400."""
from __future__ import annotations

import json

import pytest

from investigations.models import BackgroundJob, Hypothesis
from investigations.services import scans

from .factories import client_for, known_fleet_fixture
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "scanjobs"


known_fleet = known_fleet_fixture(CLUSTER, seed=13)


def test_a_scan_from_the_jobs_page_ranks_the_precursor_and_pins_it(known_fleet, worker, investigator):
    c = client_for(investigator)
    assert 'id="scan-form"' in c.get("/jobs/").content.decode()
    resp = c.post("/jobs/scan", {"outcome": "NODE_FAIL", "lead_h": "6", "days": "", "cluster": CLUSTER})
    job = BackgroundJob.objects.get(kind="signal_scan")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert job.params == {"outcome": "NODE_FAIL", "lead_window_s": 21600, "days": None, "cluster": CLUSTER}
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    assert done.result["rows"][0]["metric"] == "gpu.pcie.replay" and done.result["rows"][0]["q"] < 0.01

    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "What differs before NODE_FAIL" in html and "<b>1</b> metric with q &lt; 0.05" in html
    # three of the six NODE_FAILs logged an XID 79: it names their GPU, so the contrasts are drawn
    # too (the state itself names no part; contrasts.failing_units)
    assert done.result["components_named"] == 3 and 'id="scan-contrasts"' in html
    assert "names the failing part (3 of 6 interruptions" in html
    assert "the other 3, with no such event, are read over every host of their job" in html
    assert html.count("data-plotly-figure") == 2
    table = html.split('<table class="dense scan-rows">')[1]
    assert table.index("gpu.pcie.replay") < table.index("cooling.inlet_temp")  # ranked

    resp = c.post(f"/jobs/{job.pk}/pin", {"metric": "gpu.pcie.replay"})
    h = Hypothesis.objects.get()
    assert resp.status_code == 302 and resp["Location"] == h.get_absolute_url()
    assert (h.metric, h.condition, h.operator, h.lead_window_s, h.outcome, h.component_scope) == (
        "gpu.pcie.replay", "rise", ">", 21600, "NODE_FAIL", "gpu")
    row = done.result["rows"][0]
    # the part against its own baseline, past the 95th percentile of the scan's control readings;
    # the page said so under the pin button, with the number of control windows it rests on
    readings = row["rise_readings"]
    assert h.threshold == float(f"{readings['control']['q95']:.4g}") and readings["control"]["n"] >= 20
    assert f"p95 of {readings['control']['n']} controls" in html
    assert "rises against the part's own baseline" in h.statement
    assert f"95th percentile of the part scores in {readings['control']['n']} control windows" in h.statement
    assert f"signal scan, job {job.pk}" in h.statement
    # The finding can go straight to a fleet test.
    assert 'id="test-form"' in c.get(h.get_absolute_url()).content.decode()


def test_the_api_starts_scans_and_refuses_what_cannot_run(known_fleet, worker, investigator, viewer):
    c = client_for(investigator)
    r = c.post("/api/scans", json.dumps({"outcome": "XID 79", "lead_window_s": 3600, "cluster": CLUSTER}),
               content_type="application/json")
    assert r.status_code == 201 and r.json()["kind"] == "signal_scan"
    done = wait_for(r.json()["id"], timeout=120)
    assert done.state == "succeeded" and done.result["outcome_interruptions"] == 3
    # the XIDs name their GPU: the page shows each finding's contrasts, plot first
    assert done.result["components_named"] == 3
    page = c.get(f"/jobs/{done.pk}/").content.decode()
    assert 'id="scan-contrasts"' in page and page.index("scan-contrasts") < page.index('<table class="dense scan-rows">')
    assert "the part's own earlier windows" in page

    for body, reason in [({"outcome": "the GPU dies", "lead_window_s": 3600}, "use an interruption state"),
                         ({"outcome": "NODE_FAIL", "lead_window_s": 30}, "lead_window_s"),
                         ({"outcome": "NODE_FAIL", "lead_window_s": 3600, "days": 0}, "days")]:
        bad = c.post("/api/scans", json.dumps(body), content_type="application/json")
        assert bad.status_code == 400 and reason in bad.json()["detail"], body
    v = client_for(viewer)
    assert v.post("/api/scans", json.dumps({"outcome": "NODE_FAIL", "lead_window_s": 3600}),
                  content_type="application/json").status_code == 403
    assert v.post("/jobs/scan", {"outcome": "NODE_FAIL", "lead_h": "6", "days": "30"}).status_code == 403
    assert 'id="scan-form"' not in v.get("/jobs/").content.decode()
    assert BackgroundJob.objects.filter(kind="signal_scan").count() == 1


def test_the_page_form_says_what_is_wrong(investigator):
    c = client_for(investigator)
    r = c.post("/jobs/scan", {"outcome": "NODE_FAIL", "lead_h": "abc", "days": "30"}, follow=True)
    assert "Signal scan not started" in r.content.decode()
    r = c.post("/jobs/scan", {"outcome": "soon", "lead_h": "6", "days": "30"}, follow=True)
    assert "use an interruption state" in r.content.decode()
    assert not BackgroundJob.objects.exists()


def test_pinning_needs_a_finished_scan_and_a_listed_metric(investigator, viewer):
    job = BackgroundJob.objects.create(kind="signal_scan", state="running", params={"lead_window_s": 3600})
    with pytest.raises(ValueError, match="not a finished signal scan"):
        scans.pin_finding(investigator, job, "gpu.temp")
    job = BackgroundJob.objects.create(kind="signal_scan", state="succeeded", params={"lead_window_s": 3600},
                                       result={"outcome": "NODE_FAIL", "rows": []})
    with pytest.raises(ValueError, match="not in the results"):
        scans.pin_finding(investigator, job, "gpu.temp")
    assert client_for(viewer).post(f"/jobs/{job.pk}/pin", {"metric": "gpu.temp"}).status_code == 403
    assert not Hypothesis.objects.exists()


def _finished_scan(rows):
    return BackgroundJob.objects.create(kind="signal_scan", state="succeeded", params={"lead_window_s": 3600},
                                        result={"outcome": "XID 94", "rows": rows})


def test_a_pinned_rule_takes_its_operator_from_the_metrics_bad_direction(investigator):
    # SBE rate is bad when it rises: the rule is "> threshold" whatever the medians say.
    row = {"metric": "gpu.ecc.sbe_volatile", "median_before": 3.0, "median_control": 0.0, "auc": 0.9, "q": 0.01}
    h = scans.pin_finding(investigator, _finished_scan([row]), "gpu.ecc.sbe_volatile")
    assert (h.operator, h.threshold, h.condition) == (">", 1.5, "rate")


def test_a_row_with_scores_pins_a_rise_against_the_parts_own_baseline(investigator):
    # HBM SBEs: scores (higher is worse) 3.0 before, 0.2 in controls -> "rise > 1.6"; a gauge
    # whose bad direction is down has oriented scores too, so its operator is ">" as well.
    row = {"metric": "gpu.ecc.sbe_volatile", "median_before": 0.01, "median_control": 0.5,
           "median_score_before": 3.0, "median_score_control": 0.2, "auc": 0.9, "q": 0.01}
    h = scans.pin_finding(investigator, _finished_scan([row]), "gpu.ecc.sbe_volatile")
    assert (h.condition, h.operator, h.threshold) == ("rise", ">", 1.6)
    worse = {**row, "median_score_before": -0.5}
    with pytest.raises(ValueError, match="good direction"):
        scans.pin_finding(investigator, _finished_scan([worse]), "gpu.ecc.sbe_volatile")


def test_a_finding_in_the_good_direction_is_not_pinned_as_a_rule_that_fires_everywhere(investigator):
    # Lower SBE rate before failures than in the controls: "SBE rate < 1.5" would fire almost
    # everywhere (recall 1, lift 1); the medians' side is not the metric's bad side, so refuse.
    row = {"metric": "gpu.ecc.sbe_volatile", "median_before": 1.0, "median_control": 2.0, "auc": 0.3, "q": 0.04}
    with pytest.raises(ValueError, match="good direction"):
        scans.pin_finding(investigator, _finished_scan([row]), "gpu.ecc.sbe_volatile")
    assert not Hypothesis.objects.exists()


def test_a_metric_without_a_bad_direction_takes_the_side_the_medians_show(investigator):
    from telemetry import catalog
    name = next(m.name for m in catalog.CATALOG.values() if m.bad == "none" and not m.is_counter)
    row = {"metric": name, "median_before": 1.0, "median_control": 5.0, "auc": 0.1, "q": 0.01}
    h = scans.pin_finding(investigator, _finished_scan([row]), name)
    assert (h.operator, h.threshold) == ("<", 3.0)
