"""The domain rules' numbers as the pages' inputs and scripts need them, read from their one
definition (``telemetry.rules`` for lead windows, ``investigations.permalinks`` for the overlay's
points per series), so a form field's min/max never drifts from what the server accepts."""
from __future__ import annotations

import math

from django import template

from investigations import permalinks
from telemetry import rules

register = template.Library()


def _bound(which: str, low, high):
    if which == "min":
        return low
    if which == "max":
        return high
    raise template.TemplateSyntaxError(f"expected 'min' or 'max', not {which!r}")


@register.simple_tag
def lead_window_hours(which: str) -> str:
    """The lead-window bound in hours for an ``<input type=number>``: the minimum rounded up and
    the maximum rounded down (to 6 decimals), so the browser never allows what the server refuses."""
    seconds = _bound(which, rules.LEAD_WINDOW_MIN_S, rules.LEAD_WINDOW_MAX_S)
    scaled = seconds / 3600 * 1e6
    hours = (math.ceil(scaled) if which == "min" else math.floor(scaled)) / 1e6
    return f"{hours:g}"


@register.simple_tag
def overlay_points(which: str) -> int:
    """The overlay's points-per-series bound (the script clamps the chart width to it)."""
    return _bound(which, permalinks.MIN_POINTS, permalinks.MAX_POINTS)
