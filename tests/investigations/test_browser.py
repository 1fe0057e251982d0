"""The workspace in headless Chromium (Playwright against Debian's /usr/bin/chromium; never a
downloaded browser): log in, open an interruption, add a signal and see the overlay drawn,
zoom, follow a permalink, pin a hypothesis, record a verdict, find it on the board.
Screenshots go to test-artifacts/ at the repo root (git-ignored)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.investigations.test_pages import write_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
CLUSTER = "browser"


@pytest.fixture(scope="module")
def chromium():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing on CI: install Debian's chromium package (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} not installed: apt-get install chromium to run the browser tests")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop running in this thread; Django then refuses
    # the test database's set-up and flush here unless told that this thread is sync code.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.js_errors = errors
    yield pg
    context.close()


@pytest.fixture
def fleet(clean_store):
    write_fleet(CLUSTER)
    return CLUSTER


def log_in(page, base: str, username: str, path: str = "/"):
    page.goto(base + path)
    assert "/login/" in page.url  # anonymous people land on the login page
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "correct-horse-1")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(base + path).replace(r"\?", r"\?") + "$"))


def wait_drawn(page, timeout_ms: int = 60000) -> None:
    """Wait for the overlay to be drawn; on timeout say what the page showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector('#overlay[data-state="drawn"]', timeout=timeout_ms)
    except PlaywrightTimeout:
        state = page.get_attribute("#overlay", "data-state")
        raise AssertionError(f"overlay not drawn (state {state!r}): {page.inner_text('#overlay')[:300]!r}; "
                             f"status {page.inner_text('#overlay-status')!r}; js errors {page.js_errors}") from None


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_investigator_opens_an_interruption_charts_a_signal_pins_and_records_a_verdict(page, live_server, fleet, investigator):
    ARTIFACTS.mkdir(exist_ok=True)
    base = live_server.url
    log_in(page, base, "alice")
    row = page.locator("tr", has_text="llm-405b-7")
    assert "XID 79 gpu3@n01" in row.inner_text()
    page.wait_for_selector(".inbox-chart [data-plotly-figure] .main-svg")  # the weekly bars are drawn
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "inbox.png"), full_page=True)

    row.locator("button.open-case").click()
    page.wait_for_url(re.compile(r"/cases/\d+/$"))
    case_url = page.url
    assert "Case #" in page.inner_text("h1")

    # Opened without signals, the case charts the top rows of "what's different" (the runaway
    # GPU first) and writes them into the URL, so "copy link" is this view.
    wait_drawn(page)
    page.wait_for_function("location.search.includes('s=')")
    defaults = page.url.split("s=", 1)[1].split("&")[0].split(",")
    assert 3 <= len(defaults) <= 4 and defaults[0].endswith("@n01/gpu3")
    assert page.locator("#signal-chips .chip").count() == len(defaults)
    assert page.locator("#differences tr.in-overlay").count() == len(defaults)
    assert page.locator("#differences .add-to-overlay.in-overlay").first.inner_text() == "✓ overlay"
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "case-defaults.png"), full_page=True)
    # Removing them all leaves an empty overlay and a URL without s=.
    while page.locator("#signal-chips .chip").count():
        page.locator("#signal-chips .chip .remove").first.click()
    page.wait_for_selector('#overlay[data-state="empty"]')
    assert "No signals yet" in page.inner_text("#overlay") and "s=" not in page.url

    # The picker knows the topology: click the GPU, choose a GPU metric, add it.
    page.click('#topology button.target[data-target="n01/gpu3"]')
    assert page.input_value("#pick-target") == "n01/gpu3"
    page.select_option("#pick-metric", "gpu.pcie.replay")
    page.click("#add-signal")
    wait_drawn(page)
    assert "s=gpu.pcie.replay@n01/gpu3" in page.url
    assert "No signals yet" not in page.inner_text("#overlay")  # the empty-state message is gone
    # Lines, the peers' shaded band and the event ticks are in the drawing.
    assert page.locator("#overlay .scatterlayer .trace").count() >= 4
    assert page.locator("#overlay .js-fill").count() >= 1
    assert page.locator("#overlay .legendtext", has_text="peers p5–p95").count() == 1
    assert page.locator("#overlay .legendtext", has_text="XID").count() == 1
    page.click("#topology button.target[data-target='n01']")
    page.select_option("#pick-metric", "cooling.inlet_temp")
    page.click("#add-signal")
    page.wait_for_function("document.querySelector('#signal-chips').children.length === 2")
    wait_drawn(page)
    page.wait_for_selector("#differences table.differences", timeout=30000)
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "case-overlay.png"), full_page=True)

    # Zooming on the x axis re-queries the narrower window and rewrites the URL.
    page.evaluate("Plotly.relayout(document.getElementById('overlay'), {'xaxis.range[0]': -1800, 'xaxis.range[1]': 120})")
    page.wait_for_function("location.search.includes('w=-1800,120')")
    wait_drawn(page)
    status = page.inner_text("#overlay-status")
    assert "raw" in status and "4 peer hosts" in status
    page.click("#copy-link")
    page.wait_for_function("document.getElementById('overlay-status').textContent.includes('link copied')")
    permalink = page.url

    # The permalink shows the same view in a fresh page.
    other = page.context.new_page()
    other.goto(permalink)
    other.js_errors = []
    wait_drawn(other)
    chips = other.locator("#signal-chips .chip").all_inner_texts()
    assert [c.replace("×", "").strip() for c in chips] == ["gpu.pcie.replay n01/gpu3", "cooling.inlet_temp n01"]
    assert other.input_value("#w-start") == "-30"
    other.close()

    # A custom window re-ranks "what's different" over its lead part (a zoom does not).
    assert "t−6h … t0" in page.inner_text("#differences")
    page.select_option("#window-preset", "custom")
    page.fill("#w-start", "-120")
    page.fill("#w-end", "10")
    page.click("#w-apply")
    page.wait_for_function("location.search.includes('w=-7200,600')")
    page.wait_for_function("document.getElementById('differences').textContent.includes('t−2h … t0')",
                           timeout=30000)

    # Pin a hypothesis (with markup in it), from the "what's different" row.
    page.goto(case_url)
    page.wait_for_selector("#differences .pin-this", timeout=30000)
    page.locator("#differences .pin-this").first.click()
    assert page.input_value("#pin-form input[name=metric]") in ("gpu.pcie.replay", "gpu.temp")
    page.fill("#pin-form textarea[name=statement]", "<b>PCIe replays</b> precede XID 79")
    page.fill("#pin-form input[name=outcome]", "XID 79")
    page.click("#pin-submit")
    page.wait_for_selector("text=Pinned H")
    assert page.locator("#hypotheses .statement").first.inner_text() == "<b>PCIe replays</b> precede XID 79"
    # The page after the pin redirect draws the overlay and loads "what's different" again, above
    # the verdict form: let them land first, as a person would, so no layout shift moves the
    # form under the clicks (a CI run once timed out waiting for "Verdict recorded").
    wait_drawn(page)
    page.wait_for_selector("#differences table.differences", timeout=30000)

    # Record a verdict naming it; a rationale is required.
    page.check("#verdict-form input[name=kind][value=confirmed]")
    page.select_option("#verdict-form select[name=hypothesis]", index=1)
    page.fill("#verdict-form textarea[name=rationale]", "replays climbed for 40 min before the XID; peers flat")
    page.click("#verdict-submit")
    try:
        page.wait_for_selector("text=Verdict recorded")
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "case-verdict-missing.png"), full_page=True)  # what the page showed
        raise
    assert "Confirmed" in page.inner_text(".verdict-now")
    wait_drawn(page)  # the page after the verdict redirect draws the same view again
    page.screenshot(path=str(ARTIFACTS / "case-verdict.png"), full_page=True)

    # Find it on the board ("g b"), with its track record.
    page.keyboard.press("g")
    page.keyboard.press("b")
    page.wait_for_url(base + "/board/")
    board_row = page.locator("table.board tbody tr", has_text="PCIe replays")
    assert board_row.count() == 1
    text = board_row.inner_text()
    assert "<b>PCIe replays</b>" in text and "✓1" in text and "XID 79" in text
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "board.png"), full_page=True)
    assert page.js_errors == []


def test_a_viewer_reads_the_case_without_verdict_controls(page, live_server, fleet, investigator, viewer):
    from investigations.services import cases

    case = cases.open_case(investigator, CLUSTER, "4242")
    log_in(page, live_server.url, "victor", f"/cases/{case.pk}/?s=gpu.temp@n01/gpu3")
    wait_drawn(page)
    assert page.locator("#verdict-form").count() == 0
    assert page.locator("text=record verdict").count() == 0
    assert "needs the investigator role" in page.inner_text("#verdicts")
    assert page.js_errors == []


def test_an_investigator_runs_a_fleet_test_and_reads_its_result(page, live_server, clean_store, investigator):
    from investigations.services import hypotheses
    from tests.telemetry.queries.test_fleet_test import write_fleet as write_known_fleet
    from webapp import celery_app
    from webapp.worker import EmbeddedWorker

    write_known_fleet("browser-ft", seed=5)
    h = hypotheses.pin_hypothesis(investigator, statement="PCIe replays climb before node failures",
                                  metric="gpu.pcie.replay", component_scope="gpu", condition="rate", operator=">",
                                  threshold=0.1, lead_window_s=6 * 3600, outcome="NODE_FAIL")
    worker = EmbeddedWorker(celery_app, concurrency=1)
    worker.start()
    try:
        log_in(page, live_server.url, "alice", f"/hypotheses/{h.pk}/")
        page.select_option("#test-form select[name=days]", "")
        page.fill("#test-form input[name=cluster]", "browser-ft")
        page.click("#test-form button[type=submit]")
        page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
        page.wait_for_selector("#test-result", timeout=90000)
        page.wait_for_function("document.querySelectorAll('#test-result .plotly-figure .main-svg').length >= 2",
                               timeout=30000)
    finally:
        worker.stop()
    text = page.inner_text("#test-result")
    assert "Fleet test of H" in text and "p, Fisher one-sided" in text and "100 %" in text  # recall: 6 of 6
    assert page.locator("#job-cancel").count() == 0  # the job is done: nothing to cancel
    assert no_horizontal_scroll(page) and not page.js_errors, page.js_errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fleet-test.png"), full_page=True)


@pytest.mark.slow  # two background jobs (a scan and an export) through the worker
def test_an_admin_maps_an_unknown_metric_on_the_catalog_page_and_charts_it(page, live_server, clean_store, admin_user):
    """A name the catalog did not know (stored before it was mapped) becomes a new metric on the
    catalog page; the rows already stored move to it and the case picker and overlay chart it."""
    from datetime import timedelta

    from telemetry import catalog_store, store
    from telemetry.ingestion import service
    from tests.investigations.test_pages import T0

    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    write_fleet("catalog-browser")
    start = T0 - timedelta(hours=1)
    for i in range(0, 75, 5):  # five-minute scrapes of n01's GPUs, an hour before t0 to 15 min after
        ts_ms = int((start + timedelta(minutes=i)).timestamp() * 1000)
        body = "".join(f'mem_free_pct{{component="gpu{g}",hostname="n01"}} {80 - (i if g == 3 else 0) / 2}\n'
                       for g in range(4))
        service.ingest_prometheus_text(body, "catalog-browser", default_ts_ms=ts_ms)
    try:
        base = live_server.url
        log_in(page, base, "ada", "/catalog/")
        row = page.locator("table.unknown-names tr", has_text="mem_free_pct")
        assert "60" in row.inner_text()  # 15 scrapes x 4 GPUs stored under the unknown name
        row.locator("summary").click()
        form = row.locator("form.new-metric")
        form.locator("input[name=new_name]").fill("gpu.mem_free_pct")
        form.locator("select[name=layer]").select_option("gpu")
        form.locator("input[name=unit]").fill("%")
        form.locator("select[name=kind]").select_option("gauge")
        form.locator("select[name=bad]").select_option("down")
        form.locator("select[name=component]").select_option("gpu")
        form.locator("input[name=description]").fill("Free GPU memory")
        form.locator("button[name=add]").click()
        page.wait_for_selector(".messages")
        assert "mem_free_pct now maps to gpu.mem_free_pct; 60 stored rows moved" in page.inner_text(".messages")
        assert page.locator("table.unknown-names").count() == 0
        assert "yours" in page.locator("table.catalog tr", has_text="gpu.mem_free_pct").inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "catalog-mapped.png"), full_page=True)

        page.goto(base + "/")
        page.locator("tr", has_text="llm-405b-7").locator("button.open-case").click()
        page.wait_for_url(re.compile(r"/cases/\d+/$"))
        wait_drawn(page)
        page.click('#topology button.target[data-target="n01/gpu3"]')
        assert page.locator("#pick-metric option[value='gpu.mem_free_pct']").count() == 1  # in the picker
        page.select_option("#pick-metric", "gpu.mem_free_pct")
        page.click("#add-signal")
        page.wait_for_function("location.search.includes('gpu.mem_free_pct@n01/gpu3')")
        wait_drawn(page)
        assert page.locator("#overlay .legendtext", has_text="gpu.mem_free_pct").count() >= 1  # in the overlay
        assert not page.js_errors, page.js_errors
        page.screenshot(path=str(ARTIFACTS / "catalog-overlay.png"), full_page=True)

        # The mapped metric is in a signal scan and an export, run by the real in-process worker.
        from investigations.models import Case
        from investigations.services import verdicts
        from webapp import celery_app
        from webapp.worker import EmbeddedWorker

        case = Case.objects.get(cluster="catalog-browser", job_id="4242")
        verdicts.record_verdict(admin_user, case, kind="confirmed", root_cause="GPU memory leak",
                                rationale="free memory drained")
        worker = EmbeddedWorker(celery_app, concurrency=1)
        worker.start()
        try:
            page.goto(base + "/jobs/")
            page.fill("#scan-form input[name=outcome]", "NODE_FAIL")
            page.fill("#scan-form input[name=lead_h]", "1")
            page.select_option("#scan-form select[name=days]", "")
            page.fill("#scan-form input[name=cluster]", "catalog-browser")
            page.click("#scan-form button[type=submit]")
            page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
            page.wait_for_selector("table.scan-rows", timeout=120000)
            # One interruption is too few windows to test: the metric is a row of the scan's
            # result, listed among those not tested with the reason.
            scanned = page.inner_text("#scan-result")
            assert "gpu.mem_free_pct" in scanned and "mem_free_pct " not in scanned.replace("gpu.mem_free_pct", "")
            # a row of the scan's table (as "not tested", with its reason), not only the list below it
            assert page.locator("table.scan-rows tbody tr", has_text="gpu.mem_free_pct").count() == 1

            page.goto(base + "/exports/")
            page.fill("#export-form input[name=lead_h]", "1")
            page.select_option("#export-form select[name=format]", "csv")
            page.fill("#export-form input[name=cluster]", "catalog-browser")
            page.click("#export-form button[type=submit]")
            page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
            page.wait_for_selector("#export-download", timeout=120000)
            got = page.request.get(base + page.get_attribute("#export-download", "href"))
            assert got.status == 200
            header = got.text().splitlines()[0].split(",")
            assert "f:gpu.mem_free_pct" in header and "f:mem_free_pct" not in header
        finally:
            worker.stop()
    finally:
        store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
        catalog_store.refresh(force=True)


def test_a_host_found_by_search_shows_its_signals_chart_first(page, live_server, fleet, investigator):
    """Search -> host page: the host's main signals are drawn first (before inventory and events),
    with samples and gaps per series; the events view links to the same panel."""
    base = live_server.url
    log_in(page, base, "alice", "/search/?q=n01")
    page.click(f"a[href='/hosts/n01/?cluster={CLUSTER}']")
    page.wait_for_url(re.compile(r"/hosts/n01/\?cluster="))
    page.wait_for_selector("#signals .plotly-figure .main-svg", timeout=60000)
    ARTIFACTS.mkdir(exist_ok=True)
    facts = page.locator("#signals table.signal-facts tbody tr")
    assert facts.count() >= 4 and "gpu.temp" in page.inner_text("#signals table.signal-facts")
    # one line per series drawn (SVG lines; the XID marker is one more trace)
    assert page.locator("#signals .scatterlayer .trace .js-line").count() == facts.count()
    page.screenshot(path=str(ARTIFACTS / "host-signals.png"), full_page=True)
    chart_y = page.locator("#signals figure").bounding_box()["y"]
    assert chart_y < page.locator(".host-facts").bounding_box()["y"]  # the plot comes first
    assert not page.js_errors, page.js_errors
    page.goto(base + "/events/?host=n01")
    page.locator("a", has_text="signals").first.click()
    page.wait_for_selector("#signals .plotly-figure .main-svg", timeout=60000)
    assert "from=" in page.url and page.locator("#signals table.signal-facts tbody tr").count() >= 4
