"""Each domain rule has one definition (telemetry/rules.py, Verdict.objects.current()) and the
places that apply it agree: the page form, the API, the services and the fleet test refuse the
same lead windows; models, forms and schemas offer the same vocabulary."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from investigations import forms, schemas
from investigations.models import Hypothesis, Verdict
from investigations.services import case_signals, exports, hypotheses, scans
from telemetry import catalog, rules
from telemetry.queries import fleet_test, windows

from .factories import client_for, make_case

pytestmark = pytest.mark.django_db

SIGNAL = {"statement": "PCIe replays precede XID 79", "metric": "gpu.pcie.replay", "component_scope": "gpu",
          "condition": "rate", "operator": ">", "threshold": 5, "outcome": "XID 79"}
PIN = {**SIGNAL, "threshold": "5", "lead_window_min": "120"}


def test_the_signal_vocabulary_comes_from_one_place():
    field = Hypothesis._meta.get_field
    assert [c for c, _ in field("component_scope").choices] == list(rules.COMPONENT_SCOPES)
    assert [c for c, _ in field("condition").choices] == list(rules.CONDITIONS)
    assert [c for c, _ in field("operator").choices] == list(rules.OPERATORS)
    form = forms.PinHypothesisForm()
    assert [c for c, _ in form.fields["component_scope"].choices] == list(rules.COMPONENT_SCOPES)
    assert [c for c, _ in form.fields["condition"].choices] == list(rules.CONDITIONS)
    assert [c for c, _ in form.fields["operator"].choices] == list(rules.OPERATORS)
    assert schemas.COMPONENT_SCOPES is rules.COMPONENT_SCOPES and schemas.CONDITIONS is rules.CONDITIONS
    for condition in rules.CONDITIONS:  # the fleet test accepts every condition a hypothesis may have
        fleet_test.Signal("gpu.pcie.replay", condition, ">", 1.0, 3600)
    with pytest.raises(fleet_test.NotTestable, match="condition"):
        fleet_test.Signal("gpu.pcie.replay", "spike", ">", 1.0, 3600)


def test_every_catalog_component_maps_to_a_hypothesis_scope():
    for m in catalog.CATALOG.values():
        assert rules.scope_of_component(m.component) in rules.COMPONENT_SCOPES
        assert case_signals.scope_of_metric(m.name) == rules.scope_of_component(m.component)
    assert rules.scope_of_component("cpu") == rules.scope_of_component("") == "host"


@pytest.mark.parametrize("lead_s, ok", [(0, False), (59, False), (60, True), (rules.LEAD_WINDOW_MAX_S, True),
                                        (rules.LEAD_WINDOW_MAX_S + 60, False)])
def test_every_user_of_a_lead_window_refuses_the_same_ones(lead_s, ok, investigator):
    def accepts(fn) -> bool:
        try:
            fn()
        except ValueError:
            return False
        return True

    assert accepts(lambda: rules.check_lead_window(lead_s)) is ok
    assert accepts(lambda: hypotheses.validate_signal(**SIGNAL, lead_window_s=lead_s)) is ok
    assert accepts(lambda: fleet_test.Signal("gpu.pcie.replay", "rate", ">", 5.0, lead_s)) is ok
    assert accepts(lambda: windows.check_lead(lead_s, "this")) is ok
    assert accepts(lambda: scans._params("NODE_FAIL", lead_s, None, None)) is ok
    assert accepts(lambda: exports._params(lead_s, None, True, "parquet", None)) is ok
    # The API (seconds) and the case page's form (minutes) answer the same.
    c = client_for(investigator)
    api = c.post("/api/hypotheses", json.dumps({**SIGNAL, "lead_window_s": lead_s}), content_type="application/json")
    assert (api.status_code == 201) is ok, api.content
    if lead_s % 60 == 0:
        assert forms.PinHypothesisForm({**PIN, "lead_window_min": str(lead_s // 60)}).is_valid() is ok
        case = make_case()
        page = c.post(f"/cases/{case.pk}/pin", {**PIN, "lead_window_min": str(lead_s // 60)})
        assert (page.status_code == 302) is ok
    if not ok:
        assert "lead_window_s" in api.json()["detail"]


def test_a_cases_current_verdict_is_its_newest_row_everywhere(investigator):
    from investigations.services import records, verdicts

    case = make_case()
    h = hypotheses.pin_hypothesis(investigator, case=case, **SIGNAL, lead_window_s=3600)
    verdicts.record_verdict(investigator, case, kind="false_positive", rationale="noise")
    newest = verdicts.record_verdict(investigator, case, kind="confirmed", rationale="replays", hypothesis=h)
    assert Verdict.objects.current_for([case.pk]) == {case.pk: newest}
    assert case.current_verdict == newest == verdicts.verdict_history(case)[0]
    record = records.track_record(h)
    assert record.confirmed == 1 and record.false_positive == 0  # the older verdict no longer counts
    assert [v for _, v in exports._current(["confirmed"], None)] == [newest]
    assert exports._current(["false_positive"], None) == []


def test_a_fleet_test_job_names_its_hypothesis_by_a_key(investigator):
    from investigations.models import BackgroundJob
    from investigations.services import fleet_test, records

    h = hypotheses.pin_hypothesis(investigator, **SIGNAL, lead_window_s=3600)
    other = hypotheses.pin_hypothesis(investigator, **{**SIGNAL, "statement": "other"}, lead_window_s=3600)
    job = BackgroundJob.objects.create(kind=fleet_test.FLEET_TEST_KIND, hypothesis=h, params={"hypothesis_id": "x"},
                                       state="succeeded", result={"lift": 2.0}, finished_at=timezone.now())
    BackgroundJob.objects.create(kind=fleet_test.FLEET_TEST_KIND, params={"hypothesis_id": other.pk},
                                 state="succeeded", result={"lift": 9.0}, finished_at=timezone.now() + timedelta(1))
    assert list(fleet_test.fleet_tests_of(h)) == [job] and not fleet_test.fleet_tests_of(other).exists()
    assert records.latest_tests([h.pk, other.pk]) == {h.pk: records.latest_tests([h.pk])[h.pk]}
    assert records.latest_tests([h.pk])[h.pk]["job_id"] == job.pk


def _number_input_bounds(html: str, name: str) -> tuple[float, float]:
    import re

    tag = re.search(rf'<input name="{name}"[^>]*>', html).group(0)
    return float(re.search(r'min="([^"]+)"', tag).group(1)), float(re.search(r'max="([^"]+)"', tag).group(1))


@pytest.mark.parametrize("page", ["jobs", "exports"])
def test_the_lead_window_inputs_allow_what_the_server_accepts(page, investigator):
    from django.urls import reverse

    html = client_for(investigator).get(reverse(page)).content.decode()
    low_h, high_h = _number_input_bounds(html, "lead_h")
    # the browser's bounds sit inside the rule's, and within a second of them
    assert 0 <= low_h * 3600 - rules.LEAD_WINDOW_MIN_S < 1
    assert 0 <= rules.LEAD_WINDOW_MAX_S - high_h * 3600 < 1


def test_the_case_script_clamps_points_to_the_servers_bounds(investigator):
    from investigations import permalinks

    case = make_case(investigator)
    html = client_for(investigator).get(case.get_absolute_url()).content.decode()
    assert f'data-min-points="{permalinks.MIN_POINTS}"' in html
    assert f'data-max-points="{permalinks.MAX_POINTS}"' in html
    assert permalinks.parse_points("1") == permalinks.MIN_POINTS
    assert permalinks.parse_points("99999") == permalinks.MAX_POINTS
