"""Track records: which verdicts count for a hypothesis, the precision estimate and its
interval (narrowing as verdicts accumulate), and the latest fleet test."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from investigations.models import BackgroundJob, CaseHypothesis
from investigations.services import records
from investigations.services.records import CONFIDENCE, track_record
from telemetry.stats import jeffreys_interval

from .factories import make_case, make_hypothesis, make_verdict

pytestmark = pytest.mark.django_db


def precision_interval(confirmed: int, false_positive: int):
    """The track record's precision interval: Jeffreys at the records' confidence."""
    return jeffreys_interval(confirmed, false_positive, CONFIDENCE)


def test_precision_interval_narrows_as_verdicts_accumulate():
    widths = []
    for n in (1, 2, 5, 20, 100):
        est, low, high = precision_interval(3 * n, n)
        assert est == pytest.approx(0.75)
        assert 0 <= low < est < high <= 1
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True) and widths[-1] < 0.2 < widths[0]


def test_precision_interval_edges():
    assert precision_interval(0, 0) == (None, None, None)
    est, low, high = precision_interval(4, 0)
    assert est == 1.0 and high == 1.0 and 0.4 < low < 1.0
    est, low, high = precision_interval(0, 4)
    assert est == 0.0 and low == 0.0 and 0.0 < high < 0.6
    with pytest.raises(ValueError):
        precision_interval(-1, 2)


def test_only_current_verdicts_that_concern_the_hypothesis_count(investigator):
    h = make_hypothesis(investigator)
    other = make_hypothesis(investigator)
    cases = [make_case() for _ in range(7)]
    for c in cases:
        CaseHypothesis.objects.create(case=c, hypothesis=h)
    CaseHypothesis.objects.create(case=cases[5], hypothesis=other)
    make_verdict(cases[0], "confirmed", hypothesis=h)
    make_verdict(cases[1], "false_positive", hypothesis=h)       # superseded below
    make_verdict(cases[1], "confirmed", hypothesis=h)
    make_verdict(cases[2], "false_positive")                     # names nothing: the signals were noise
    make_verdict(cases[3], "inconclusive")
    make_verdict(cases[4], "confirmed", root_cause="PSU failure")  # another cause
    make_verdict(cases[5], "confirmed", hypothesis=other)        # another hypothesis explained it
    # cases[6] has no verdict yet
    rec = track_record(h)
    assert (rec.confirmed, rec.false_positive, rec.inconclusive) == (2, 1, 1)
    assert (rec.linked, rec.undecided, rec.other_cause) == (7, 1, 2)
    assert rec.confirmed_case_ids == (cases[0].pk, cases[1].pk)
    assert rec.false_positive_case_ids == (cases[2].pk,)
    assert rec.precision == pytest.approx(2 / 3)
    assert rec.ci_low < rec.precision < rec.ci_high
    rec_other = track_record(other)
    assert (rec_other.confirmed, rec_other.false_positive, rec_other.linked) == (1, 0, 1)


def test_more_verdicts_give_a_narrower_interval_on_the_record(investigator):
    h = make_hypothesis(investigator)
    widths = []
    for kind in ("confirmed", "false_positive", "confirmed", "confirmed", "false_positive", "confirmed",
                 "confirmed", "confirmed", "false_positive", "confirmed", "confirmed", "confirmed"):
        case = make_case()
        CaseHypothesis.objects.create(case=case, hypothesis=h)
        make_verdict(case, kind, hypothesis=h)
        widths.append(track_record(h).interval_width)
    assert widths[-1] < widths[3] < widths[1]


def test_no_verdicts_no_estimate(investigator):
    rec = track_record(make_hypothesis(investigator, cases=[make_case()]))
    assert (rec.precision, rec.ci_low, rec.ci_high, rec.latest_test) == (None, None, None, None)
    assert rec.linked == rec.undecided == 1


def test_latest_test_is_the_newest_succeeded_hypothesis_test(investigator):
    h, other = make_hypothesis(investigator), make_hypothesis(investigator)
    now = timezone.now()
    BackgroundJob.objects.create(kind="fleet_test", hypothesis=h, params={"hypothesis_id": h.pk}, state="succeeded",
                                 result={"lift": 3.0, "p": 0.01}, finished_at=now - timedelta(days=2))
    newest = BackgroundJob.objects.create(kind="fleet_test", hypothesis=h, params={"hypothesis_id": h.pk}, state="succeeded",
                                          result={"lift": 7.1, "p": 2e-6, "q": 1e-4}, finished_at=now - timedelta(days=1))
    BackgroundJob.objects.create(kind="fleet_test", hypothesis=h, params={"hypothesis_id": h.pk}, state="failed",
                                 finished_at=now)
    BackgroundJob.objects.create(kind="fleet_test", hypothesis=other, params={"hypothesis_id": other.pk}, state="succeeded",
                                 result={"lift": 1.0, "p": 0.9}, finished_at=now)
    test = track_record(h).latest_test
    assert (test["job_id"], test["lift"], test["p"], test["q"]) == (newest.pk, 7.1, 2e-6, 1e-4)
    assert test["finished_at"] == newest.finished_at and test["url"] == f"/jobs/{newest.pk}/"
    assert records.latest_tests([other.pk])[other.pk]["lift"] == 1.0
