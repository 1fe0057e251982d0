"""The lag analysis and a combined hypothesis's fleet test in headless Chromium (Debian's, through
Playwright): from a hypothesis page to the lag form, the job run by the real in-process worker,
the lag curve and the pair-against-each-alone bars drawn. Screenshots in test-artifacts/."""
from __future__ import annotations

import re

import pytest

from .test_browser import ARTIFACTS, chromium, log_in, no_horizontal_scroll, page  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def in_process_worker():
    from webapp import celery_app
    from webapp.worker import EmbeddedWorker

    worker = EmbeddedWorker(celery_app, concurrency=1)
    worker.start()
    yield worker
    worker.stop()


def test_from_a_hypothesis_to_its_lag_analysis(page, live_server, clean_store, investigator,  # noqa: F811
                                                in_process_worker):
    from investigations.services import hypotheses
    from tests.telemetry.queries.test_lag import write_lagged

    write_lagged("browser-lag", seed=31)
    h = hypotheses.pin_hypothesis(investigator, statement="the temperature follows the power", metric="gpu.power",
                                  component_scope="gpu", condition="threshold", operator=">", threshold=600,
                                  lead_window_s=3600, outcome="XID 79")
    log_in(page, live_server.url, "alice", f"/hypotheses/{h.pk}/")
    page.click("#lag-link")
    page.wait_for_url(re.compile(r".*/jobs/\?lag_a=gpu.power#lag-form$"))
    assert page.input_value("#lag-form input[name=a]") == "gpu.power"
    page.fill("#lag-form input[name=component_a]", "gpu0")
    page.fill("#lag-form input[name=b]", "gpu.temp")
    page.fill("#lag-form input[name=cluster]", "browser-lag")
    page.click("#lag-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    page.wait_for_selector("#lag-result .plotly-figure .main-svg", timeout=90000)
    text = page.inner_text("#lag-result")
    assert "gpu.power on gpu0 leads gpu.temp by 17 min" in text and "pairs behind the peak" in text.lower()
    assert no_horizontal_scroll(page) and not page.js_errors, page.js_errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "lag-analysis.png"), full_page=True)


def test_a_combined_hypothesis_against_each_signal_alone(page, live_server, clean_store, investigator,  # noqa: F811
                                                          in_process_worker):
    from investigations.services import hypotheses
    from tests.telemetry.queries.test_together import write_pair_fleet

    write_pair_fleet("browser-pair")
    h = hypotheses.pin_hypothesis(investigator, statement="replays, then symbol errors", metric="gpu.pcie.replay",
                                  component_scope="gpu", condition="rate", operator=">", threshold=0.1,
                                  lead_window_s=6 * 3600, outcome="NODE_FAIL",
                                  combined_with="then net.symbol_errors rate > 0.1 within 30 min")
    log_in(page, live_server.url, "alice", f"/hypotheses/{h.pk}/")
    page.select_option("#test-form select[name=days]", "")
    page.fill("#test-form input[name=cluster]", "browser-pair")
    page.click("#test-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    page.wait_for_selector("#together .plotly-figure .main-svg", timeout=120000)
    page.wait_for_function("document.querySelectorAll('#test-result .plotly-figure .main-svg').length >= 4",
                           timeout=30000)
    assert "the pair beats each signal alone" in page.inner_text("#together")
    assert "used" in page.inner_text("#control-windows")
    assert no_horizontal_scroll(page) and not page.js_errors, page.js_errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fleet-test-together.png"), full_page=True)


def test_the_component_contrasts_of_a_fleet_test(page, live_server, clean_store, investigator,  # noqa: F811
                                                 in_process_worker):
    from investigations.services import fleet_test, hypotheses
    from tests.telemetry.queries.test_fleet_contrasts import write_part_fleet

    write_part_fleet("browser-parts")
    h = hypotheses.pin_hypothesis(investigator, statement="HBM runs hot before XID 94", metric="gpu.mem_temp",
                                  component_scope="gpu", condition="threshold", operator=">", threshold=85,
                                  lead_window_s=3600, outcome="XID 94")
    job = fleet_test.start_fleet_test(investigator, h, cluster="browser-parts")
    log_in(page, live_server.url, "alice", f"/jobs/{job.pk}/")
    page.wait_for_selector("#part-contrasts .plotly-figure .main-svg", timeout=90000)
    text = page.inner_text("#part-contrasts")
    assert "0 / 28" in text and "✗" not in text and "⚑" not in text  # the cause: on its part alone
    assert no_horizontal_scroll(page) and not page.js_errors, page.js_errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fleet-test-parts.png"), full_page=True)


def test_every_class_in_one_scan_job(page, live_server, clean_store, investigator, in_process_worker):  # noqa: F811
    """The scan form's 'every class': one job, a picture of each class's first finding, then each
    class's scan with its own figures — the classes the data has and the causes confirmed on cases."""
    from datetime import timedelta

    from tests.telemetry.queries import BASE
    from tests.telemetry.queries.test_fleet_test import FAILURES, write_fleet

    from .factories import make_case, make_verdict

    write_fleet("browser-classes", seed=41)
    for i, (host, hours) in enumerate(FAILURES[:3]):
        case = make_case(cluster="browser-classes", job_id=str(500 + i), t0=BASE + timedelta(hours=hours),
                         hosts=[host], n_hosts=1)
        make_verdict(case, root_cause="PSU")
    log_in(page, live_server.url, "alice", "/jobs/")
    page.fill("#scan-form input[name=outcome]", "every class")
    page.select_option("#scan-form select[name=days]", "")
    page.fill("#scan-form input[name=cluster]", "browser-classes")
    page.click("#scan-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    page.wait_for_selector("#scan-classes .plotly-figure .main-svg", timeout=120000)
    page.wait_for_selector("#scan-result-3 .plotly-figure .main-svg", timeout=30000)
    summary = page.inner_text("#scan-classes")
    assert "NODE_FAIL" in summary and "XID 79" in summary and "cause: PSU" in summary
    assert "What differs before cause: PSU" in page.inner_text("#scan-result-3")
    assert no_horizontal_scroll(page) and not page.js_errors, page.js_errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "scan-every-class.png"), full_page=True)
