"""Domain rules shared by the telemetry queries and the investigation workspace, defined once.

telemetry never imports the Django apps, so the rules live here and investigations imports them
(models' choices, forms, API schemas, services); tests/test_rules.py checks the users agree.
"""
from __future__ import annotations

import math

# A hypothesis's signal: a catalog metric on a component scope, a condition and an operator.
COMPONENT_SCOPES = ("gpu", "nvswitch", "nic", "host", "psu", "fan", "disk", "job")
# ``rise``: the part's score against its own preceding baseline (telemetry/queries/scores.py, the
# signal scan's statistic) passes the threshold — a chronically noisy healthy part does not fire.
CONDITIONS = ("threshold", "rate", "trend", "rise")
OPERATORS = (">", "<")

# The catalog's component of a metric -> the hypothesis scope it is judged on. Components that
# are not a scope of their own (cpu, memory, the host itself) are judged per host.
_SCOPE_OF_COMPONENT = {"gpu": "gpu", "nvswitch": "nvswitch", "nic": "nic", "psu": "psu", "fan": "fan",
                       "disk": "disk", "job": "job"}


def scope_of_component(component: str) -> str:
    return _SCOPE_OF_COMPONENT.get(component, "host")


# How long before t0 a signal may be looked at: a hypothesis, a fleet test, a scan and an export
# all accept the same windows.
LEAD_WINDOW_MIN_S = 60
LEAD_WINDOW_MAX_S = 30 * 86400


def check_lead_window(value, field: str = "lead_window_s") -> int:
    """Whole seconds within the bounds, else ValueError naming the field and the bounds."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: {value!r} is not a whole number of seconds")
    if not isinstance(value, int):
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{field}: {value!r} is not a whole number of seconds") from None
        if not math.isfinite(as_float) or as_float != int(as_float):
            raise ValueError(f"{field}: {value!r} is not a whole number of seconds")
        value = int(as_float)
    if not LEAD_WINDOW_MIN_S <= value <= LEAD_WINDOW_MAX_S:
        raise ValueError(f"{field}: {value} must be between {LEAD_WINDOW_MIN_S} s (1 min) and "
                         f"{LEAD_WINDOW_MAX_S} s ({LEAD_WINDOW_MAX_S // 86400} days)")
    return value


def pin_rule(row: dict, bad: str, is_counter: bool) -> tuple[str, str, float]:
    """(condition, operator, threshold) pinned from a signal scan's row of a metric whose catalog
    bad direction is ``bad``: where the row has the median scores before the outcome and in the
    controls, ``rise`` past their midpoint (scores are oriented, higher is worse: operator ``>``);
    else the metric's own value (``rate`` of a counter, ``threshold`` of a gauge) past the midpoint
    of the medians. The operator follows the bad direction (``up``: >, ``down``: <), not the side
    the medians fall on; only a metric without one takes the medians' side. ValueError where the
    scan shows the good direction (a rule on it would fire in the controls more than before
    failures) or has no values on both sides."""
    name = row.get("metric", "metric")
    if row.get("median_score_before") is not None and row.get("median_score_control") is not None:
        before, control, condition, oriented = (float(row["median_score_before"]), float(row["median_score_control"]),
                                                "rise", True)
    elif row.get("median_before") is not None and row.get("median_control") is not None:
        before, control = float(row["median_before"]), float(row["median_control"])
        condition, oriented = ("rate" if is_counter else "threshold"), False
    else:
        raise ValueError(f"{name}: the scan has no values on both sides to set a threshold from")
    if bad in ("up", "down"):
        higher = oriented or bad == "up"
        if before < control if higher else before > control:
            raise ValueError(
                f"{name}: the scan shows it {'better' if oriented else 'lower' if higher else 'higher'} before the "
                f"outcome (median {'score ' if oriented else ''}{before:.4g} against {control:.4g}), its good "
                f"direction; a rule '{name} {condition} {'>' if higher else '<'} threshold' would fire in the "
                "controls more than before failures")
    else:
        higher = before >= control
    return condition, ">" if higher else "<", float(f"{(before + control) / 2:.4g}")
