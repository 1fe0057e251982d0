"""Charts: pure functions from query results to plotly figures (no SQL here).

``overlay_figure`` draws the case overlay: one row per layer (and unit) on one shared,
t0-relative time axis, affected components as lines, healthy peers as a shaded
p5–p95 band with a median line (lines and bands stop at gaps of more than
``GAP_STEPS`` steps without data), events as vertical ticks in a bottom row, and a
t0 line across every row. ``interruptions_bar`` is the inbox's small weekly bar
chart. Callers serialise with ``fig.to_json()``.
"""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from telemetry import catalog, xid
from telemetry.queries.overlay import OverlayResult

LAYER_TITLES = {
    "gpu": "GPU", "nvswitch": "NVLink", "network": "Network", "storage": "Storage",
    "power": "Power", "cooling": "Cooling", "host": "Host", "job": "Job",
}
EVENT_STYLE = {  # kind -> (label, colour)
    "xid": ("XID", "#d62728"), "sxid": ("SXID", "#9467bd"), "link_down": ("link↓", "#ff7f0e"),
    "link_up": ("link↑", "#2ca02c"), "job_state": ("job", "#444444"),
}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e")
BAND_FILL = "rgba(120, 120, 120, 0.18)"
_TICK_STEPS_S = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def relative_label(seconds) -> np.ndarray:
    """Seconds relative to t0 -> 't−2h13m' / 't0' / 't+15m' (vectorised; whole minutes, seconds under 2 min)."""
    s = np.rint(np.asarray(seconds, dtype=float)).astype(np.int64)
    sign = np.where(s < 0, "t−", "t+")
    a = np.abs(s)
    d, h, m, sec = a // 86400, (a % 86400) // 3600, (a % 3600) // 60, a % 60
    parts = pd.DataFrame({"d": d, "h": h, "m": m, "s": sec})
    text = (
        np.where(parts.d > 0, parts.d.astype(str) + "d", "")
        + np.where(parts.h > 0, parts.h.astype(str) + "h", "")
        + np.where(parts.m > 0, parts.m.astype(str) + "m", "")
        + np.where((parts.s > 0) & (a < 120), parts.s.astype(str) + "s", "")
    )
    text = np.where(text == "", "0m", text)
    return np.where(s == 0, "t0", np.char.add(sign.astype(str), text.astype(str)))


def _ticks(start: float, end: float, target: int = 8) -> tuple[np.ndarray, np.ndarray]:
    span = max(end - start, 1.0)
    step = next((st for st in _TICK_STEPS_S if span / st <= target), _TICK_STEPS_S[-1])
    vals = np.arange(np.ceil(start / step) * step, end + 1e-9, step)
    if 0 not in vals and start <= 0 <= end:
        vals = np.sort(np.append(vals, 0.0))
    return vals, relative_label(vals)


GAP_STEPS = 3  # a line stops where no point came for more than this many of its usual steps


def break_gaps(x, *ys, steps: float = GAP_STEPS):
    """(x, *ys) with a NaN point inside every gap longer than ``steps`` times the median step,
    so lines (and the band's fill) stop there instead of drawing a straight line across hours
    without data."""
    x = np.asarray(x, dtype=float)
    ys = [np.asarray(y, dtype=float) for y in ys]
    if len(x) < 3:
        return (x, *ys)
    dx = np.diff(x)
    positive = dx[dx > 0]
    if not len(positive):
        return (x, *ys)
    gaps = np.flatnonzero(dx > steps * np.median(positive))
    if not len(gaps):
        return (x, *ys)
    x_out = np.insert(x, gaps + 1, (x[gaps] + x[gaps + 1]) / 2)
    return (x_out, *(np.insert(y, gaps + 1, np.nan) for y in ys))


def overlay_figure(result: OverlayResult, layers_order: Sequence[str] | None = None, *, height_per_row: int = 170,
                   webgl: bool = True) -> go.Figure:
    """One row per layer (and unit), the band behind each series, events in a bottom row. ``webgl``
    False draws the lines as SVG (a page with few series: works where WebGL does not)."""
    order = list(layers_order or catalog.LAYERS)
    present = {s.layer for s in result.series}
    layers = [l for l in order if l in present] + sorted(present - set(order))
    # A row per layer, split by unit inside a layer: a temperature and a rate on one y axis would
    # flatten the smaller one into a line at zero.
    units: dict[str, list[str]] = {}
    for s in result.series:
        if s.unit not in units.setdefault(s.layer, []):
            units[s.layer].append(s.unit)
    keys = [(layer, unit) for layer in layers for unit in units[layer]]
    rows = len(keys) + 1  # + the events row
    fig = make_subplots(
        rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.02,
        row_heights=[1.0] * len(keys) + [0.35],
        subplot_titles=None,
    )
    row_of = {key: i + 1 for i, key in enumerate(keys)}
    for (layer, unit), row in row_of.items():
        title = LAYER_TITLES.get(layer, layer)
        fig.update_yaxes(title_text=f"{title} · {unit}" if len(units[layer]) > 1 and unit else title, row=row, col=1)
    colour_index: dict[int, int] = {}
    band_drawn: set[tuple[int, str, str]] = set()
    # Say which healthy population the band describes: the fleet-wide minute band or explicit peers.
    who = {"fleet": "fleet", "fleet+peers": "fleet/peers"}.get(getattr(result, "band_source", ""), "peers")
    for s in result.series:
        row = row_of[(s.layer, s.unit)]
        colour = PALETTE[colour_index.get(row, 0) % len(PALETTE)]
        colour_index[row] = colour_index.get(row, 0) + 1
        if s.band is not None and len(s.band.x) and (row, s.metric, s.family) not in band_drawn:
            band_drawn.add((row, s.metric, s.family))
            b = s.band
            bx, p95, p5, median = break_gaps(b.x, b.p95, b.p5, b.median)
            group = f"band:{s.metric}:{s.family}"
            fig.add_trace(go.Scatter(
                x=bx, y=p95, mode="lines", line={"width": 0}, name=f"{who} p95 {s.metric}",
                legendgroup=group, showlegend=False, hoverinfo="skip",
            ), row=row, col=1)
            fig.add_trace(go.Scatter(
                x=bx, y=p5, mode="lines", line={"width": 0}, fill="tonexty", fillcolor=BAND_FILL,
                name=f"{who} p5–p95 {s.metric}", legendgroup=group, hoverinfo="skip",
            ), row=row, col=1)
            fig.add_trace(go.Scatter(
                x=bx, y=median, mode="lines", line={"width": 1, "dash": "dot", "color": "#777"},
                name=f"{who} median {s.metric}", legendgroup=group,
                hovertemplate=f"{who} median %{{y:.4g}}<extra></extra>",
            ), row=row, col=1)
        sx, sy = break_gaps(s.x, s.y)
        fig.add_trace((go.Scattergl if webgl else go.Scatter)(
            x=sx, y=sy, mode="lines", line={"width": 1.6, "color": colour},
            name=s.signal.label, customdata=relative_label(sx),
            hovertemplate=f"{html.escape(s.signal.label)}: %{{y:.4g}} {s.unit} (%{{customdata}})<extra></extra>",
        ), row=row, col=1)

    ev_row = rows
    if result.events:
        ev = pd.DataFrame({
            "x": [e.x for e in result.events], "kind": [e.kind for e in result.events],
            "code": [e.code for e in result.events], "host": [e.host for e in result.events],
            "component": [e.component for e in result.events], "message": [e.message for e in result.events],
        })
        meanings = {c: xid.describe(int(c)).meaning for c in ev.loc[ev.kind == "xid", "code"].unique()}
        ev["what"] = np.where(ev.kind == "xid", "XID " + ev.code.astype(str) + " — " + ev.code.map(meanings).fillna(""),
                              ev.kind.map(lambda k: EVENT_STYLE.get(k, (k, ""))[0]) + " " + ev.message.str.slice(0, 120))
        ev["where"] = np.where(ev.component != "", ev.component + "@" + ev.host, ev.host)
        # Plotly's hover text reads a subset of HTML: ingested text shows as typed, never as markup.
        for col in ("what", "where"):
            ev[col] = ev[col].map(html.escape)
        for kind, group in ev.groupby("kind", sort=False):
            label, colour = EVENT_STYLE.get(kind, (kind, "#555"))
            fig.add_trace(go.Scatter(
                x=group.x, y=[label] * len(group), mode="markers", name=label,
                marker={"symbol": "line-ns-open", "size": 16, "line": {"width": 2, "color": colour}, "color": colour},
                customdata=np.stack([relative_label(group.x), group["what"], group["where"]], axis=-1),
                hovertemplate="%{customdata[1]}<br>%{customdata[2]} · %{customdata[0]}<extra></extra>",
            ), row=ev_row, col=1)
    fig.update_yaxes(title_text="events", showgrid=False, row=ev_row, col=1)

    tickvals, ticktext = _ticks(result.start_offset_s, result.end_offset_s)
    fig.update_xaxes(
        range=[result.start_offset_s, result.end_offset_s], tickvals=tickvals, ticktext=ticktext,
        showspikes=True, spikemode="across", spikesnap="cursor", spikethickness=1, spikedash="solid",
    )
    fig.add_vline(x=0, line_width=1, line_dash="dash", line_color="#222", row="all", col=1)
    # Every trace on the bottom (tick-bearing) x axis: with hoversubplots="axis" one cursor then
    # shows the unified hover of all rows, not just the row under the mouse.
    bottom = "x" if rows == 1 else f"x{rows}"
    fig.update_traces(xaxis=bottom)
    fig.update_layout(
        hovermode="x unified", hoversubplots="axis", height=height_per_row * len(keys) + 120,
        margin={"l": 60, "r": 20, "t": 30, "b": 40}, legend={"orientation": "h", "y": -0.08},
        template="plotly_white",
        meta={"t0": result.t0.isoformat(), "source": result.source, "bucket_s": result.bucket_s},
    )
    return fig


def interruptions_bar(counts_df: pd.DataFrame, *, color_by: str = "state") -> go.Figure:
    """Stacked bars: interruptions per week, one colour per state (or per root cause: color_by='cause')."""
    missing = {"week", color_by, "n"} - set(counts_df.columns)
    if missing:
        raise ValueError(f"counts_df: missing column(s) {', '.join(sorted(missing))}")
    fig = go.Figure()
    if not counts_df.empty:
        wide = counts_df.pivot_table(index="week", columns=color_by, values="n", aggfunc="sum", fill_value=0).sort_index()
        for i, key in enumerate(wide.columns):
            fig.add_trace(go.Bar(
                x=wide.index, y=wide[key], name=str(key), marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate=f"{key}: %{{y}}<extra>week of %{{x|%Y-%m-%d}}</extra>",
            ))
    fig.update_layout(
        barmode="stack", height=140, margin={"l": 30, "r": 10, "t": 10, "b": 25}, template="plotly_white",
        legend={"orientation": "h", "font": {"size": 10}}, bargap=0.15,
    )
    fig.update_xaxes(tickformat="%b %d")
    return fig


def firing_rates(result: dict) -> go.Figure:
    """A fleet test's two firing rates side by side, with their 95 % intervals: how often the
    signal fired in the lead window before the outcome, and in the matched control windows."""
    t = result.get("table") or {}
    rows = [("before the outcome", result.get("recall"), result.get("recall_ci") or [None, None],
             t.get("a", 0), t.get("a", 0) + t.get("c", 0), "#b3261e"),
            ("control windows", result.get("control_rate"), result.get("control_rate_ci") or [None, None],
             t.get("b", 0), t.get("b", 0) + t.get("d", 0), "#5d6678")]
    fig = go.Figure()
    for name, rate, (lo, hi), k, n, colour in rows:
        if rate is None:
            continue
        fig.add_trace(go.Bar(
            x=[rate * 100], y=[name], orientation="h", name=name, marker_color=colour,
            error_x={"type": "data", "symmetric": False, "array": [(hi - rate) * 100], "arrayminus": [(rate - lo) * 100]},
            hovertemplate=f"{name}: {k} of {n} windows fired (%{{x:.1f}} %; 95 % interval {lo * 100:.1f}–{hi * 100:.1f} %)"
                          "<extra></extra>",
        ))
    fig.update_layout(height=150, margin={"l": 130, "r": 20, "t": 10, "b": 30}, template="plotly_white",
                      showlegend=False, bargap=0.35)
    fig.update_xaxes(title_text="windows in which the signal fired (%)", range=[0, 100], ticksuffix=" %")
    return fig


def lead_time_histogram(lead_times_s: Sequence[float]) -> go.Figure:
    """How long before t0 the signal first fired, over the windows before the outcome that fired."""
    hours = np.asarray(lead_times_s, dtype=float) / 3600.0
    fig = go.Figure(go.Histogram(
        x=-hours, marker_color=PALETTE[0], nbinsx=min(40, max(5, len(hours))),
        hovertemplate="t%{x:.1f} h: %{y} window(s)<extra></extra>",
    ))
    fig.add_vline(x=0, line={"color": "#b3261e", "width": 2})
    fig.update_layout(height=180, margin={"l": 40, "r": 20, "t": 10, "b": 35}, template="plotly_white", bargap=0.05)
    fig.update_xaxes(title_text="first firing, hours relative to t0", range=[min(-hours.max() * 1.05, -0.5), 0.2]
                     if len(hours) else None)
    fig.update_yaxes(title_text="windows")
    return fig


def scan_bars(rows: Sequence[dict]) -> go.Figure:
    """A signal scan's top findings: AUC per metric (0.5 = no difference), coloured by q."""
    rows = list(rows)[::-1]  # the best at the top
    colours = ["#b3261e" if r["q"] < 0.05 else "#a66300" if r["q"] < 0.2 else "#9aa3b5" for r in rows]
    fig = go.Figure(go.Bar(
        x=[r["auc"] for r in rows], y=[html.escape(r["metric"]) for r in rows], orientation="h", marker_color=colours,
        customdata=[[r["q"], r["p"], r["n_before"], r["n_control"]] for r in rows],
        hovertemplate="%{y}: AUC %{x:.2f}, q %{customdata[0]:.2g}, p %{customdata[1]:.2g} "
                      "(%{customdata[2]} windows before, %{customdata[3]} controls)<extra></extra>",
    ))
    fig.add_vline(x=0.5, line={"color": "#5d6678", "dash": "dot"})
    fig.update_layout(height=max(160, 22 * len(rows) + 60), margin={"l": 190, "r": 20, "t": 10, "b": 35},
                      template="plotly_white", showlegend=False, bargap=0.25)
    fig.update_xaxes(range=[0, 1], title_text="AUC: P(window before the outcome is worse than a control)")
    return fig


def class_scan_bars(results: Sequence[dict]) -> go.Figure:
    """An 'every class' scan job at a glance: per class, its first-ranked metric's −log10 q (the
    dashed line is q = 0.05), labelled with the metric and the class's interruptions; a class with
    no tested metric shows an empty bar."""
    rows = []
    for r in results:
        top = next((row for row in r.get("rows") or [] if row.get("q") is not None), None)
        rows.append((r.get("outcome", "?"), int(r.get("outcome_interruptions") or 0), top))
    rows = rows[::-1]  # the first class at the top
    qs = [top["q"] if top else None for _, _, top in rows]
    fig = go.Figure(go.Bar(
        x=[-np.log10(max(q, 1e-12)) if q is not None else 0 for q in qs],
        y=[f"{html.escape(label)} · {n}" for label, n, _ in rows], orientation="h",
        marker_color=["#b3261e" if q is not None and q < 0.05 else "#9aa3b5" for q in qs],
        text=[html.escape(top["metric"]) + (" ⚑" if top.get("flags") else "") if top else "no metric tested"
              for _, _, top in rows], textposition="auto",
        customdata=[[q if q is not None else float("nan")] for q in qs],
        hovertemplate="%{y} interruptions — first finding %{text}: q %{customdata[0]:.2g}<extra></extra>",
    ))
    fig.add_vline(x=-np.log10(0.05), line={"color": "#5d6678", "dash": "dash"})
    fig.update_layout(height=max(160, 34 * len(rows) + 60), margin={"l": 220, "r": 20, "t": 10, "b": 35},
                      template="plotly_white", showlegend=False, bargap=0.25)
    fig.update_xaxes(title_text="−log10 q of the class's first-ranked metric (dashed: q = 0.05)")
    return fig


WEEK_MS = 7 * 86_400_000


def events_weekly_bar(rows: Sequence[tuple[str, str, int]]) -> go.Figure:
    """Events per week (Monday) stacked by kind, for the events view and the host page."""
    fig = go.Figure()
    kinds = sorted({k for _, k, _ in rows})
    for kind in kinds:
        label, colour = EVENT_STYLE.get(kind, (kind, "#888"))
        pts = [(w, n) for w, k, n in rows if k == kind]
        fig.add_trace(go.Bar(x=[w for w, _ in pts], y=[n for _, n in pts], name=label, marker_color=colour or None,
                             width=[WEEK_MS * 0.85] * len(pts), offset=0,
                             hovertemplate=f"{label}: %{{y}} in the week of %{{x|%Y-%m-%d}}<extra></extra>"))
    # a date axis with week-wide bars: one week alone is drawn as that week, not as a sliver of a millisecond
    fig.update_xaxes(type="date", tickformat="%Y-%m-%d")
    fig.update_layout(barmode="stack", height=220, margin={"l": 40, "r": 10, "t": 10, "b": 30},
                      template="plotly_white", legend={"orientation": "h", "y": -0.25})
    return fig


CONTRASTS = (("healthy", "healthy parts at matched times"), ("siblings", "siblings in the same job"),
             ("own_history", "the part's own earlier windows"),
             ("job_spread", "most extreme host against the job's others (no part named)"))


def scan_contrasts(rows: Sequence[dict]) -> go.Figure:
    """Per finding, how strongly each contrast holds (−log10 p, side by side): against healthy
    parts at the same time, against the sibling parts of the same job (the workload cancels), and
    against the part's own past. A bar past the dashed line (p = 0.05) holds; a finding the
    workload explains stands tall on the first and short on the second."""
    rows = [r for r in rows if r.get("contrasts")][::-1]
    fig = go.Figure()
    for i, (key, label) in enumerate(CONTRASTS):
        ps = [((r.get("contrasts") or {}).get(key) or {}).get("p") for r in rows]
        if all(p is None for p in ps):
            continue  # a contrast none of these findings has (job spread where the outcome names the part)
        fig.add_trace(go.Bar(
            x=[-np.log10(max(p, 1e-12)) if p is not None else 0 for p in ps],
            y=[html.escape(r["metric"]) + (" ⚑" if r.get("flags") else "") for r in rows],
            orientation="h", name=label, marker_color=PALETTE[i % len(PALETTE)],
            customdata=[[p if p is not None else float("nan")] for p in ps],
            hovertemplate=f"%{{y}} — {label}: p %{{customdata[0]:.2g}}<extra></extra>",
        ))
    fig.add_vline(x=-np.log10(0.05), line={"color": "#5d6678", "dash": "dash"})
    fig.update_layout(barmode="group", height=max(200, 40 * len(rows) + 110),
                      margin={"l": 200, "r": 20, "t": 50, "b": 40}, template="plotly_white",
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}, bargap=0.2)
    fig.update_xaxes(title_text="−log10 p of each contrast (dashed: p = 0.05)")
    return fig

