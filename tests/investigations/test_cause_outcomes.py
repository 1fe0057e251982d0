"""Root causes from verdicts as outcome classes ("cause: PSU"): a scan or fleet test before one
cause takes only the interruptions whose case's current verdict confirms that root cause; the
scan form offers the classes the data has and the causes confirmed so far. Run by a real Celery
worker against the embedded store. Bad input: a cause no confirmed verdict names, or none at all,
is a 400 that lists the causes there are; the engine refuses a cause it was not given the cases of."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from investigations.models import BackgroundJob, Hypothesis
from investigations.services import causes, lags
from telemetry.queries import windows
from tests.telemetry.queries import BASE
from tests.telemetry.queries.test_fleet_test import FAILURES

from .factories import client_for, known_fleet_fixture, make_case, make_hypothesis, make_verdict
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "causes"
known_fleet = known_fleet_fixture(CLUSTER, seed=17)


def _cases_with_causes():
    """The six NODE_FAILs of the known fleet as cases: three confirmed PSU (one of them spelled
    'psu '), two a kernel panic, and one whose PSU verdict was later withdrawn as a false positive."""
    cases = []
    for i, (host, hours) in enumerate(FAILURES):
        cases.append(make_case(cluster=CLUSTER, job_id=str(500 + i), t0=BASE + timedelta(hours=hours),
                               hosts=[host], n_hosts=1))
    for case, cause in zip(cases, ["PSU", "psu ", "PSU", "kernel panic", "kernel panic"]):
        make_verdict(case, root_cause=cause)
    make_verdict(cases[5], root_cause="PSU")
    make_verdict(cases[5], kind="false_positive", rationale="the PSU was fine after all")
    return cases


def test_a_scan_and_a_fleet_test_before_a_cause_take_only_its_confirmed_cases(known_fleet, worker, investigator):
    _cases_with_causes()
    assert causes.causes_present() == [{"outcome": "cause: PSU", "interruptions": 3},
                                       {"outcome": "cause: kernel panic", "interruptions": 2}]
    c = client_for(investigator)
    # the form offers the classes the data has and the causes confirmed so far
    page = c.get("/jobs/").content.decode()
    assert 'value="cause: PSU" label="cause: PSU · 3 interruptions"' in page
    assert 'value="NODE_FAIL" label="NODE_FAIL · 6 interruptions"' in page

    r = c.post("/api/scans", json.dumps({"outcome": "cause: psu", "lead_window_s": 6 * 3600, "cluster": CLUSTER}),
               content_type="application/json")
    assert r.status_code == 201, r.content
    done = wait_for(r.json()["id"], timeout=120)
    assert done.state == "succeeded", done.error
    assert done.result["outcome"] == "cause: psu" and done.result["outcome_interruptions"] == 3
    # two of the three logged an XID 79 on gpu0 near t0: the cause is judged on that part there
    assert done.result["components_named"] == 2
    top = done.result["rows"][0]
    assert top["metric"] == "gpu.pcie.replay" and top["n_before"] == 3 and top["p"] < 0.01
    assert "What differs before cause: psu" in c.get(f"/jobs/{done.pk}/").content.decode()

    h = make_hypothesis(metric="gpu.pcie.replay", condition="rate", operator=">", threshold=0.1,
                        outcome="cause: PSU", component_scope="gpu")
    r = c.post(f"/api/hypotheses/{h.pk}/tests", json.dumps({"cluster": CLUSTER}),
               content_type="application/json")
    assert r.status_code == 201, r.content
    test = wait_for(r.json()["id"], timeout=120)
    assert test.state == "succeeded", test.error
    assert test.result["outcome_interruptions"] == 3 and (test.result["table"]["a"], test.result["table"]["c"]) == (3, 0)


def test_a_cause_no_confirmed_verdict_names_is_refused_with_the_causes_there_are(investigator):
    make_verdict(make_case(cluster=CLUSTER), root_cause="fan")
    c = client_for(investigator)
    for outcome, reason in [("cause: PSU", "no case has a confirmed verdict with that root cause; causes "
                                           "confirmed so far: fan (1)"),
                            ("cause:", "names no root cause")]:
        bad = c.post("/api/scans", json.dumps({"outcome": outcome, "lead_window_s": 3600}),
                     content_type="application/json")
        assert bad.status_code == 400 and reason in bad.json()["detail"], (outcome, bad.content)
    # the lag analysis takes a cause's interruptions as its b, as the verdicts give them
    with pytest.raises(ValueError, match="no case has a confirmed verdict with that root cause"):
        lags.lag_params(a="XID 79", b="cause: PSU", cluster=CLUSTER, days=7, step_s=60, max_lag_s=3600)
    assert lags.lag_params(a="XID 79", b="cause: fan", cluster=CLUSTER, days=7, step_s=60,
                           max_lag_s=3600)["b"] == "cause: fan"
    r = c.post("/jobs/scan", {"outcome": "cause: PSU", "lead_h": "6", "days": "30"}, follow=True)
    assert "Signal scan not started" in r.content.decode() and "fan (1)" in r.content.decode()
    assert not BackgroundJob.objects.exists()


def test_the_engine_refuses_a_cause_it_was_not_given_the_cases_of(telemetry_store):
    outcome = windows.parse_outcome("Root cause = PSU")
    assert (outcome.label, outcome.cause, outcome.jobs) == ("cause: PSU", "PSU", None)
    with pytest.raises(windows.NotTestable, match="comes from the verdicts on cases"):
        windows.outcome_interruptions(CLUSTER, outcome, 3600, 0, 10**10, timeout_s=30)


def test_every_class_in_one_job_then_a_finding_of_one_class_pinned(known_fleet, worker, investigator):
    _cases_with_causes()
    c = client_for(investigator)
    assert 'value="every class"' in c.get("/jobs/").content.decode()
    resp = c.post("/jobs/scan", {"outcome": "every class", "lead_h": "6", "days": "", "cluster": CLUSTER})
    job = BackgroundJob.objects.get(kind="signal_scan")
    assert resp.status_code == 302 and job.params["outcome"] == "every class"
    done = wait_for(job.pk, timeout=240)
    assert done.state == "succeeded", done.error
    got = [(r["outcome"], r["outcome_interruptions"]) for r in done.result["classes"]]
    assert got == [("NODE_FAIL", 6), ("XID 79", 3), ("cause: PSU", 3), ("cause: kernel panic", 2)]
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    summary = html.split('id="scan-classes"')[1].split("</table>")[0]
    assert summary.index("data-plotly-figure") < summary.index("<table")  # the picture first
    table = summary.split("<table")[1]
    assert table.index("NODE_FAIL") < table.index("cause: PSU") and 'href="#scan-result-3"' in table
    assert 'id="scan-result-1"' in html and 'id="scan-result-4"' in html and "What differs before cause: PSU" in html
    # pinning names the class: the hypothesis is about that class's outcome
    page = c.post(f"/jobs/{job.pk}/pin", {"metric": "gpu.pcie.replay"}, follow=True).content.decode()
    assert "is not one of the classes job" in page and not Hypothesis.objects.exists()  # which class?
    resp = c.post(f"/jobs/{job.pk}/pin", {"metric": "gpu.pcie.replay", "outcome": "cause: PSU"})
    h = Hypothesis.objects.get()
    assert resp.status_code == 302 and h.outcome == "cause: PSU" and "before cause: PSU" in h.statement
