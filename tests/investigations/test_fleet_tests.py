"""Fleet tests of hypotheses end to end: started from the hypothesis page or the API, run by a
real Celery worker thread against the embedded store, shown on the job page (numbers, figures,
examples), on the board and hypothesis page (latest lift and p), and on pinned cases' timelines.
Bad requests: viewers get 403, an outcome the test cannot find and bad ranges get 400."""
from __future__ import annotations

import json
import re

import pytest

from investigations.models import BackgroundJob
from investigations.services import activity, fleet_test, hypotheses, jobs

from .factories import client_for, known_fleet_fixture, make_case
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "fleettest"
SIGNAL = {"statement": "PCIe replays climb before node failures", "metric": "gpu.pcie.replay",
          "component_scope": "gpu", "condition": "rate", "operator": ">", "threshold": 0.1,
          "lead_window_s": 6 * 3600, "outcome": "NODE_FAIL"}


known_fleet = known_fleet_fixture(CLUSTER, seed=11)


def test_a_fleet_test_started_from_the_hypothesis_page_finds_the_precursor(known_fleet, worker, investigator):
    case = make_case(cluster=CLUSTER)
    h = hypotheses.pin_hypothesis(investigator, case=case, **SIGNAL)
    c = client_for(investigator)
    page = c.get(h.get_absolute_url()).content.decode()
    assert 'id="test-form"' in page and "Not tested across the fleet yet" in page

    resp = c.post(f"/hypotheses/{h.pk}/test", {"days": "", "cluster": CLUSTER})
    job = BackgroundJob.objects.get(kind="fleet_test")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert job.params == {"hypothesis_id": h.pk, "cluster": CLUSTER, "days": None}
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    r = done.result
    assert r["hypothesis_id"] == h.pk and r["outcome_interruptions"] == 6
    assert (r["table"]["a"], r["table"]["c"], r["table"]["b"]) == (6, 0, 0)
    assert r["lift"] > 5 and r["p"] < 1e-3 and r["precision"] == 1.0
    assert done.progress_done == done.progress_total and done.stage == "done"

    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert f"Fleet test of <a href=\"/hypotheses/{h.pk}/\">H{h.pk}</a>" in html
    assert re.search(r'<td class="num">6</td><td class="num">0</td>', html)  # the 2x2 table's first row
    # three of the six NODE_FAILs logged an XID 79, which names their GPU: its contrasts are drawn too
    assert r["component_windows"] == 3 and 'id="part-contrasts"' in html
    assert html.count("data-plotly-figure") == 4 and "/static/vendor/plotly-" in html
    assert html.count("fired t−3h") == 6  # every example, with its lead time
    # what the table could show at best: 6 of 6 windows fired already, so its own p
    assert r["power"]["windows_before"] == 6 and not r["power"]["underpowered"]
    assert r["power"]["best_p"] == pytest.approx(r["p"]) and 'id="test-power"' in html
    figs = [json.loads(part.split("</script>")[0]) for part in html.split('<script type="application/json">')[1:]]
    assert [t["name"] for t in figs[0]["data"]] == ["before the outcome", "control windows"]
    # where the controls came from and why candidates were left out: the bars first, then the table
    part = html.split('id="control-windows"')[1]
    assert part.index("data-plotly-figure") < part.index("<table")
    used = r["controls"]["same_hosts"] + r["controls"]["peers"]
    left = sum(r["controls_excluded"].values()) + r["no_data"]["controls"]
    assert f"{used} used, {left} candidates left out" in part and left > 0
    control_fig = json.loads(part.split('<script type="application/json">')[1].split("</script>")[0])
    bars = dict(zip(control_fig["data"][0]["y"], control_fig["data"][0]["x"]))
    assert bars["used: same hosts, other times"] == r["controls"]["same_hosts"]
    assert bars["left out: an interruption touched its hosts"] == r["controls_excluded"]["interrupted"]
    assert f"<th>left out: usable, beyond the k drawn</th><td class=\"num\">{r['controls_excluded']['beyond_k']}</td>" in part

    # The board and the hypothesis page carry the latest test; the case timeline says it ran.
    board = c.get("/board/").content.decode()
    assert f"/jobs/{job.pk}/" in board
    assert f"job {job.pk}" in c.get(h.get_absolute_url()).content.decode()
    verbs = [(e.verb, e.data.get("job_id")) for e in activity.case_activity(case)]
    assert ("job.started", job.pk) in verbs and ("job.succeeded", job.pk) in verbs


def test_examples_link_to_the_case_when_one_is_open(known_fleet, worker, investigator):
    case = make_case(cluster=CLUSTER, job_id="503")  # one of the six failures (h07)
    h = hypotheses.pin_hypothesis(investigator, case=case, **SIGNAL)
    job = fleet_test.start_fleet_test(investigator, h, cluster=CLUSTER)
    assert wait_for(job.pk, timeout=120).state == "succeeded"
    html = client_for(investigator).get(f"/jobs/{job.pk}/progress").content.decode()
    assert f'<a href="{case.get_absolute_url()}">case</a>' in html
    assert html.count(">in the inbox</a>") == 5


def test_the_api_starts_a_test_and_refuses_what_cannot_run(known_fleet, worker, investigator, viewer):
    h = hypotheses.pin_hypothesis(investigator, **SIGNAL)
    c = client_for(investigator)
    r = c.post(f"/api/hypotheses/{h.pk}/tests", json.dumps({"cluster": CLUSTER, "days": 30}),
               content_type="application/json")
    assert r.status_code == 201 and r.json()["kind"] == "fleet_test"
    assert r.json()["params"] == {"hypothesis_id": h.pk, "cluster": CLUSTER, "days": 30}
    assert wait_for(r.json()["id"], timeout=120).state == "succeeded"

    bad_days = c.post(f"/api/hypotheses/{h.pk}/tests", json.dumps({"days": 0}), content_type="application/json")
    assert bad_days.status_code == 400 and "days" in bad_days.json()["detail"]
    vague = hypotheses.pin_hypothesis(investigator, **{**SIGNAL, "outcome": "the GPU dies"})
    r = c.post(f"/api/hypotheses/{vague.pk}/tests", "{}", content_type="application/json")
    assert r.status_code == 400 and "use an interruption state" in r.json()["detail"]
    # The page says so instead of offering the button.
    page = c.get(vague.get_absolute_url()).content.decode()
    assert 'id="test-form"' not in page and "cannot be tested across the fleet" in page

    v = client_for(viewer)
    assert v.post(f"/api/hypotheses/{h.pk}/tests", "{}", content_type="application/json").status_code == 403
    assert v.post(f"/hypotheses/{h.pk}/test", {"days": "30"}).status_code == 403
    assert 'id="test-form"' not in v.get(h.get_absolute_url()).content.decode()
    assert BackgroundJob.objects.filter(kind="fleet_test").count() == 1


def test_the_page_form_rejects_a_range_it_does_not_offer(investigator):
    h = hypotheses.pin_hypothesis(investigator, **SIGNAL)
    resp = client_for(investigator).post(f"/hypotheses/{h.pk}/test", {"days": "9999"}, follow=True)
    assert "is not one of 7, 30, 90 or all" in resp.content.decode()
    assert not BackgroundJob.objects.exists()


def test_a_test_of_a_hypothesis_that_is_gone_fails_with_a_reason(known_fleet):
    job = BackgroundJob.objects.create(kind="fleet_test", params={"hypothesis_id": 424242})
    assert jobs.run(job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == "failed" and "hypothesis 424242 does not exist" in job.error


def test_a_test_without_lift_reads_as_such_on_the_board_and_its_page(investigator):
    """No interruption of the outcome in range: the job succeeds, says so, and the board does not
    print an empty lift."""
    from django.utils import timezone

    h = hypotheses.pin_hypothesis(investigator, **SIGNAL)
    result = {"hypothesis_id": h.pk, "signal": "s", "outcome": "NODE_FAIL", "clusters": ["x"], "range": None,
              "outcome_interruptions": 0, "table": {"a": 0, "b": 0, "c": 0, "d": 0}, "lift": None, "p": None,
              "recall": None, "recall_ci": [None, None], "control_rate": None, "control_rate_ci": [None, None],
              "lift_ci": [None, None], "precision": None, "precision_ci": [None, None], "alarms": 0, "true_alarms": 0,
              "node_days": 0, "false_alarms_per_1000_node_days": None, "lead_times_s": [], "lead_median_s": None,
              "examples": [], "controls": {"same_hosts": 0, "peers": 0}, "no_data": {"before": 0, "controls": 0}}
    job = BackgroundJob.objects.create(kind="fleet_test", hypothesis=h, params={"hypothesis_id": h.pk}, state="succeeded",
                                       result=result, finished_at=timezone.now())
    c = client_for(investigator)
    board = c.get("/board/").content.decode()
    assert "tested, no lift" in board and "None" not in board.split("<tbody>")[1]
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "No interruption of <b>NODE_FAIL</b> in the tested range" in page


def test_the_page_shows_whether_the_rule_fired_on_the_failing_part_and_not_the_rest(worker, investigator):
    """A job-wide rise before XID 94s: the page draws the component contrasts first, then the
    table, and flags the rule as the job's workload."""
    from tests.telemetry.queries.test_fleet_contrasts import write_part_fleet

    write_part_fleet("fleettest-parts")
    h = hypotheses.pin_hypothesis(investigator, statement="GPUs run hot before XID 94", metric="gpu.temp",
                                  component_scope="gpu", condition="threshold", operator=">", threshold=80,
                                  lead_window_s=3600, outcome="XID 94")
    job = fleet_test.start_fleet_test(investigator, h, cluster="fleettest-parts")
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    c = done.result["component_contrasts"]
    assert c["job_wide"]["flagged"] and not c["siblings"]["holds"] and c["own_history"]["holds"]
    html = client_for(investigator).get(f"/jobs/{job.pk}/").content.decode()
    # the XIDs name the GPUs: the table judged each failing GPU's window, and the page says so
    assert done.result["component_windows"] == 4
    assert "4 windows before the outcome judged on the failing part alone" in html
    part = html.split('id="part-contrasts"')[1].split('id="control-windows"')[0]
    assert part.index("data-plotly-figure") < part.index("<table")
    assert "⚑ fired on most sibling parts of the job as well (4 of 4 failures)" in part
    assert "28 / 28" in part and "✗ does not hold" in part and "✓ holds" in part
    fig = json.loads(part.split('<script type="application/json">')[1].split("</script>")[0])
    assert [t["name"] for t in fig["data"]] == ["healthy control windows", "failing part, its own earlier windows",
                                                "sibling parts, same job and window", "failing part, before the outcome"]
    assert fig["data"][-1]["y"] == ["failing part, before the outcome · 4/4"]  # every bar with its count
    # the hypothesis page's list of tests says it too, with the controls used and left out
    row = client_for(investigator).get(h.get_absolute_url()).content.decode().split(f"job {job.pk}</a>")[1]
    used = sum(done.result["controls"].values())
    assert "⚑ job-wide" in row.split("</tr>")[0] and f">{used} · " in row.split("</tr>")[0]
    assert fig["data"][1]["y"][0].startswith("failing part, its own earlier windows · 0/")


def test_an_underpowered_test_says_so(investigator):
    """One failure: even a rule that fired before it could not show p < 0.01 against controls that
    fire at 7 %; the page says the result reads "not shown", not "no"."""
    from django.utils import timezone

    from telemetry.queries import fleet_test as ft

    h = hypotheses.pin_hypothesis(investigator, **SIGNAL)
    a, b, c, d = 0, 3, 1, 40
    result = {"hypothesis_id": h.pk, "signal": "s", "outcome": "NODE_FAIL", "clusters": ["x"], "range": None,
              "outcome_interruptions": 1, "table": {"a": a, "b": b, "c": c, "d": d}, "lift": 1.0, "p": 1.0,
              "recall": 0.0, "recall_ci": [0.0, 0.8], "control_rate": 0.07, "control_rate_ci": [0.02, 0.18],
              "lift_ci": [0.1, 10.0], "precision": 0.0, "precision_ci": [0.0, 0.5], "alarms": 3, "true_alarms": 0,
              "idle_alarms": 41, "node_days": 10, "false_alarms_per_1000_node_days": 300.0, "lead_times_s": [], "lead_median_s": None,
              "examples": [], "controls": {"same_hosts": 20, "peers": 23}, "no_data": {"before": 0, "controls": 0},
              "power": ft._power(a, b, c, d)}
    assert result["power"]["underpowered"] and 0.05 < result["power"]["best_p"] < 0.1
    job = BackgroundJob.objects.create(kind="fleet_test", hypothesis=h, params={"hypothesis_id": h.pk}, state="succeeded",
                                       result=result, finished_at=timezone.now())
    page = client_for(investigator).get(f"/jobs/{job.pk}/").content.decode()
    part = page.split('id="test-power"')[1].split("</p>")[0]
    assert "underpowered: with 1 window before the outcome and 3 of 43 controls firing" in part
    assert "p &lt; 0.01" in part or "p < 0.01" in part
    # the alarms the rule's firings on idle hosts would have opened are said, and not counted
    assert "Alarms: 3 (0 followed by the outcome within the lead window) over 10 node-days; 41 more would have opened on hosts running no job, not counted" in page


def test_the_pages_flag_a_rule_and_a_finding_that_track_checkpoint_writes(worker, investigator):
    """I/O in flight rises during every checkpoint write, and writes came before 7 of 8 XID 94s:
    the fleet test page and the scan page say it tracks checkpoint writes, with the evidence."""
    from investigations.services import scans
    from tests.telemetry.queries.test_phase_confounders import write_phase_fleet

    write_phase_fleet("fleettest-phase")
    h = hypotheses.pin_hypothesis(investigator, statement="I/O piles up before XID 94", metric="storage.io_in_progress",
                                  component_scope="disk", condition="threshold", operator=">", threshold=10,
                                  lead_window_s=3600, outcome="XID 94")
    job = fleet_test.start_fleet_test(investigator, h, cluster="fleettest-phase")
    done = wait_for(job.pk, timeout=240)
    assert done.state == "succeeded", done.error
    ck = {g["phase"]: g for g in done.result["phase_contrasts"]}["checkpoint"]
    assert ck["flagged"] and ck["before_in_phase"] == 7 and ck["before"] == 8
    html = client_for(investigator).get(f"/jobs/{job.pk}/").content.decode()
    part = html.split('phase-contrast">')[1].split("</p>")[0]
    assert part.startswith("⚑ tracks checkpoint writes: a checkpoint write under way in 7 of 8 windows before")
    assert "Cochran–Mantel–Haenszel not testable" in part or "Cochran–Mantel–Haenszel p" in part
    assert "rather than the coming failure" in part

    scan = scans.start_scan(investigator, outcome="XID 94", lead_window_s=3600, cluster="fleettest-phase")
    done = wait_for(scan.pk, timeout=300)
    assert done.state == "succeeded", done.error
    html = client_for(investigator).get(f"/jobs/{scan.pk}/").content.decode()
    rows = html.split('<table class="dense scan-rows">')[1].split("</table>")[0].split("<tr")
    io = [r for r in rows if "storage.io_in_progress" in r][0]
    assert "⚑ tracks checkpoint writes: a checkpoint write under way in 7 of 8 windows before" in io
    assert "within the strata it does not hold" in io
    first = [r for r in rows if 'class="mono"' in r][0]
    assert "gpu.pcie.replay" in first and "⚑" not in first  # the precursor: first, unflagged


def test_the_page_says_which_hosts_a_rise_rule_did_not_read_for_an_idle_past(worker, investigator):
    """A rule on the score leaves out hosts idle for most of the past their parts are scored
    against, as the scan does: the job page counts them and says why, and the table holds the
    windows that remain (three busy hosts' failures; the six after an idle stretch have no data)."""
    from tests.telemetry.queries.test_idle_past import BUSY_FAILS, IDLERS, W, write_idle_fleet

    write_idle_fleet("fleettest-idle")
    h = hypotheses.pin_hypothesis(investigator, statement="the load rises before node failures", metric="host.load5",
                                  component_scope="host", condition="rise", operator=">", threshold=1.0,
                                  lead_window_s=W, outcome="NODE_FAIL")
    job = fleet_test.start_fleet_test(investigator, h, cluster="fleettest-idle")
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    r = done.result
    assert r["controls_excluded"]["before_hosts_idle_past"] == len(IDLERS) and r["no_data"]["before"] == len(IDLERS)
    assert r["table"]["a"] + r["table"]["c"] == len(BUSY_FAILS)
    html = client_for(investigator).get(f"/jobs/{job.pk}/").content.decode()
    assert (f"idle for half or more of the past their parts are scored against (no baseline under load: every "
            f"load-driven metric would score high the moment a job runs): {len(IDLERS)} in windows before the outcome, "
            f"{r['controls_excluded']['control_hosts_idle_past']} in controls") in html
