"""Lag analysis as a background job (kind ``lag``): which of two signals leads, and by how much.

The parsing and the numbers live in telemetry.queries.lag_analysis and lag; here: up-front
validation (a bad side, range or lag is a 400 naming the field, not a failed job a minute later),
durable parameters (the range is fixed when the job starts, so a re-run after a restart answers
the same question), and the job kind.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction

from investigations.models import BackgroundJob
from investigations.roles import require_investigator
from investigations.services import causes, jobs
from investigations.services.jobs import JobContext, job_kind
from telemetry import timebounds
from telemetry.queries import lag_analysis
from telemetry.queries.lag import LagError

LAG_KIND = "lag"
MAX_DAYS = 366
DEFAULT_DAYS = 7


def _range(days, start: str | None, end: str | None) -> tuple[int, int]:
    """[lo_s, hi_s): absolute from/to (timebounds) when given, else the last ``days`` up to now."""
    lo, hi = timebounds.parse_range(start, end)
    if lo is not None or hi is not None:
        if days is not None:
            raise ValueError("days: give either days or from/to, not both")
        hi = hi or datetime.now(timezone.utc)
        if lo is None:
            raise ValueError("from: required with to")
    else:
        days = DEFAULT_DAYS if days is None else days
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise ValueError(f"days: {days!r} must be a whole number of days between 1 and {MAX_DAYS}")
        hi = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        lo = hi - timedelta(days=days)
    if (hi - lo).total_seconds() > MAX_DAYS * 86400:
        raise ValueError(f"from/to: at most {MAX_DAYS} days")
    return int(lo.timestamp()), int(hi.timestamp())


def lag_params(*, a: str, b: str, cluster: str, component_a: str = "", component_b: str = "", host: str = "",
               days: int | None = None, start: str | None = None, end: str | None = None, step_s: int = 60,
               max_lag_s: int = 3600) -> dict:
    """The job's parameters, checked; ValueError naming the first bad field."""
    cluster = (cluster or "").strip()
    if not cluster or len(cluster) > 200:
        raise ValueError("cluster: required, at most 200 characters")
    host = (host or "").strip()
    if len(host) > 200:
        raise ValueError("host: at most 200 characters")
    try:
        side_a = lag_analysis.parse_side(a, component_a, name="a")
        side_b = lag_analysis.parse_side(b, component_b, name="b")
        lag_analysis.check_pair(side_a, side_b)
        lag_analysis.check_lag(max_lag_s, step_s)
    except LagError as exc:
        raise ValueError(str(exc)) from None
    _resolved(side_b)  # a root cause no confirmed verdict names is refused at the start
    lo_s, hi_s = _range(days, start, end)
    return {"a": " ".join(a.split()), "b": " ".join(b.split()), "component_a": (component_a or "").strip(),
            "component_b": (component_b or "").strip(), "cluster": cluster, "host": host, "lo_s": lo_s,
            "hi_s": hi_s, "step_s": step_s, "max_lag_s": max_lag_s}


def start_lag(user, **fields) -> BackgroundJob:
    require_investigator(user, "starting a lag analysis")
    params = lag_params(**fields)
    with transaction.atomic():
        return jobs.start_job(LAG_KIND, params, user=user)


def _resolved(side):
    """The interruptions of a root cause (``cause: PSU``) as the verdicts stand (causes.resolve)."""
    if isinstance(side, lag_analysis.InterruptionsSide) and side.outcome.cause:
        return lag_analysis.InterruptionsSide(causes.resolve(side.outcome))
    return side


@job_kind(LAG_KIND)
def run_lag(ctx: JobContext) -> dict:
    """Cross-correlation of two metrics, or lead times of two kinds of events (see lag_analysis)."""
    p = ctx.params
    try:
        a = lag_analysis.parse_side(p.get("a", ""), p.get("component_a", ""), name="a")
        b = lag_analysis.parse_side(p.get("b", ""), p.get("component_b", ""), name="b")
    except LagError as exc:
        raise ValueError(str(exc)) from None
    return lag_analysis.run(p["cluster"], a, _resolved(b), lo_s=int(p["lo_s"]), hi_s=int(p["hi_s"]), host=p.get("host") or "",
                            step_s=int(p.get("step_s", 60)), max_lag_s=int(p.get("max_lag_s", 3600)),
                            progress=ctx.progress, timeout_s=max(1, int(ctx.remaining_s())))
