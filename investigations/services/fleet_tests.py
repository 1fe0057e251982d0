"""Fleet tests of hypotheses: start one (a background job) and run it (the job kind).

The statistics live in telemetry.queries.signal_test; this module maps a Hypothesis onto its
Signal and Outcome, checks up front that it can be tested (so a bad outcome is a 400 at the
start, not a failed job a minute later), and keeps the job's parameters small and durable:
the hypothesis id, an optional cluster, and how many days back (none: all history).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction
from django.db.models import Q

from investigations.models import BackgroundJob, Hypothesis
from investigations.services import jobs
from investigations.roles import require_investigator
from investigations.services.jobs import JobContext, job_kind
from investigations.services.records import TEST_KIND
from telemetry.queries import signal_test

MAX_DAYS = 3650
RANGES = {"7": 7, "30": 30, "90": 90, "": None}  # the page's choices; the API takes any 1..3650


def signal_of(h: Hypothesis) -> signal_test.Signal:
    return signal_test.Signal(metric=h.metric, condition=h.condition, operator=h.operator,
                              threshold=float(h.threshold), lead_s=int(h.lead_window_s))


def check_testable(h: Hypothesis) -> tuple[signal_test.Signal, signal_test.Outcome]:
    """The hypothesis's signal and outcome, or ValueError saying why the fleet test cannot run."""
    try:
        return signal_of(h), signal_test.parse_outcome(h.outcome)
    except signal_test.NotTestable as exc:
        raise ValueError(f"{h.short_id} cannot be tested across the fleet: {exc}") from None


def start_test(user, h: Hypothesis, *, cluster: str | None = None, days: int | None = None) -> BackgroundJob:
    require_investigator(user, "starting a fleet test")
    check_testable(h)
    cluster = (cluster or "").strip() or None
    if cluster is not None and len(cluster) > 200:
        raise ValueError("cluster: at most 200 characters")
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise ValueError(f"days: {days!r} must be a whole number of days between 1 and {MAX_DAYS}")
    params = {"hypothesis_id": h.pk, "cluster": cluster, "days": days}
    with transaction.atomic():
        return jobs.start_job(TEST_KIND, params, user=user)


def tests_of(h: Hypothesis):
    """The hypothesis's fleet-test jobs, newest first."""
    return (BackgroundJob.objects.filter(Q(params__hypothesis_id=h.pk) | Q(params__hypothesis_id=str(h.pk)),
                                         kind=TEST_KIND).order_by("-created_at"))


@job_kind(TEST_KIND)
def run_hypothesis_test(ctx: JobContext) -> dict:
    """Test a hypothesis against the fleet's history (see telemetry.queries.signal_test)."""
    try:
        h = Hypothesis.objects.get(pk=int(ctx.params["hypothesis_id"]))
    except (KeyError, TypeError, ValueError, Hypothesis.DoesNotExist):
        raise ValueError(f"hypothesis {ctx.params.get('hypothesis_id')!r} does not exist") from None
    signal, outcome = check_testable(h)
    days = ctx.params.get("days")
    start = datetime.now(timezone.utc) - timedelta(days=int(days)) if days else None
    cluster = ctx.params.get("cluster")
    result = signal_test.run(signal, outcome, clusters=[cluster] if cluster else None, start=start,
                             progress=ctx.progress, timeout_s=max(1, int(ctx.remaining_s())))
    return {"hypothesis_id": h.pk, "days": days, **result.as_dict()}
