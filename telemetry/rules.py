"""Domain rules shared by the telemetry queries and the investigation workspace, defined once.

telemetry never imports the Django apps, so the rules live here and investigations imports them
(models' choices, forms, API schemas, services); tests/test_rules.py checks the users agree.
"""
from __future__ import annotations

import math

# A hypothesis's signal: a catalog metric on a component scope, a condition and an operator.
COMPONENT_SCOPES = ("gpu", "nvswitch", "nic", "host", "psu", "fan", "disk", "job")
CONDITIONS = ("threshold", "rate", "trend")
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
