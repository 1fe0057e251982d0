// The case page's overlay: the view (window w relative to t0, signals s) lives in the URL,
// so "copy link" is exactly this view. The figure comes from the server as JSON
// (/cases/<id>/overlay?w=&s=&n=) and is drawn with Plotly.react; dragging on the x axis
// re-queries the narrower window, so the server picks a finer resolution.
(function () {
  "use strict";
  const overlayEl = document.getElementById("overlay");
  if (!overlayEl) return;
  const caseUrl = overlayEl.dataset.caseUrl;
  const dataUrl = overlayEl.dataset.url;
  // points per series: the server's bounds (investigations.permalinks), handed over by the page
  const minPoints = Number(overlayEl.dataset.minPoints);
  const maxPoints = Number(overlayEl.dataset.maxPoints);
  const DEFAULT_W = [-21600, 900];
  const parse = (id) => JSON.parse(document.getElementById(id).textContent);
  const state = { w: parse("case-window"), s: parse("case-signals").map((x) => x.param) };
  const statusEl = document.getElementById("overlay-status");
  const chips = document.getElementById("signal-chips");
  const preset = document.getElementById("window-preset");
  const metricSel = document.getElementById("pick-metric");
  const targetIn = document.getElementById("pick-target");
  // Without WebGL (remote desktops, GPU-less VMs, headless browsers) scattergl cannot draw:
  // the same traces as SVG still show everything at our server-side point counts.
  const webgl = (() => {
    try { const c = document.createElement("canvas"); return !!(c.getContext("webgl") || c.getContext("experimental-webgl")); }
    catch (err) { return false; }
  })();
  let seq = 0;
  let drawing = false;
  let bound = false;
  // Opened without s=: the "what's different" fragment names the top rows to chart (see
  // views.default_signals). Only once, and only while nobody has picked a signal by hand.
  let autoPending = overlayEl.dataset.autoSignals === "1" && state.s.length === 0;
  const NO_SIGNALS = "No signals yet: add one with “+ signal”, from the topology, or from “What's different here”.";

  function viewQuery() {
    const parts = [];
    if (state.w[0] !== DEFAULT_W[0] || state.w[1] !== DEFAULT_W[1]) parts.push("w=" + state.w.join(","));
    if (state.s.length) parts.push("s=" + state.s.map(encodeURIComponent).join(",").replace(/%40/g, "@").replace(/%2F/g, "/"));
    return parts.length ? "?" + parts.join("&") : "";
  }

  function syncUrl() {
    history.replaceState(null, "", caseUrl + viewQuery());
    const copy = document.getElementById("copy-link");
    if (copy) copy.dataset.permalink = window.location.href;
    // Forms return to this view (window and signals) after a pin, verdict or comment.
    document.querySelectorAll("input.view-next").forEach((i) => { i.value = caseUrl + viewQuery(); });
    const match = Array.from(preset.options).find((o) => o.value === state.w.join(","));
    preset.value = match ? match.value : "custom";
    document.getElementById("w-start").value = Math.round(state.w[0] / 60);
    document.getElementById("w-end").value = Math.round(state.w[1] / 60);
  }

  function renderChips() {
    chips.textContent = "";
    state.s.forEach((sig) => {
      const li = document.createElement("li");
      li.className = "chip";
      li.dataset.signal = sig;
      li.appendChild(document.createTextNode(sig.replace("@", " ")));
      const x = document.createElement("button");
      x.type = "button";
      x.className = "link remove";
      x.title = "remove from the overlay";
      x.textContent = "×";
      x.addEventListener("click", () => { state.s = state.s.filter((v) => v !== sig); changed(); });
      li.appendChild(x);
      chips.appendChild(li);
    });
  }

  function setStatus(text, isError) {
    statusEl.textContent = text;
    statusEl.className = isError ? "error small" : "muted small";
  }

  function message(text, isError) {
    // purge drops the plot's event handlers too: the next drawing binds the zoom handler again.
    if (window.Plotly && overlayEl.classList.contains("js-plotly-plot")) { window.Plotly.purge(overlayEl); bound = false; }
    overlayEl.textContent = "";
    const p = document.createElement("p");
    p.className = isError ? "error overlay-message" : "muted overlay-message";
    p.textContent = text;
    overlayEl.appendChild(p);
    overlayEl.dataset.state = isError ? "error" : "empty";
  }

  async function draw() {
    const my = ++seq;
    overlayEl.dataset.state = "loading";
    setStatus("loading…");
    const n = Math.max(minPoints, Math.min(maxPoints, Math.round(overlayEl.clientWidth || 800)));
    const url = `${dataUrl}?w=${state.w.join(",")}&s=${encodeURIComponent(state.s.join(","))}&n=${n}`;
    let resp, body;
    try {
      resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      body = await resp.json();
    } catch (err) {
      if (my === seq) { message(`Could not load the overlay (${err}). Reload the page to retry.`, true); setStatus(""); }
      return;
    }
    if (my !== seq) return; // a newer request is on its way
    if (!resp.ok) { message(body.error || `The server answered ${resp.status}.`, true); setStatus(""); return; }
    if (!body.figure) { message(body.message || "Nothing to draw.", false); setStatus(""); return; }
    if (!overlayEl.classList.contains("js-plotly-plot")) overlayEl.textContent = "";
    // purge() leaves the plot's class on the element: drop an earlier message explicitly.
    overlayEl.querySelectorAll(":scope > .overlay-message").forEach((el) => el.remove());
    if (!webgl) body.figure.data.forEach((t) => { if (t.type === "scattergl") t.type = "scatter"; });
    drawing = true;
    try {
      await window.Plotly.react(overlayEl, body.figure.data, body.figure.layout, {
        responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d", "toImage"],
      });
    } finally { drawing = false; }
    if (!bound) { overlayEl.on("plotly_relayout", onRelayout); bound = true; }
    const m = body.meta;
    const res = m.source === "samples" ? `raw, ${Math.round(m.bucket_s)} s buckets` : `1-min rollup, ${Math.round(m.bucket_s / 60)} min buckets`;
    setStatus(`${res} · ${m.peers} peer hosts · ${m.points} points · ${m.events} events` +
      (m.empty.length ? ` · no data: ${m.empty.join(", ")}` : ""));
    overlayEl.dataset.state = "drawn";
  }

  function onRelayout(ev) {
    if (drawing) return;
    let lo = null, hi = null;
    for (const [k, v] of Object.entries(ev)) {
      if (/^xaxis\d*\.range\[0\]$/.test(k)) lo = v;
      else if (/^xaxis\d*\.range\[1\]$/.test(k)) hi = v;
      else if (/^xaxis\d*\.range$/.test(k) && Array.isArray(v)) { lo = v[0]; hi = v[1]; }
      else if (/^xaxis\d*\.autorange$/.test(k) && v) { state.w = DEFAULT_W.slice(); changed(); return; }
    }
    if (lo === null || hi === null) return;
    const w = [Math.floor(Number(lo)), Math.ceil(Number(hi))];
    if (!(w[1] - w[0] >= 10) || (w[0] === state.w[0] && w[1] === state.w[1])) return;
    state.w = w;
    changed();
  }

  // Rows of "what's different" already in the overlay say so (and their button does nothing more).
  function markDifferences() {
    document.querySelectorAll("#differences tr[data-signal]").forEach((tr) => {
      const on = state.s.includes(tr.dataset.signal);
      tr.classList.toggle("in-overlay", on);
      const b = tr.querySelector(".add-to-overlay");
      if (b) { b.classList.toggle("in-overlay", on); b.textContent = on ? "✓ overlay" : "+ overlay"; b.title = on ? "in the overlay" : "add to the overlay"; }
    });
  }

  function changed() {
    if (state.s.length) autoPending = false;
    syncUrl();
    renderChips();
    markDifferences();
    if (!autoPending) draw();  // a window picked while the defaults are on their way waits for them
  }

  function adoptDefaults(root) {
    const src = root.querySelector("#diff-defaults");
    let picks = [];
    try { picks = src ? JSON.parse(src.textContent) : []; } catch (err) { picks = []; }
    autoPending = false;
    if (!picks.length || state.s.length) { if (!state.s.length) message(NO_SIGNALS, false); return; }
    state.s = picks.slice();
    changed();
    setStatus("opened on the top rows of “What's different here”", false);
  }

  function addSignal(sig) {
    if (!sig || state.s.includes(sig)) return;
    state.s.push(sig);
    changed();
  }

  // Toolbar: window presets, custom window, the signal picker, copy link.
  // A chosen window (preset or custom) re-ranks "what's different" over its lead part; a zoom
  // does not (it is a look closer, and the table says which lead window it ranked).
  function rerankDifferences() {
    const diff = document.getElementById("differences");
    if (diff && window.Precursor) {
      diff.setAttribute("data-fragment", diff.getAttribute("data-fragment").replace(/w=[^&]*/, "w=" + state.w.join(",")));
      window.Precursor.loadFragment(diff);
    }
  }
  preset.addEventListener("change", () => {
    if (preset.value === "custom") { document.getElementById("w-start").focus(); return; }
    state.w = preset.value.split(",").map(Number);
    changed();
    rerankDifferences();
  });
  document.getElementById("w-apply").addEventListener("click", () => {
    const a = Math.round(Number(document.getElementById("w-start").value) * 60);
    const b = Math.round(Number(document.getElementById("w-end").value) * 60);
    if (!(b > a)) { setStatus("The window's start must be before its end.", true); return; }
    state.w = [a, b];
    changed();
    rerankDifferences();
  });
  document.getElementById("signal-picker").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const metric = metricSel.value, target = targetIn.value.trim();
    if (!metric || !target) { setStatus("Pick a metric and a host or component.", true); return; }
    addSignal(`${metric}@${target}`);
  });
  const copy = document.getElementById("copy-link");
  copy.addEventListener("click", async () => {
    const link = window.location.href;
    try {
      // The clipboard API can wait on a permission prompt: fall back after a second.
      await Promise.race([navigator.clipboard.writeText(link),
        new Promise((_, reject) => setTimeout(() => reject(new Error("clipboard timeout")), 1000))]);
    } catch (err) {
      const t = document.createElement("textarea");
      t.value = link; document.body.appendChild(t); t.select();
      try { document.execCommand("copy"); } catch (e) { /* the status below still shows the link */ }
      t.remove();
    }
    setStatus("link copied: " + link);
  });

  // Metric options that fit the chosen part (a GPU metric on a GPU, a host metric on a host).
  function filterMetrics(kind) {
    const wanted = kind === "" ? ["", "job", "cpu"] : [kind];
    Array.from(metricSel.options).forEach((o) => { if (o.value) o.hidden = !wanted.includes(o.dataset.component); });
    if (metricSel.selectedOptions[0] && metricSel.selectedOptions[0].hidden) metricSel.value = "";
  }

  document.addEventListener("click", (ev) => {
    const target = ev.target.closest(".target");
    if (target) {
      ev.preventDefault();
      targetIn.value = target.dataset.target;
      filterMetrics(target.dataset.kind || "");
      document.querySelectorAll(".target.selected").forEach((t) => t.classList.remove("selected"));
      target.classList.add("selected");
      metricSel.focus();
      return;
    }
    const add = ev.target.closest(".add-to-overlay");
    if (add) { addSignal(add.dataset.signal); return; }
    const pin = ev.target.closest(".pin-this");
    if (pin) {
      const form = document.getElementById("pin-form");
      document.getElementById("pin-details").open = true;
      form.elements.metric.value = pin.dataset.metric;
      form.elements.component_scope.value = pin.dataset.scope;
      form.elements.threshold.value = pin.dataset.threshold;
      form.elements.condition.value = pin.dataset.unit.endsWith("/s") ? "rate" : "threshold";
      if (!form.elements.statement.value) {
        form.elements.statement.value = `${pin.dataset.metric} on ${pin.dataset.where} rises above its peers before ${form.elements.outcome.value}`;
      }
      form.scrollIntoView({ block: "center" });
      form.elements.statement.focus();
    }
  });

  document.addEventListener("fragment:loaded", (ev) => {
    if (ev.target.id !== "differences") return;
    if (autoPending) adoptDefaults(ev.target);
    markDifferences();
  });

  // The topology fragment names every part of the job: offer them in the picker.
  document.addEventListener("fragment:loaded", (ev) => {
    if (!ev.target.querySelector || !ev.target.querySelector("[data-topology]")) return;
    const list = document.getElementById("targets");
    const have = new Set(Array.from(list.options).map((o) => o.value));
    ev.target.querySelectorAll(".target").forEach((t) => {
      if (have.has(t.dataset.target)) return;
      const o = document.createElement("option");
      o.value = t.dataset.target;
      list.appendChild(o);
      have.add(t.dataset.target);
    });
  });

  syncUrl();
  renderChips();
  if (autoPending) {
    overlayEl.dataset.state = "choosing";
    // The fragment failed to arrive at all (network error): say what can be done instead.
    setTimeout(() => { if (autoPending) { autoPending = false; message(NO_SIGNALS, false); } }, 90000);
  } else {
    draw();
  }
})();
