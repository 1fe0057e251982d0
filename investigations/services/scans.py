"""Signal scans — "what differs before failures" across the fleet — as background jobs, and
pinning a finding of a scan as a hypothesis (the start of its track record).

The ranking lives in telemetry.queries.signal_scan; here: up-front validation (so a bad outcome
is a 400, not a failed job), the job kind, and the hypothesis a finding turns into.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction

from investigations.models import BackgroundJob, Hypothesis
from investigations.services import hypotheses, jobs
from investigations.roles import require_investigator
from investigations.services.fleet_test import check_days
from investigations.services.jobs import JobContext, job_kind
from telemetry import catalog, rules
from telemetry.queries import signal_scan, windows

SCAN_KIND = "signal_scan"


def _params(outcome: str, lead_window_s, days, cluster) -> dict:
    try:
        parsed = windows.parse_outcome(outcome)
    except windows.NotTestable as exc:
        raise ValueError(str(exc)) from None
    lead_window_s = rules.check_lead_window(lead_window_s)
    check_days(days)
    cluster = (cluster or "").strip() or None
    if cluster is not None and len(cluster) > 200:
        raise ValueError("cluster: at most 200 characters")
    return {"outcome": parsed.label, "lead_window_s": lead_window_s, "days": days, "cluster": cluster}


def start_scan(user, *, outcome: str, lead_window_s: int, days: int | None = None,
               cluster: str | None = None) -> BackgroundJob:
    require_investigator(user, "starting a signal scan")
    params = _params(outcome, lead_window_s, days, cluster)
    with transaction.atomic():
        return jobs.start_job(SCAN_KIND, params, user=user)


@job_kind(SCAN_KIND)
def run_signal_scan(ctx: JobContext) -> dict:
    """Rank every catalog metric by how it differs before the outcome (see signal_scan)."""
    p = _params(ctx.params.get("outcome", ""), ctx.params.get("lead_window_s"), ctx.params.get("days"),
                ctx.params.get("cluster"))
    start = datetime.now(timezone.utc) - timedelta(days=p["days"]) if p["days"] else None
    return signal_scan.scan(windows.parse_outcome(p["outcome"]), p["lead_window_s"],
                            clusters=[p["cluster"]] if p["cluster"] else None, start=start,
                            progress=ctx.progress, timeout_s=max(1, int(ctx.remaining_s())))


def pin_finding(user, job: BackgroundJob, metric: str) -> Hypothesis:
    """A hypothesis from one row of a finished scan: the metric passing the midpoint between its
    median before the outcome and its median in the controls, over the scan's lead window.

    The operator is the metric's bad direction in the catalog (``up``: ``>``, ``down``: ``<``),
    not the side the medians happen to fall on: a finding that went the good way ("SBE rate lower
    before failures") would give a rule that fires almost everywhere, so it is refused. Only a
    metric with no bad direction takes its side from the medians."""
    require_investigator(user, "pinning a hypothesis")
    if job.kind != SCAN_KIND or job.state != BackgroundJob.State.SUCCEEDED or not isinstance(job.result, dict):
        raise ValueError(f"job {job.pk} is not a finished signal scan")
    row = next((r for r in job.result.get("rows", []) if r.get("metric") == metric), None)
    if row is None:
        raise ValueError(f"metric {metric!r} is not in the results of job {job.pk}")
    if row.get("median_before") is None or row.get("median_control") is None:
        raise ValueError(f"{metric}: the scan has no values on both sides to set a threshold from")
    m = catalog.get(metric)
    before, control = float(row["median_before"]), float(row["median_control"])
    higher = {"up": True, "down": False}.get(m.bad, before >= control)
    if m.bad in ("up", "down") and (before < control if higher else before > control):
        raise ValueError(
            f"{metric}: the scan shows it {'lower' if higher else 'higher'} before the outcome (median "
            f"{before:.4g} against {control:.4g}), its good direction; a rule '{metric} "
            f"{'>' if higher else '<'} threshold' would fire in the controls more than before failures")
    threshold = float(f"{(before + control) / 2:.4g}")
    outcome = job.result.get("outcome") or job.params.get("outcome")
    lead_h = int(job.params["lead_window_s"]) / 3600
    q = row.get("q")
    statement = (f"{metric} runs {'higher' if higher else 'lower'} in the {lead_h:g} h before {outcome} "
                 f"(signal scan, job {job.pk}: AUC {row['auc']:.2f}, q {q:.2g})" if q is not None else
                 f"{metric} runs {'higher' if higher else 'lower'} in the {lead_h:g} h before {outcome} "
                 f"(signal scan, job {job.pk})")
    return hypotheses.pin_hypothesis(
        user, statement=statement, metric=metric, component_scope=rules.scope_of_component(m.component),
        condition="rate" if m.is_counter else "threshold", operator=">" if higher else "<", threshold=threshold,
        lead_window_s=int(job.params["lead_window_s"]), outcome=outcome)
