"""Charts of the analysis jobs' newer results: the lag analysis (the lag curve, lead times both
ways), a combined hypothesis against each of its signals alone, and a fleet test's component
contrasts and control windows. Pure functions from a job's result dict to plotly figures, like
investigations/charts.py, whose palette they share."""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from investigations.charts import BAND_FILL, PALETTE


def _minutes(seconds: float) -> str:
    m = seconds / 60
    return f"{m:+.0f} min" if abs(m) < 120 else f"{m / 60:+.1f} h"


def lag_curve(r: dict) -> go.Figure:
    """A lag analysis of two series: the pooled correlation at each lag (x > 0: a leads b), the
    band a correlation of unrelated series stays in (±1.96/√n), the best lag marked with the span
    it takes over host resamples, and the pairs behind the peak."""
    x = [s / 60 for s in r.get("lag_s") or []]
    corr = [c if c is not None else float("nan") for c in r.get("corr") or []]
    fig = go.Figure(go.Scatter(
        x=x, y=corr, mode="lines", line={"color": PALETTE[0], "width": 2}, name="correlation",
        customdata=r.get("pairs") or [], hovertemplate="lag %{x:+.0f} min: r %{y:.3f} (%{customdata} pairs)<extra></extra>",
    ))
    band = r.get("band")
    if band:
        fig.add_hrect(y0=-band, y1=band, fillcolor=BAND_FILL, line_width=0,
                      annotation_text="chance (±1.96/√n)", annotation_position="bottom left")
    best = r.get("best_lag_s")
    if best is not None:
        iv = r.get("best_lag_interval_s")
        if iv and iv[1] > iv[0]:
            fig.add_vrect(x0=iv[0] / 60, x1=iv[1] / 60, fillcolor="rgba(179, 38, 30, 0.12)", line_width=0)
        fig.add_trace(go.Scatter(
            x=[best / 60], y=[r.get("best_corr")], mode="markers", marker={"color": "#b3261e", "size": 11},
            name="best lag", hovertemplate="best lag %{x:+.0f} min: r %{y:.3f}<extra></extra>"))
        span = f", 95 % over hosts {_minutes(iv[0])} … {_minutes(iv[1])}" if iv else ""
        fig.add_annotation(x=best / 60, y=r.get("best_corr"), yshift=14, showarrow=False, font={"size": 11},
                           text=html.escape(f"{_minutes(best)} (r {r.get('best_corr'):.2f}{span}; "
                                            f"n = {r.get('best_pairs', 0):,} pairs on {r.get('hosts', 0)} hosts)"))
    fig.add_vline(x=0, line={"color": "#5d6678", "dash": "dot"})
    fig.update_layout(height=300, margin={"l": 50, "r": 20, "t": 30, "b": 40}, template="plotly_white",
                      showlegend=False)
    fig.update_xaxes(title_text=html.escape(f"lag, minutes (> 0: {r.get('a')} moves first)"))
    fig.update_yaxes(title_text="correlation", range=[-1.05, 1.1])
    return fig


def event_lead_bars(r: dict) -> go.Figure:
    """A lag analysis of two kinds of events: how long before each later event the latest earlier
    one came, in both directions side by side, with how many of the later events that covers."""
    fig = go.Figure()
    for key, colour in (("forward", "#b3261e"), ("reverse", "#5d6678")):
        d = r.get(key)
        if not d:
            continue
        edges = np.asarray(d["edges_s"], dtype=float) / 60
        name = f"{d['earlier']} before {d['later']} ({d['n_preceded']} of {d['n_later']})"
        fig.add_trace(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=d["counts"], width=np.diff(edges) * 0.45,
                             name=html.escape(name), marker_color=colour,
                             hovertemplate=html.escape(name) + ": %{y} at ~%{x:.0f} min<extra></extra>"))
        if d.get("median_lead_s") is not None:
            fig.add_vline(x=d["median_lead_s"] / 60, line={"color": colour, "dash": "dash"})
    fig.update_layout(barmode="group", height=260, margin={"l": 50, "r": 20, "t": 10, "b": 40},
                      template="plotly_white", legend={"orientation": "h", "y": -0.3})
    fig.update_xaxes(title_text="lead time, minutes before the later event (dashed: median)")
    fig.update_yaxes(title_text="later events")
    return fig


def together_bars(rows: Sequence[dict]) -> go.Figure:
    """A combined hypothesis's fleet test: for the pair and each of its signals alone (on the same
    windows), how often it fired before the outcome (recall), in the controls, and how many of its
    alarms the outcome followed (precision) — grouped, with Jeffreys 95 % intervals and counts."""
    measures = (("recall", "recall_ci", "fired before the outcome"), ("control_rate", None, "fired in controls"),
                ("precision", "precision_ci", "alarms followed by the outcome"))
    colours = {"together": "#b3261e", "A alone": PALETTE[0], "B alone": "#5d6678"}
    fig = go.Figure()
    for row in rows:
        t = row.get("table") or {}
        counts = {"recall": (t.get("a", 0), t.get("a", 0) + t.get("c", 0)),
                  "control_rate": (t.get("b", 0), t.get("b", 0) + t.get("d", 0)),
                  "precision": (row.get("true_alarms", 0), row.get("alarms", 0))}
        ys, lo, hi, text = [], [], [], []
        for key, ci_key, _ in measures:
            v = row.get(key)
            ci = row.get(ci_key) if ci_key else None
            ys.append(v * 100 if v is not None else None)
            lo.append((v - ci[0]) * 100 if v is not None and ci and ci[0] is not None else 0)
            hi.append((ci[1] - v) * 100 if v is not None and ci and ci[1] is not None else 0)
            k, n = counts[key]
            text.append(f"{k}/{n}")
        fig.add_trace(go.Bar(
            x=[label for _, _, label in measures], y=ys, name=html.escape(f"{row['role']}: {row['signal']}"),
            marker_color=colours.get(row["role"], "#888"), text=text, textposition="outside",
            error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
            hovertemplate=html.escape(row["role"]) + " — %{x}: %{y:.0f} % (%{text})<extra></extra>",
        ))
    fig.update_layout(barmode="group", height=260, margin={"l": 45, "r": 10, "t": 10, "b": 30},
                      template="plotly_white", legend={"orientation": "h", "y": -0.18, "font": {"size": 10}},
                      bargap=0.25)
    fig.update_yaxes(range=[0, 115], ticksuffix=" %")
    return fig


CONTROL_REASONS = (  # controls_excluded key -> what a person reads
    ("outside_history", "outside the data's history"), ("interrupted", "an interruption touched its hosts"),
    ("idle", "its hosts ran no job"), ("too_few_peers", "too few healthy peers at that time"),
    ("beyond_k", "usable, beyond the k drawn"),
)


def controls_left_out(result: dict) -> int:
    """Candidate controls a test left out (every reason, and no data for the metric)."""
    excluded = result.get("controls_excluded") or {}
    return sum(excluded.get(k, 0) for k, _ in CONTROL_REASONS) + (result.get("no_data") or {}).get("controls", 0)


def control_windows(result: dict) -> go.Figure:
    """Where a fleet test's controls came from: the windows used (the same hosts at other times,
    healthy peers at the same time), those left out for lack of the metric's data, and the
    candidates left out by reason — one bar each, with its count."""
    used = result.get("controls") or {}
    excluded = result.get("controls_excluded") or {}
    labels = dict(CONTROL_REASONS)
    rows = [("used: same hosts, other times", used.get("same_hosts", 0), "#2e7d32"),
            ("used: healthy peers, same time", used.get("peers", 0), "#2e7d32"),
            ("left out: no data for the metric", (result.get("no_data") or {}).get("controls", 0), "#a66300")]
    rows += [(f"left out: {labels.get(k, k.replace('_', ' '))}", v, "#9aa3b5") for k, v in excluded.items()
             if k in labels]  # (before_interrupted counts windows before the outcome, not controls)
    rows = rows[::-1]
    fig = go.Figure(go.Bar(
        x=[n for _, n, _ in rows], y=[label for label, _, _ in rows], orientation="h",
        marker_color=[c for _, _, c in rows], text=[f"{n:,}" for _, n, _ in rows], textposition="outside",
        hovertemplate="%{y}: %{x:,} windows<extra></extra>",
    ))
    top = max([n for _, n, _ in rows] + [1])
    fig.update_layout(height=40 + 22 * len(rows), margin={"l": 230, "r": 40, "t": 5, "b": 30},
                      template="plotly_white", showlegend=False, bargap=0.25)
    fig.update_xaxes(title_text="candidate control windows", range=[0, top * 1.2])
    fig.update_yaxes(ticksuffix="   ")
    return fig


def part_contrasts(result: dict) -> go.Figure:
    """A fleet test's component contrasts: how often the rule fired on the failing part in its lead
    window, on the sibling parts of the same job in the same window, in the failing part's own
    earlier windows, and in the healthy control windows — Jeffreys 95 % intervals and counts."""
    c = result.get("component_contrasts") or {}
    t = result.get("table") or {}
    control = {"fired": t.get("b", 0), "windows": t.get("b", 0) + t.get("d", 0), "rate": result.get("control_rate"),
               "ci": result.get("control_rate_ci") or [None, None]}
    rows = [("failing part, before the outcome", c.get("failing_part"), "#b3261e"),
            ("sibling parts, same job and window", c.get("siblings"), PALETTE[0]),
            ("failing part, its own earlier windows", c.get("own_history"), "#8c564b"),
            ("healthy control windows", control, "#5d6678")][::-1]
    rows = [(label, d, colour) for label, d, colour in rows if d and d.get("rate") is not None]
    fig = go.Figure()
    for label, d, colour in rows:
        lo, hi = d["ci"]
        fig.add_trace(go.Bar(
            x=[d["rate"] * 100], y=[f"{label} · {d['fired']}/{d['windows']}"], orientation="h",
            marker_color=colour, name=label,
            error_x={"type": "data", "symmetric": False, "array": [(hi - d["rate"]) * 100],
                     "arrayminus": [(d["rate"] - lo) * 100]},
            hovertemplate=f"{label}: fired in {d['fired']} of {d['windows']} (%{{x:.0f}} %; 95 % "
                          f"{lo * 100:.0f}–{hi * 100:.0f} %)<extra></extra>",
        ))
    fig.update_layout(height=60 + 34 * len(rows), margin={"l": 290, "r": 20, "t": 5, "b": 35},
                      template="plotly_white", showlegend=False, bargap=0.3)
    fig.update_xaxes(title_text="windows in which the rule fired (%)", range=[0, 105], ticksuffix=" %")
    fig.update_yaxes(ticksuffix=" ")
    return fig
