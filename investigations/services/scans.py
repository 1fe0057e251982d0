"""Signal scans — "what differs before failures" across the fleet — as background jobs, and
pinning a finding of a scan as a hypothesis (the start of its track record).

The ranking lives in telemetry.queries.signal_scan; here: up-front validation (so a bad outcome
is a 400, not a failed job), the job kind, and the hypothesis a finding turns into.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import transaction

from investigations.models import BackgroundJob, Hypothesis
from investigations.services import causes, hypotheses, jobs
from investigations.roles import require_investigator
from investigations.services.fleet_test import check_days
from investigations.services.jobs import JobContext, job_kind
from telemetry import catalog, rules
from telemetry.queries import signal_scan, windows

SCAN_KIND = "signal_scan"


EVERY_CLASS = "every class"  # one job, one scan per class the data has and per confirmed cause


def _is_every(outcome: str) -> bool:
    return " ".join((outcome or "").split()).lower() in (EVERY_CLASS, "every", "all classes", "each class")


def _params(outcome: str, lead_window_s, days, cluster) -> dict:
    if _is_every(outcome):
        parsed = windows.Outcome(label=EVERY_CLASS)
    else:
        try:
            parsed = windows.parse_outcome(outcome)
        except windows.NotTestable as exc:
            raise ValueError(f"{exc}; or '{EVERY_CLASS}' for one scan per class in one job") from None
        causes.resolve(parsed)  # a root cause no confirmed verdict names is refused at the start
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
    clusters = [p["cluster"]] if p["cluster"] else None
    if p["outcome"] == EVERY_CLASS:
        return signal_scan.scan_classes(class_outcomes(clusters, start), p["lead_window_s"], clusters=clusters,
                                        start=start, progress=ctx.progress, timeout_s=max(1, int(ctx.remaining_s())))
    # a cause's interruptions as the verdicts stand when the job runs
    return signal_scan.scan(causes.resolve(windows.parse_outcome(p["outcome"])), p["lead_window_s"],
                            clusters=clusters, start=start,
                            progress=ctx.progress, timeout_s=max(1, int(ctx.remaining_s())))


def class_outcomes(clusters: list[str] | None, start: datetime | None) -> list[windows.Outcome]:
    """What 'every class' scans: each class the data has (Slurm states, XIDs at t0, link down;
    not 'any interruption', which mixes them) and each root cause confirmed on cases, most
    interruptions first within each kind. ValueError where there is none."""
    found = [windows.parse_outcome(c["outcome"]) for c in signal_scan.outcome_classes(clusters, start=start)
             if c["outcome"] != "any interruption"]
    found += [causes.resolve(windows.parse_outcome(c["outcome"])) for c in causes.causes_present()]
    if not found:
        raise ValueError("no interruption in the scanned range, and no cause confirmed on cases: no class to scan")
    return found


def scan_of(job: BackgroundJob, outcome: str | None = None) -> dict:
    """The scan result of a finished scan job; for an 'every class' job, its class ``outcome``."""
    if job.kind != SCAN_KIND or job.state != BackgroundJob.State.SUCCEEDED or not isinstance(job.result, dict):
        raise ValueError(f"job {job.pk} is not a finished signal scan")
    if "classes" not in job.result:
        return job.result
    got = next((r for r in job.result["classes"] if r.get("outcome") == outcome), None)
    if got is None:
        raise ValueError(f"outcome {outcome!r} is not one of the classes job {job.pk} scanned: "
                         + ", ".join(r.get("outcome", "?") for r in job.result["classes"]))
    return got


def pin_finding(user, job: BackgroundJob, metric: str, outcome: str | None = None) -> Hypothesis:
    """A hypothesis from one row of a finished scan, over the scan's lead window: a rule past the
    95th percentile of what it reads in the scan's control windows (rules.pin_rule, also the
    bench's) — a rule that passes in at most 5 % of those healthy windows by construction, whatever
    the failures looked like; the statement says which rule, which quantile and how many control
    windows it rests on. Where the outcome names no part, the part's score against its own baseline
    (``rise``, the scan's statistic there), so a chronically noisy healthy part does not fire; where
    it names the failing part, the scan tested that part's level, and the pin is the metric's own
    value (``rate`` of a counter, ``threshold`` of a gauge) unless the ``rise`` rule, set the same
    way, passes before more of the outcome's windows. Older scans (median scores only) pin the
    midpoint of the medians; a row without scores pins the metric's value.

    The operator is the metric's bad direction in the catalog, not the side the medians happen to
    fall on: a finding that went the good way ("SBE rate lower before failures") would give a rule
    that fires almost everywhere, so it is refused. Only a metric with no bad direction takes its
    side from the medians. ``outcome``: which class of an 'every class' job."""
    require_investigator(user, "pinning a hypothesis")
    result = scan_of(job, outcome)
    row = next((r for r in result.get("rows", []) if r.get("metric") == metric), None)
    if row is None:
        raise ValueError(f"metric {metric!r} is not in the results of job {job.pk}")
    m = catalog.get(metric)
    condition, operator, threshold = rules.pin_rule(row, m.bad, m.is_counter)
    basis = rules.pin_basis(row, m.bad)
    higher = {"up": True, "down": False}.get(m.bad, operator == ">")
    outcome = result.get("outcome") or job.params.get("outcome")
    lead_h = int(job.params["lead_window_s"]) / 3600
    q = row.get("q")
    moves = (f"{'rises' if higher else 'falls'} against the part's own baseline" if condition == "rise" else
             f"runs {'higher' if higher else 'lower'}")
    evidence = f"AUC {row['auc']:.2f}, q {q:.2g}; " if q is not None and row.get("auc") is not None else ""
    if basis is not None:
        evidence += (f"threshold: the {basis['quantile'] * 100:g}th percentile of {rules.reads(basis)} in "
                     f"{basis['n_control']} control windows, passed in "
                     f"{basis['before_above'] * basis['n_before']:.0f} of {basis['n_before']} windows before")
    statement = (f"{metric} {moves} in the {lead_h:g} h before {outcome} (signal scan, job {job.pk}"
                 f"{': ' + evidence.rstrip('; ') if evidence else ''})")
    return hypotheses.pin_hypothesis(
        user, statement=statement, metric=metric, component_scope=rules.scope_of_component(m.component),
        condition=condition, operator=operator, threshold=threshold,
        lead_window_s=int(job.params["lead_window_s"]), outcome=outcome)
