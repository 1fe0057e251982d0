"""Figure structure of the case overlay and the inbox bar chart (pure functions, no store)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from investigations import charts
from telemetry.queries.overlay import Band, EventMarker, OverlayResult, SignalSeries, SignalSpec

T0 = datetime(2026, 11, 30, 4, 12, 7, tzinfo=timezone.utc)


def series(metric, layer, host, comp, band=True):
    x = np.linspace(-3600, 600, 50)
    b = Band(x=x, p5=np.zeros(50), median=np.ones(50), p95=np.full(50, 2.0), n=np.full(50, 32)) if band else None
    return SignalSeries(SignalSpec(metric, host, comp), metric, layer, "count/s", "counter", "up", "gpu", x,
                        np.arange(50.0), b)


@pytest.fixture
def result():
    return OverlayResult(
        cluster="c1", t0=T0, start_offset_s=-3600, end_offset_s=600, source="samples", bucket_s=7.0,
        series=[
            series("gpu.pcie.replay", "gpu", "n1", "gpu3"),
            series("gpu.pcie.replay", "gpu", "n1", "gpu4"),  # same band: drawn once
            series("net.symbol_errors", "network", "n1", "mlx5_3/1"),
            series("cooling.inlet_temp", "cooling", "n1", "", band=False),
        ],
        events=[
            EventMarker(-120.0, T0, "n1", "gpu3", "xid", 79, "critical", "fell off the bus"),
            EventMarker(-60.0, T0, "n1", "mlx5_3/1", "link_down", 0, "error", "port down <b>flap</b>"),
            EventMarker(0.0, T0, "n1", "", "job_state", 0, "info", "NODE_FAIL"),
        ],
        peers=["p1", "p2"],
    )


def test_one_row_per_layer_in_the_requested_order_plus_events(result):
    fig = charts.overlay_figure(result, ["network", "gpu", "cooling"])
    titles = [fig.layout[f"yaxis{i}"].title.text for i in ("", 2, 3, 4)]
    assert titles == ["Network", "GPU", "Cooling", "events"]
    assert fig.layout.hovermode == "x unified"
    assert fig.layout.xaxis.showspikes and fig.layout.xaxis.spikemode == "across"
    assert fig.layout.xaxis.matches == "x4"  # rows share the bottom axis
    assert {t.xaxis for t in fig.data} == {"x4"}
    assert fig.layout.hoversubplots == "axis"


def test_bands_are_filled_between_p5_and_p95_with_a_median(result):
    fig = charts.overlay_figure(result, ["gpu", "network", "cooling"])
    fills = [t for t in fig.data if t.fill == "tonexty"]
    assert len(fills) == 2  # one per (metric, family): gpu.pcie.replay once, net.symbol_errors once
    medians = [t for t in fig.data if t.name and t.name.startswith("peers median")]
    assert len(medians) == 2
    first_fill = fig.data.index(fills[0])
    assert list(fig.data[first_fill - 1].y) == [2.0] * 50  # p95 edge right before the filled p5 trace
    lines = [t for t in fig.data if t.type == "scattergl"]
    assert [t.name for t in lines] == ["gpu.pcie.replay gpu3@n1", "gpu.pcie.replay gpu4@n1",
                                       "net.symbol_errors mlx5_3/1@n1", "cooling.inlet_temp @n1"]


def test_event_markers_are_ticks_with_xid_meaning(result):
    fig = charts.overlay_figure(result, ["gpu", "network", "cooling"])
    marks = {t.name: t for t in fig.data if t.mode == "markers"}
    assert set(marks) == {"XID", "link↓", "job"}
    xid_trace = marks["XID"]
    assert xid_trace.marker.symbol == "line-ns-open"
    assert xid_trace.yaxis == "y4"
    assert "XID 79" in xid_trace.customdata[0][1] and "bus" in xid_trace.customdata[0][1].lower()
    assert xid_trace.customdata[0][0] == "t−2m"
    # Ingested text is escaped for Plotly's hover, which would otherwise read it as markup.
    assert marks["link↓"].customdata[0][1].endswith("port down &lt;b&gt;flap&lt;/b&gt;")
    json.loads(fig.to_json())


def test_x_axis_reads_relative_to_t0(result):
    fig = charts.overlay_figure(result)
    assert "t0" in fig.layout.xaxis.ticktext and "t−1h" in fig.layout.xaxis.ticktext
    assert list(charts.relative_label([-7980, 0, 900, -30, 90000])) == ["t−2h13m", "t0", "t+15m", "t−30s", "t+1d1h"]


def test_interruptions_bar_stacks_states_per_week():
    df = pd.DataFrame({"week": pd.to_datetime(["2026-11-16", "2026-11-16", "2026-11-23"]),
                       "state": ["FAILED", "NODE_FAIL", "FAILED"], "n": [3, 1, 2]})
    fig = charts.interruptions_bar(df)
    assert fig.layout.barmode == "stack"
    bars = {t.name: list(t.y) for t in fig.data}
    assert bars == {"FAILED": [3, 2], "NODE_FAIL": [1, 0]}
    with pytest.raises(ValueError, match="missing column"):
        charts.interruptions_bar(df.drop(columns="n"))


def test_a_layer_with_two_units_gets_a_row_per_unit(result):
    temp = series("gpu.temp", "gpu", "n1", "gpu3")
    temp.unit = "C"
    result.series.append(temp)
    fig = charts.overlay_figure(result, ["network", "gpu", "cooling"])
    titles = [fig.layout[f"yaxis{i}"].title.text for i in ("", 2, 3, 4, 5)]
    assert titles == ["Network", "GPU · count/s", "GPU · C", "Cooling", "events"]
    line = next(t for t in fig.data if t.name == "gpu.temp gpu3@n1")
    assert line.yaxis == "y3"  # not on the rates' axis


def test_lines_and_bands_stop_at_gaps_of_more_than_a_few_steps(result):
    x, y = charts.break_gaps([0, 60, 120, 180, 3 * 3600, 3 * 3600 + 60], [1, 2, 3, 4, 5, 6])
    assert list(x) == [0, 60, 120, 180, (180 + 3 * 3600) / 2, 3 * 3600, 3 * 3600 + 60]
    assert np.isnan(y[4]) and list(y[:4]) == [1, 2, 3, 4] and list(y[5:]) == [5, 6]
    x2, y2 = charts.break_gaps([0, 60, 120, 240], [1, 2, 3, 4])  # 2 steps: still one line
    assert list(x2) == [0, 60, 120, 240] and not np.isnan(y2).any()
    # three hours without data inside the overlay: the series and its band both break there
    gappy = np.concatenate([np.linspace(-3600, -2400, 21), np.linspace(-2400 + 3 * 3600, -2400 + 3 * 3600 + 600, 11)])
    s = result.series[0]
    band = Band(x=gappy, p5=np.zeros(32), median=np.ones(32), p95=np.full(32, 2.0), n=np.full(32, 8))
    result.series[:] = [SignalSeries(s.signal, s.metric, s.layer, s.unit, s.kind, s.bad, s.family, gappy,
                                     np.arange(32.0), band)]
    fig = charts.overlay_figure(result, ["gpu"])
    drawn = [t for t in fig.data if t.name in (s.signal.label, "peers p95 gpu.pcie.replay",
                                               "peers p5–p95 gpu.pcie.replay", "peers median gpu.pcie.replay")]
    assert len(drawn) == 4
    for trace in drawn:
        assert sum(v is None or (isinstance(v, float) and np.isnan(v)) for v in trace.y) == 1, trace.name
