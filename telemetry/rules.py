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


# The pin rule's threshold: the PIN_QUANTILE of what the pinned rule reads in the scan's control
# windows (``rise_readings``: the part scores; ``level_readings``: the metric's own rate or value,
# where the scan tested the failing part's level), so the pinned rule passes in at most
# 1 - PIN_QUANTILE of the healthy windows it was set on, whatever the failures look like. One
# documented level for every metric and class, never tuned to a result. Below MIN_PIN_CONTROLS
# control windows the 95th percentile is the largest control value and the rule is refused (n too
# small to say what "rare at healthy times" means).
PIN_QUANTILE = 0.95
MIN_PIN_CONTROLS = 20
READING_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def _upper(values, q: float) -> float:
    """The smallest value v of ``values`` with at most a share 1 - q of them above it."""
    x = sorted(values)
    k = min(len(x) - 1, max(0, math.ceil(q * len(x)) - 1))
    return float(x[k])


def _lower(values, q: float) -> float:
    """The largest value v of ``values`` with at most a share q of them below it."""
    return -_upper([-v for v in values], 1 - q)


def _summary(before, control, operator: str) -> dict | None:
    """Per side the windows with a reading (n) and the quantiles in the rule's direction (``>``:
    READING_QUANTILES, ``q95`` with at most 5 % of that side's windows above it; ``<``: their
    mirror, ``q5`` with at most 5 % below it); and the share of windows before the outcome past each
    control quantile in that direction (``before_above`` / ``before_below``)."""
    before = [float(v) for v in before if math.isfinite(v)]
    control = [float(v) for v in control if math.isfinite(v)]
    if not before or not control:
        return None
    qs = READING_QUANTILES if operator == ">" else tuple(round(1 - q, 2) for q in READING_QUANTILES)
    at = _upper if operator == ">" else _lower
    out = {}
    for side, vals in (("before", before), ("control", control)):
        out[side] = {"n": len(vals), **{f"q{round(q * 100)}": at(vals, q) for q in qs}}
    past = (lambda v, t: v > t) if operator == ">" else (lambda v, t: v < t)
    out["before_above" if operator == ">" else "before_below"] = {
        f"q{round(q * 100)}": sum(past(v, out["control"][f"q{round(q * 100)}"]) for v in before) / len(before)
        for q in qs}
    return out


def rise_readings(before, control) -> dict | None:
    """What a ``rise`` rule reads in each window of a scan — the highest score (oriented, higher is
    worse) over every part of the window's hosts (before an outcome that names the failing part,
    that part's: what the fleet test judges there), at the window's end — summarised for the pin rule
    and the page: per side, the windows with a score (n) and the READING_QUANTILES (``q95`` etc.: at
    most 5 % of that side's windows score above it); and the share of windows before the outcome
    above each control quantile (``before_above``: what the rule's recall would have been at that
    threshold on the scan's own windows). None without scores on both sides."""
    return _summary(before, control, ">")


def level_readings(before, control, condition: str, operator: str) -> dict | None:
    """What a level rule — ``rate`` (a counter) or ``threshold`` (a gauge), ``condition`` — reads
    in each window of a scan, in the metric's own unit, as the fleet test fires it: the highest
    minute rate (the highest raw sample; for ``operator`` ``<``, a metric whose bad direction is
    down, the lowest) over every series of every part of the window's hosts (before an outcome that
    names the failing part, of that part: what the fleet test judges there). Laid out as
    ``rise_readings`` plus ``condition`` and ``operator``; for ``<`` the quantiles are the lower
    ones (``q5``: at most 5 % of that side's windows below it) and ``before_below`` replaces
    ``before_above``. None without readings on both sides."""
    out = _summary(before, control, operator)
    if out is not None:
        out.update(condition=condition, operator=operator)
    return out


def _past(x: float, operator: str) -> float:
    """x to 4 significant digits, rounded away from the controls (up for ``>``, down for ``<``), so
    the rounding never lets a control window at the quantile pass the rule."""
    r = float(f"{x:.4g}") + 0.0  # never -0.0
    if x == 0 or (r >= x if operator == ">" else r <= x):
        return r
    step = 10.0 ** (math.floor(math.log10(abs(r or x))) - 3)
    return float(f"{r + step if operator == '>' else r - step:.4g}")


def pin_rule(row: dict, bad: str, is_counter: bool) -> tuple[str, str, float]:
    """(condition, operator, threshold) pinned from a signal scan's row of a metric whose catalog
    bad direction is ``bad``.

    Where the row has readings (scans since the pin took its threshold from the controls): the
    rule past the PIN_QUANTILE of what it reads in the scan's control windows — a rule that passes
    in at most 5 % of the healthy windows it was set on, by construction; ``pin_basis`` says which
    rule, which quantile and how many windows. Which rule: where the scan tested the failing
    part's level (``statistic`` "level": the outcome names the part), the level rule — ``rate`` of
    a counter, ``threshold`` of a gauge, past the 95th percentile of the controls' readings (the
    5th, operator ``<``, for a metric whose bad direction is down) — unless the ``rise`` rule set
    the same way passes in more of the scan's windows before the outcome; elsewhere ``rise`` (the
    part's score against its own baseline, oriented: operator ``>``). Refused below
    MIN_PIN_CONTROLS control windows.

    Older rows (median scores only), and a metric without a bad direction that ran lower before
    the outcome (the readings are the highest values, so they miss that side): ``rise`` past the
    midpoint of the median scores (a row that tested levels: the level rule past the midpoint of
    the medians); a row without scores: the metric's own value (``rate`` of a counter,
    ``threshold`` of a gauge) past the midpoint of the medians. The operator follows the bad
    direction (``up``: >, ``down``: <), not the side the medians fall on; only a metric without one
    takes the medians' side. ValueError where the scan shows the good direction (a rule on it would
    fire in the controls more than before failures) or has no values on both sides."""
    basis = pin_basis(row, bad)
    if basis is not None:
        return basis["condition"], basis["operator"], basis["threshold"]
    return _midpoint_rule(row, bad, is_counter)


def _fires_before(basis: dict) -> float:
    return basis["before_above"] * basis["n_before"]


def pin_basis(row: dict, bad: str) -> dict | None:
    """The controls-quantile pin of a row with readings: {condition, operator, threshold, quantile,
    n_control, n_before, before_above (the share of windows before the outcome past the threshold,
    in the rule's direction), control_above, statistic (what the scan tested), rival (the other
    rule's basis, where the row tested levels and both could be set; else None)}; None for a row
    without readings (older scans: the midpoint rule). ValueError where the row's scan went the good
    direction or has too few control windows."""
    if row.get("statistic") == "level" and row.get("level_readings"):
        level = _level_basis(row, bad)
        if level is None:
            return None
        try:
            rise = _rise_basis(row, bad, check=False)
        except ValueError:
            rise = None
        if rise is not None and _fires_before(rise) > _fires_before(level):
            return {**rise, "statistic": "level", "rival": level}
        return {**level, "statistic": "level", "rival": rise}
    basis = _rise_basis(row, bad)
    return basis if basis is None else {**basis, "statistic": row.get("statistic") or "score", "rival": None}


def _rise_basis(row: dict, bad: str, check: bool = True) -> dict | None:
    readings = row.get("rise_readings")
    if not readings:
        return None
    name = row.get("metric", "metric")
    if check:
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
    # + 0.0: a quantile of -0.0 (a flat part's centred score) would read "rise > -0"
    return {"condition": "rise", "operator": ">", "threshold": float(f"{float(readings['control'][key]):.4g}") + 0.0,
            "quantile": PIN_QUANTILE, "n_control": n, "n_before": int(readings["before"]["n"]),
            "before_above": float(readings["before_above"][key]), "control_above": 1 - PIN_QUANTILE}


def _level_basis(row: dict, bad: str) -> dict | None:
    """The level rule's pin of a row whose scan tested levels (its ``level_readings``)."""
    readings = row["level_readings"]
    name = row.get("metric", "metric")
    _check_direction(row, bad, name)
    before, control = row.get("median_score_before"), row.get("median_score_control")
    op = readings.get("operator", ">")
    if bad not in ("up", "down") and before is not None and control is not None and float(before) < float(control):
        return None  # no bad direction and lower before failures: the readings (the highest values) miss that side
    n = int(readings["control"]["n"])
    if n < MIN_PIN_CONTROLS:
        raise ValueError(f"{name}: only {n} control windows have a reading; a threshold 'rare at healthy times' "
                         f"needs at least {MIN_PIN_CONTROLS} (scan a longer history)")
    q = PIN_QUANTILE if op == ">" else round(1 - PIN_QUANTILE, 2)
    key = f"q{round(q * 100)}"
    passed = readings["before_above" if op == ">" else "before_below"][key]
    return {"condition": readings.get("condition") or ("rate" if row.get("kind") == "counter" else "threshold"),
            "operator": op, "threshold": _past(float(readings["control"][key]), op), "quantile": q,
            "n_control": n, "n_before": int(readings["before"]["n"]), "before_above": float(passed),
            "control_above": 1 - PIN_QUANTILE}


def reads(basis: dict) -> str:
    """What the rule of a ``pin_basis`` reads in each window, in a phrase (the page, the statement)."""
    if basis["condition"] == "rise":
        return "the part scores"
    low = basis["operator"] == "<"
    if basis["condition"] == "rate":
        return f"the {'lowest' if low else 'highest'} minute rate of any part"
    return f"the {'lowest' if low else 'highest'} value of any part"


def _passes(basis: dict) -> str:
    return f"{_fires_before(basis):.0f} of {basis['n_before']}"


def pin_text(row: dict, bad: str) -> str | None:
    """How the pin threshold of a row is set, in a phrase for the page; None where it is not."""
    try:
        basis = pin_basis(row, bad)
    except ValueError as exc:
        return str(exc)
    if basis is None:
        return None
    side = "below" if basis["operator"] == "<" else "above"
    unit = ""
    if row.get("unit") and basis["condition"] != "rise":
        unit = f" {row['unit']}{'/s' if basis['condition'] == 'rate' else ''}"
    text = (f"{basis['condition']} {basis['operator']} {basis['threshold']:g}{unit}: the "
            f"{basis['quantile'] * 100:g}th percentile of {reads(basis)} in {basis['n_control']} control "
            f"windows (at most {basis['control_above'] * 100:g} % of them {side} it; {_passes(basis)} windows before "
            f"the outcome {side})")
    rival = basis.get("rival")
    if basis.get("statistic") != "level" or (basis["condition"] == "rise" and rival is None):
        return text
    if basis["condition"] != "rise":
        return text + ("; the scan tested the failing part's level" + (
            f" (a rise rule set the same way passes before {_passes(rival)})" if rival is not None else ""))
    return (text + f"; the scan tested the failing part's level, but a {rival['condition']} rule set the same way "
            f"passes before only {_passes(rival)}")


def _check_direction(row: dict, bad: str, name: str) -> None:
    before, control = row.get("median_score_before"), row.get("median_score_control")
    if bad in ("up", "down") and before is not None and control is not None and float(before) < float(control):
        if row.get("statistic") == "level":  # oriented levels: negated where the bad direction is down
            sign = -1.0 if bad == "down" else 1.0
            condition = "rate" if row.get("kind") == "counter" else "threshold"
            raise ValueError(
                f"{name}: the scan shows the failing part {'lower' if bad == 'up' else 'higher'} before the outcome "
                f"(median level {sign * float(before):.4g} against {sign * float(control):.4g}), its good direction; "
                f"a rule '{name} {condition} {'>' if bad == 'up' else '<'} threshold' would fire in the controls "
                "more than before failures")
        raise ValueError(
            f"{name}: the scan shows it better before the outcome (median score {float(before):.4g} against "
            f"{float(control):.4g}), its good direction; a rule '{name} rise > threshold' would fire in the "
            "controls more than before failures")


def _midpoint_rule(row: dict, bad: str, is_counter: bool) -> tuple[str, str, float]:
    name = row.get("metric", "metric")
    if (row.get("statistic") != "level" and row.get("median_score_before") is not None
            and row.get("median_score_control") is not None):
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
