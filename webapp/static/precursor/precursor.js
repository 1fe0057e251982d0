// Precursor's page glue: fragments that load and poll, and keyboard shortcuts.
// Written for Precursor; no external assets (air-gapped clusters).
(function () {
  "use strict";
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  async function loadFragment(el) {
    const url = el.getAttribute("data-fragment");
    if (!url) return;
    try {
      const resp = await fetch(url, { headers: { "X-Fragment": "1" }, credentials: "same-origin" });
      const html = await resp.text();
      el.innerHTML = resp.ok ? html : `<p class="error">Could not load (${resp.status}). ${resp.status === 403 ? "Log in again." : "Reload the page to retry."}</p>`;
      renderFigures(el);
      el.dispatchEvent(new CustomEvent("fragment:loaded", { bubbles: true }));
      el.querySelectorAll("[data-fragment]").forEach(init);
      const state = el.querySelector("[data-state]");
      const done = state && !["queued", "running"].includes(state.getAttribute("data-state"));
      const poll = parseInt(el.getAttribute("data-poll") || "0", 10);
      if (poll > 0 && !done) setTimeout(() => loadFragment(el), poll);
    } catch (err) {
      el.innerHTML = `<p class="error">Network error: ${err}. Reload the page to retry.</p>`;
    }
  }

  // Figures embedded by the server as JSON (<div data-plotly-figure><script type="application/json">).
  function renderFigures(root) {
    root.querySelectorAll("[data-plotly-figure]").forEach((div) => {
      if (div.dataset.drawn) return;
      const src = div.querySelector('script[type="application/json"]');
      if (!src || !window.Plotly) return;
      const fig = JSON.parse(src.textContent);
      div.dataset.drawn = "1";
      window.Plotly.newPlot(div, fig.data, fig.layout, { displayModeBar: false, responsive: true });
    });
  }

  function init(el) {
    if (el.getAttribute("data-lazy") === "1") loadFragment(el);
    else if (el.getAttribute("data-poll")) setTimeout(() => loadFragment(el), parseInt(el.getAttribute("data-poll"), 10));
  }

  window.Precursor = { loadFragment, csrf, renderFigures };

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-fragment]").forEach(init);
    renderFigures(document);
  });

  // Keyboard: "/" focuses search, "g i" inbox, "g b" board.
  let pendingG = false;
  document.addEventListener("keydown", (ev) => {
    const tag = (ev.target.tagName || "").toLowerCase();
    if (["input", "textarea", "select"].includes(tag) || ev.metaKey || ev.ctrlKey || ev.altKey) return;
    if (ev.key === "/") {
      const box = document.querySelector("input[type=search]");
      if (box) { ev.preventDefault(); box.focus(); }
    } else if (pendingG && ev.key === "i") { window.location = document.body.dataset.inboxUrl; }
    else if (pendingG && ev.key === "b") { window.location = document.body.dataset.boardUrl; }
    pendingG = ev.key === "g";
  });
})();
