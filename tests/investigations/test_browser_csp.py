"""The Content-Security-Policy in a real browser (headless Chromium): every page a person
uses renders with plotly charts drawn and Swagger UI built, and the browser reports no
policy violation and loads nothing from another origin (issue 12)."""
from __future__ import annotations

import re

import pytest

from tests.investigations.test_browser import chromium, fleet, log_in, page, wait_drawn  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sourceFile || '') + ':' + e.lineNumber));
"""


def violations(pg) -> list[str]:
    return pg.evaluate("window.__csp || []")


def test_pages_render_under_the_content_security_policy_with_no_violation(page, live_server, fleet, investigator):
    base = live_server.url
    requests: list[str] = []
    console: list[str] = []
    page.add_init_script(WATCH)
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    log_in(page, base, "alice")
    seen = {}

    page.wait_for_selector(".inbox-chart [data-plotly-figure] .main-svg")  # plotly drew the weekly bars
    seen["/"] = violations(page)
    page.locator("tr", has_text="llm-405b-7").locator("button.open-case").click()
    page.wait_for_url(re.compile(r"/cases/\d+/$"))
    wait_drawn(page)  # the overlay: plotly with its inline styles, hover layers, modebar
    page.hover("#overlay .main-svg", force=True)  # headless has no WebGL: its notice covers the plot
    seen["case"] = violations(page)
    for path, ready in (("/board/", "main"), ("/jobs/", "main"), ("/exports/", "main"),
                        ("/search/?q=llm", "main"), ("/account/tokens", "main"),
                        ("/api/docs", "#swagger-ui .swagger-ui .info")):
        page.goto(base + path)
        page.wait_for_selector(ready, timeout=30000)
        seen[path] = violations(page)
    assert all(v == [] for v in seen.values()), seen
    assert not [m for m in console if "Content Security Policy" in m], console
    assert page.js_errors == []
    foreign = [u for u in requests if not u.startswith((base, "data:", "blob:"))]
    assert foreign == [], foreign


def test_the_policy_is_enforced_an_inline_script_does_not_run(page, live_server, investigator):
    """A control: the same check sees a violation when one happens (it can fail)."""
    base = live_server.url
    page.add_init_script(WATCH)
    log_in(page, base, "alice", "/board/")
    page.evaluate("""() => { const s = document.createElement('script');
                             s.textContent = 'window.__ran = true'; document.body.appendChild(s); }""")
    page.wait_for_function("window.__csp.length > 0")
    assert page.evaluate("window.__ran === undefined")
    assert any(v.startswith("script-src") for v in violations(page)), violations(page)
