"""Fleet tests of hypotheses: start one (a background job of kind ``fleet_test``) and run it.

The statistics live in telemetry.queries.fleet_test; this module maps a Hypothesis onto its
Signal and Outcome, checks up front that it can be tested (so a bad outcome is a 400 at the
start, not a failed job a minute later), and keeps the job's parameters small and durable:
the hypothesis (a foreign key on the job, and its id in the params the API shows), an optional
cluster, and how many days back (none: all history).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction

from investigations.models import BackgroundJob, Hypothesis
from investigations.roles import require_investigator
from investigations.services import causes, jobs
from investigations.services.jobs import JobContext, job_kind
from telemetry.queries import fleet_test, together

FLEET_TEST_KIND = "fleet_test"
MAX_DAYS = 3650
RANGES = {"7": 7, "30": 30, "90": 90, "": None}  # the page's choices; the API takes any 1..3650


def signal_of(h: Hypothesis) -> fleet_test.Signal:
    return fleet_test.Signal(metric=h.metric, condition=h.condition, operator=h.operator,
                             threshold=float(h.threshold), lead_s=int(h.lead_window_s))


def together_of(h: Hypothesis) -> together.Together | None:
    """The second signal a hypothesis combines its own with, or None."""
    return together.parse(h.combined_with) if h.combined_with else None


def check_testable(h: Hypothesis) -> tuple[fleet_test.Signal, fleet_test.Outcome]:
    """The hypothesis's signal and outcome, or ValueError saying why the fleet test cannot run."""
    try:
        signal = signal_of(h)
        pair = together_of(h)
        if pair is not None:
            together.check(signal.metric, signal.condition, signal.operator, signal.threshold, pair)
            pair.signal(signal.lead_s)  # its metric, condition and operator checked as the first's
        return signal, fleet_test.parse_outcome(h.outcome)
    except fleet_test.NotTestable as exc:
        raise ValueError(f"{h.short_id} cannot be tested across the fleet: {exc}") from None


def check_days(days) -> int | None:
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise ValueError(f"days: {days!r} must be a whole number of days between 1 and {MAX_DAYS}")
    return days


def start_fleet_test(user, h: Hypothesis, *, cluster: str | None = None, days: int | None = None) -> BackgroundJob:
    require_investigator(user, "starting a fleet test")
    causes.resolve(check_testable(h)[1])
    cluster = (cluster or "").strip() or None
    if cluster is not None and len(cluster) > 200:
        raise ValueError("cluster: at most 200 characters")
    params = {"hypothesis_id": h.pk, "cluster": cluster, "days": check_days(days)}
    with transaction.atomic():
        job = jobs.start_job(FLEET_TEST_KIND, params, user=user)
        job.hypothesis = h
        job.save(update_fields=["hypothesis"])
        return job


def fleet_tests_of(h: Hypothesis):
    """The hypothesis's fleet-test jobs, newest first."""
    return BackgroundJob.objects.filter(hypothesis=h, kind=FLEET_TEST_KIND).order_by("-created_at")


@job_kind(FLEET_TEST_KIND)
def run_fleet_test(ctx: JobContext) -> dict:
    """Test a hypothesis against the fleet's history (see telemetry.queries.fleet_test)."""
    h = ctx.job.hypothesis
    if h is None:
        raise ValueError(f"hypothesis {ctx.params.get('hypothesis_id')!r} does not exist")
    signal, outcome = check_testable(h)
    outcome = causes.resolve(outcome)  # a cause's interruptions as the verdicts stand now
    days = ctx.params.get("days")
    start = datetime.now(timezone.utc) - timedelta(days=int(days)) if days else None
    cluster = ctx.params.get("cluster")
    where = {"clusters": [cluster] if cluster else None, "start": start, "progress": ctx.progress,
             "timeout_s": max(1, int(ctx.remaining_s()))}
    pair = together_of(h)
    if pair is not None:  # the pair, and each of its signals alone on the same windows
        return {"hypothesis_id": h.pk, "days": days, **together.run(signal, pair, outcome, **where)}
    return {"hypothesis_id": h.pk, "days": days, **fleet_test.run(signal, outcome, **where).as_dict()}
