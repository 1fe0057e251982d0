"""Background jobs run by real Celery worker threads: claim once, progress, cancel, recover."""
from __future__ import annotations

import time

import pytest
from django.db import transaction

from investigations.models import BackgroundJob
from investigations.services import jobs
from webapp import celery_app
from webapp.worker import EmbeddedWorker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(telemetry_store):
    w = EmbeddedWorker(celery_app, concurrency=2)
    w.start()
    yield w
    w.stop()


def wait_for(job_id: int, states=("succeeded", "failed", "cancelled"), timeout=60.0) -> BackgroundJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = BackgroundJob.objects.get(pk=job_id)
        if job.state in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {BackgroundJob.objects.get(pk=job_id).state} after {timeout} s")


def test_a_started_job_runs_in_a_worker_thread_and_keeps_its_result(worker, clean_store):
    with transaction.atomic():
        job = jobs.start_job("store_summary")
    done = wait_for(job.pk)
    assert done.state == "succeeded", done.error
    assert done.result == {"metrics": [], "events": []}
    assert done.attempts == 1 and done.progress_done == done.progress_total == 2
    assert done.worker.split(":")[-1] != "MainThread"


def test_a_job_is_claimed_only_once():
    job = BackgroundJob.objects.create(kind="store_summary")
    assert jobs.claim(job.pk) is not None
    assert jobs.claim(job.pk) is None  # a redelivered message finds it running


def test_a_redelivered_message_for_a_finished_job_does_nothing():
    job = BackgroundJob.objects.create(kind="store_summary", state="succeeded", result={"x": 1})
    assert jobs.run(job.pk) == "skipped"
    job.refresh_from_db()
    assert job.result == {"x": 1} and job.attempts == 0


def test_a_running_job_can_be_cancelled(worker):
    with transaction.atomic():
        job = jobs.start_job("engine_selfcheck", {"rows": 40_000_000_000, "steps": 400})
    wait_for(job.pk, states=("running",))
    jobs.cancel_job(job)
    done = wait_for(job.pk)
    assert done.state == "cancelled"
    assert done.progress_done < 100


def test_a_failing_job_records_its_error(worker):
    with transaction.atomic():
        job = jobs.start_job("engine_selfcheck", {"rows": -5})
    done = wait_for(job.pk)
    assert done.state == "failed"
    assert "rows must be between 1 and 1e11, got -5" in done.error


def test_unknown_job_kinds_are_refused():
    with pytest.raises(jobs.UnknownJobKind, match="unknown job kind 'astrology'"):
        jobs.start_job("astrology")


def test_jobs_left_running_by_a_dead_process_are_run_again_at_start(worker, clean_store):
    orphan = BackgroundJob.objects.create(kind="store_summary", state="running", stage="half way", attempts=1)
    queued = BackgroundJob.objects.create(kind="store_summary")
    assert sorted(jobs.recover_jobs()) == sorted([orphan.pk, queued.pk])
    assert wait_for(orphan.pk).state == "succeeded"
    assert wait_for(queued.pk).state == "succeeded"
    assert BackgroundJob.objects.get(pk=orphan.pk).attempts == 2


def test_a_job_about_a_case_appears_in_its_activity_timeline(worker, clean_store, investigator):
    from investigations.models import AuditEvent, Case

    case = Case.objects.create(cluster="c1", job_id="77", job_name="llm-7", state="NODE_FAIL",
                               t0="2026-11-30T04:12:07Z", n_hosts=1, hosts=["n1"], opened_by=investigator)
    with transaction.atomic():
        job = jobs.start_job("store_summary", {"case_id": case.pk}, user=investigator)
    assert wait_for(job.pk).state == "succeeded"
    verbs = list(AuditEvent.objects.filter(case=case).order_by("pk").values_list("verb", "actor__username"))
    assert verbs == [("job.started", "alice"), ("job.succeeded", None)]


def test_the_job_page_shows_elapsed_time_and_cancels_a_running_job(worker, investigator, viewer):
    from django.test import Client

    from investigations.models import AuditEvent

    with transaction.atomic():
        job = jobs.start_job("engine_selfcheck", {"rows": 40_000_000_000, "steps": 400}, user=investigator)
    wait_for(job.pk, states=("running",))
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "elapsed" in html and 'id="job-cancel"' not in html  # a viewer sees no cancel button
    assert c.post(f"/jobs/{job.pk}/cancel").status_code == 403
    assert BackgroundJob.objects.get(pk=job.pk).state == "running"

    c.force_login(investigator)
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-cancel"' in html and "engine_selfcheck" in html
    resp = c.post(f"/jobs/{job.pk}/cancel", follow=True)
    assert "cancel requested" in resp.content.decode()
    done = wait_for(job.pk)
    assert done.state == "cancelled" and done.cancel_requested
    assert AuditEvent.objects.filter(verb="job.cancel_requested", actor=investigator, data__job_id=job.pk).exists()
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-cancel"' not in html and "cancelled" in html


def test_a_finished_job_page_shows_its_result(investigator):
    from datetime import timedelta

    from django.test import Client
    from django.utils import timezone

    now = timezone.now()
    job = BackgroundJob.objects.create(kind="store_summary", state="succeeded", started_at=now - timedelta(seconds=185),
                                       finished_at=now, result={"metrics": [["gpu.temp", 12]], "events": []})
    c = Client()
    c.force_login(investigator)
    html = c.get(f"/jobs/{job.pk}/progress").content.decode()
    assert "elapsed 3m05s" in html and "&quot;gpu.temp&quot;" in html and "left" not in html


def test_remaining_time_is_estimated_from_progress_only_when_there_is_enough():
    from datetime import timedelta

    from django.utils import timezone

    started = timezone.now() - timedelta(seconds=60)
    job = BackgroundJob(kind="x", state="running", started_at=started, progress_done=25, progress_total=100)
    assert job.remaining_s == pytest.approx(180, abs=2)
    assert BackgroundJob(kind="x", state="running", started_at=started, progress_done=1,
                         progress_total=100).remaining_s is None  # 1 %: too early to say
    assert BackgroundJob(kind="x", state="queued", progress_done=0, progress_total=100).remaining_s is None


def test_duration_filter():
    from investigations.templatetags.precursor import duration

    assert [duration(v) for v in (None, 0, 12.4, 185, 3720, 2 * 86400 + 3 * 3600)] == [
        "—", "0 s", "12 s", "3m05s", "1h02m", "2d03h"]


def test_the_api_starts_jobs_only_through_their_verbs(investigator, viewer):
    """POST /api/jobs (any kind, any params) is gone: jobs are read and cancelled there, and
    started by the endpoint of their feature, which checks role and parameters first."""
    import json

    from django.test import Client

    c = Client()
    c.force_login(investigator)
    generic = c.post("/api/jobs", json.dumps({"kind": "engine_selfcheck", "params": {"rows": 10}}),
                     content_type="application/json")
    assert generic.status_code == 405 and not BackgroundJob.objects.exists()
    bad = c.post("/api/jobs/selfcheck", json.dumps({"rows": -5}), content_type="application/json")
    assert bad.status_code == 400 and "rows must be between 1 and 1e11" in bad.json()["detail"]
    bad_steps = c.post("/api/jobs/selfcheck", json.dumps({"rows": 10, "steps": 400}), content_type="application/json")
    assert bad_steps.status_code == 400 and "steps" in bad_steps.json()["detail"]
    assert not BackgroundJob.objects.exists()
    v = Client()
    v.force_login(viewer)
    assert v.post("/api/jobs/store-summary", "{}", content_type="application/json").status_code == 403
    assert v.post("/api/jobs/selfcheck", "{}", content_type="application/json").status_code == 403
    assert not BackgroundJob.objects.exists()
    started = c.post("/api/jobs/store-summary", "{}", content_type="application/json")
    assert started.status_code == 201 and started.json()["kind"] == "store_summary"
    assert [j["id"] for j in c.get("/api/jobs").json()] == [started.json()["id"]]


def test_a_jobs_end_and_its_audit_record_are_one_write(clean_store, investigator, monkeypatch):
    """If the audit record cannot be written, the final state is not either: nobody ever sees
    "succeeded" without job.succeeded (the test above once caught the gap between the two)."""
    from investigations.models import AuditEvent, Case
    from investigations.services import activity

    case = Case.objects.create(cluster="c1", job_id="78", job_name="llm-8", state="NODE_FAIL",
                               t0="2026-11-30T04:12:07Z", n_hosts=1, hosts=["n1"], opened_by=investigator)
    job = jobs.start_job("store_summary", {"case_id": case.pk}, user=investigator)
    real_record = activity.record

    def crash_on_end(actor, verb, *args, **kwargs):
        if verb == "job.succeeded":
            raise RuntimeError("the process died here")
        return real_record(actor, verb, *args, **kwargs)

    monkeypatch.setattr(activity, "record", crash_on_end)
    with pytest.raises(RuntimeError, match="died here"):
        jobs.run(job.pk)
    job.refresh_from_db()
    assert job.state == "running" and job.finished_at is None  # picked up again by recovery, not half-ended
    assert list(AuditEvent.objects.filter(case=case).values_list("verb", flat=True)) == ["job.started"]
    monkeypatch.setattr(activity, "record", real_record)
    job.state = "queued"
    job.save(update_fields=["state"])
    assert jobs.run(job.pk) == "succeeded"
    assert list(AuditEvent.objects.filter(case=case).order_by("pk").values_list("verb", flat=True)) == [
        "job.started", "job.succeeded"]


def test_a_failure_shown_on_the_job_page_carries_no_internal_path_or_engine_code():
    from telemetry import store

    engine = type("DatabaseError", (Exception,), {"__module__": "clickhouse_connect.driver.exceptions"})
    shown = jobs.failure_message(engine("Code: 107. DB::ErrnoException: Cannot open file /srv/precursor/var/"
                                        "telemetry/store/abc/columns.txt"))
    assert "Code" not in shown and "/srv" not in shown and "telemetry store" in shown
    shown = jobs.failure_message(store.StoreUnavailable("cannot open the embedded telemetry store at /srv/x: boom"))
    assert "/srv" not in shown
    shown = jobs.failure_message(OSError(2, "No such file", "/srv/precursor/var/exports/x.partial"))
    assert "/srv" not in shown and shown.startswith("internal error (FileNotFoundError)")
    assert jobs.failure_message(ValueError("rows must be between 1 and 1e11, got -5")).endswith("got -5")
