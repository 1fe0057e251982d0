"""Track record of a hypothesis: what the verdicts on its linked cases say, the latest
fleet-wide test, and an estimate of its precision with an uncertainty interval.

Which verdicts count
--------------------
Only the *current* verdict of each case linked to the hypothesis (older rows are history).
  - a verdict naming this hypothesis counts as its kind (confirmed / false positive /
    inconclusive);
  - a verdict naming no hypothesis counts when it is a false positive (the signals pinned
    to the case were noise) or inconclusive; a confirmed verdict that names only a root
    cause is "other cause": something else explained the case, so it is neither a hit nor
    a false alarm of this hypothesis and is counted apart;
  - a verdict naming another hypothesis is about that one: counted as "other cause" when
    confirmed, otherwise not at all.

Precision
---------
precision = confirmed / (confirmed + false positive), with the Jeffreys 95% interval
(the equal-tailed interval of the Beta(c + ½, f + ½) posterior; lower bound 0 when c = 0,
upper bound 1 when f = 0, per Brown, Cai & DasGupta 2001). It narrows as verdicts
accumulate. None while there is no confirmed or false-positive verdict.

Fleet test
----------
``latest_test`` is the newest succeeded BackgroundJob of kind ``fleet_test`` whose
foreign key names the hypothesis: its lift, p (and q when present) and finish time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.urls import reverse

from investigations.models import BackgroundJob, CaseHypothesis, Hypothesis, Verdict
from investigations.services.fleet_test import FLEET_TEST_KIND
from telemetry.stats import jeffreys_interval

CONFIDENCE = 0.95


@dataclass(frozen=True)
class TrackRecord:
    confirmed: int = 0
    false_positive: int = 0
    inconclusive: int = 0
    precision: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    latest_test: dict | None = None
    linked: int = 0  # cases linked to the hypothesis
    undecided: int = 0  # linked cases without any verdict yet
    other_cause: int = 0  # linked cases confirmed with another cause
    confirmed_case_ids: tuple[int, ...] = field(default=())
    false_positive_case_ids: tuple[int, ...] = field(default=())

    @property
    def decided(self) -> int:
        return self.confirmed + self.false_positive

    @property
    def interval_width(self) -> float | None:
        return None if self.ci_low is None else self.ci_high - self.ci_low


def _test_summary(job: BackgroundJob) -> dict:
    result = job.result or {}
    return {
        "job_id": job.pk,
        "lift": result.get("lift"),
        "p": result.get("p", result.get("p_value")),
        "q": result.get("q"),
        "finished_at": job.finished_at,
        "url": reverse("job", args=[job.pk]),
    }


def latest_tests(hypothesis_ids) -> dict[int, dict]:
    """The newest succeeded fleet test of each hypothesis."""
    ids = [int(i) for i in hypothesis_ids]
    if not ids:
        return {}
    jobs = (BackgroundJob.objects.filter(hypothesis_id__in=ids, kind=FLEET_TEST_KIND, state=BackgroundJob.State.SUCCEEDED)
            .order_by("-finished_at", "-pk"))
    found: dict[int, dict] = {}
    for job in jobs:
        found.setdefault(job.hypothesis_id, _test_summary(job))
        if len(found) == len(ids):
            break
    return found


def track_records(hypotheses) -> dict[int, TrackRecord]:
    """Track records of many hypotheses in a few queries (the board needs them all)."""
    ids = [h.pk if isinstance(h, Hypothesis) else int(h) for h in hypotheses]
    if not ids:
        return {}
    links = list(CaseHypothesis.objects.filter(hypothesis_id__in=ids).values_list("hypothesis_id", "case_id"))
    case_ids = {c for _, c in links}
    current = {case_id: (v.kind, v.hypothesis_id)
               for case_id, v in Verdict.objects.only("case_id", "kind", "hypothesis_id").current_for(case_ids).items()}
    tests = latest_tests(ids)
    tallies = {hid: {"confirmed": [], "false_positive": [], "inconclusive": 0, "linked": 0, "undecided": 0,
                     "other_cause": 0} for hid in ids}
    for hid, case_id in links:
        t = tallies[hid]
        t["linked"] += 1
        if case_id not in current:
            t["undecided"] += 1
            continue
        kind, named = current[case_id]
        if named == hid or (named is None and kind != Verdict.Kind.CONFIRMED):
            if kind == Verdict.Kind.INCONCLUSIVE:
                t["inconclusive"] += 1
            else:
                t[kind].append(case_id)
        elif kind == Verdict.Kind.CONFIRMED:
            t["other_cause"] += 1
    records = {}
    for hid in ids:
        t = tallies[hid]
        c, f = len(t["confirmed"]), len(t["false_positive"])
        est, low, high = jeffreys_interval(c, f, CONFIDENCE)
        records[hid] = TrackRecord(
            confirmed=c, false_positive=f, inconclusive=t["inconclusive"], precision=est, ci_low=low, ci_high=high,
            latest_test=tests.get(hid), linked=t["linked"], undecided=t["undecided"], other_cause=t["other_cause"],
            confirmed_case_ids=tuple(sorted(t["confirmed"])), false_positive_case_ids=tuple(sorted(t["false_positive"])),
        )
    return records


def track_record(hypothesis: Hypothesis) -> TrackRecord:
    return track_records([hypothesis])[hypothesis.pk]
