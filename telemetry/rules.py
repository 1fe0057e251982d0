"""Domain rules shared by the telemetry queries and the investigation workspace, defined once.

telemetry never imports the Django apps, so the rules live here and investigations imports them
(models' choices, forms, API schemas, services); tests/test_rules.py checks the users agree.
"""
from __future__ import annotations

import math

# A hypothesis's signal: a catalog metric on a component scope, a condition and an operator.
COMPONENT_SCOPES = ("gpu", "nvswitch", "nic", "host", "psu", "fan", "disk", "job")
# ``rise``: the part's score against its own past (telemetry/queries/scores.py, the
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


# The pin rule's threshold for ``rise``: the PIN_QUANTILE of the part scores the scan read in its
# control windows (``rise_readings``), so the pinned rule passes in at most 1 - PIN_QUANTILE of the
# healthy windows it was set on, whatever the failures look like. One documented level for every
# metric and class, never tuned to a result. Below MIN_PIN_CONTROLS control windows the 95th
# percentile is the largest control value and the rule is refused (n too small to say what "rare
# at healthy times" means).
PIN_QUANTILE = 0.95
MIN_PIN_CONTROLS = 20
READING_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def _upper(values, q: float) -> float:
    """The smallest value v of ``values`` with at most a share 1 - q of them above it."""
    x = sorted(values)
    k = min(len(x) - 1, max(0, math.ceil(q * len(x)) - 1))
    return float(x[k])


def rise_readings(before, control) -> dict | None:
    """What a ``rise`` rule reads in each window of a scan — the highest score (oriented, higher is
    worse) over every part of the window's hosts, at the window's end — summarised for the pin rule
    and the page: per side, the windows with a score (n) and the READING_QUANTILES (``q95`` etc.: at
    most 5 % of that side's windows score above it); and the share of windows before the outcome
    above each control quantile (``before_above``: what the rule's recall would have been at that
    threshold on the scan's own windows). None without scores on both sides."""
    before = [float(v) for v in before if math.isfinite(v)]
    control = [float(v) for v in control if math.isfinite(v)]
    if not before or not control:
        return None
    out = {}
    for side, vals in (("before", before), ("control", control)):
        out[side] = {"n": len(vals), **{f"q{round(q * 100)}": _upper(vals, q) for q in READING_QUANTILES}}
    out["before_above"] = {f"q{round(q * 100)}": sum(v > out["control"][f"q{round(q * 100)}"] for v in before) / len(before)
                           for q in READING_QUANTILES}
    return out


def pin_rule(row: dict, bad: str, is_counter: bool) -> tuple[str, str, float]:
    """(condition, operator, threshold) pinned from a signal scan's row of a metric whose catalog
    bad direction is ``bad``.

    Where the row has ``rise_readings`` (scans since the pin took its threshold from the controls):
    ``rise`` (the part's score against its own baseline, oriented: operator ``>``) past the
    PIN_QUANTILE (95th percentile) of the readings in the scan's control windows — a rule that
    passes in at most 5 % of the healthy windows it was set on, by construction; ``pin_basis``
    says which quantile and how many windows. Refused below MIN_PIN_CONTROLS control windows.

    Older rows (median scores only), and a metric without a bad direction that ran lower before
    the outcome (the readings are the highest scores, so they miss that side): ``rise`` past the midpoint of the median scores; a row without
    scores: the metric's own value (``rate`` of a counter, ``threshold`` of a gauge) past the
    midpoint of the medians. The operator follows the bad direction (``up``: >, ``down``: <), not the
    side the medians fall on; only a metric without one takes the medians' side. ValueError where the
    scan shows the good direction (a rule on it would fire in the controls more than before
    failures) or has no values on both sides."""
    basis = pin_basis(row, bad)
    if basis is not None:
        return "rise", basis["operator"], basis["threshold"]
    return _midpoint_rule(row, bad, is_counter)


def pin_basis(row: dict, bad: str) -> dict | None:
    """The controls-quantile pin of a row with ``rise_readings``: {operator, threshold, quantile,
    n_control, n_before, before_above, control_above}; None for a row without readings (older scans:
    the midpoint rule). ValueError where the row's scan went the good direction or has too few
    control windows."""
    readings = row.get("rise_readings")
    if not readings:
        return None
    name = row.get("metric", "metric")
    _check_direction(row, bad, name)
    before, control = row.get("median_score_before"), row.get("median_score_control")
    if bad not in ("up", "down") and before is not None and control is not None and float(before) < float(control):
        return None  # no bad direction and lower before failures: the readings (highest scores) miss that side
    n = int(readings["control"]["n"])
    if n < MIN_PIN_CONTROLS:
        raise ValueError(f"{name}: only {n} control windows have a score; a threshold 'rare at healthy times' "
                         f"needs at least {MIN_PIN_CONTROLS} (scan a longer history)")
    key = f"q{round(PIN_QUANTILE * 100)}"
    # scores are oriented (higher is worse), whatever the bad direction: the rule is always "> q"
    return {"operator": ">", "threshold": float(f"{float(readings['control'][key]):.4g}"), "quantile": PIN_QUANTILE,
            "n_control": n, "n_before": int(readings["before"]["n"]),
            "before_above": float(readings["before_above"][key]), "control_above": 1 - PIN_QUANTILE}


def pin_text(row: dict, bad: str) -> str | None:
    """How the pin threshold of a row is set, in a phrase for the page; None where it is not."""
    try:
        basis = pin_basis(row, bad)
    except ValueError as exc:
        return str(exc)
    if basis is None:
        return None
    return (f"rise > {basis['threshold']:g}: the {basis['quantile'] * 100:g}th percentile of the part scores in "
            f"{basis['n_control']} control windows (at most {basis['control_above'] * 100:g} % of them above it; "
            f"{basis['before_above'] * basis['n_before']:.0f} of {basis['n_before']} windows before the outcome above)")


def _check_direction(row: dict, bad: str, name: str) -> None:
    before, control = row.get("median_score_before"), row.get("median_score_control")
    if bad in ("up", "down") and before is not None and control is not None and float(before) < float(control):
        raise ValueError(
            f"{name}: the scan shows it better before the outcome (median score {float(before):.4g} against "
            f"{float(control):.4g}), its good direction; a rule '{name} rise > threshold' would fire in the "
            "controls more than before failures")


def _midpoint_rule(row: dict, bad: str, is_counter: bool) -> tuple[str, str, float]:
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
