"""Template filters and tags shared by Precursor's pages: how times, z-scores and numbers are
written, and the one way a figure or plotly.js gets onto a page.

The formatting functions are plain functions too (``from investigations.templatetags.precursor
import fmt_offset``) for the few places that build text in Python.
"""
from __future__ import annotations

import functools
from datetime import timedelta, timezone as dt_timezone

from django import template
from django.templatetags.static import static
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

register = template.Library()

Z_DISPLAY_CAP = 100.0


@register.filter
def duration(seconds) -> str:
    """12 s · 3m05s · 1h02m · 2d03h; an em dash for None."""
    if seconds is None or seconds == "":
        return "—"
    s = int(round(float(seconds)))
    if s < 60:
        return f"{s} s"
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{sec:02d}s"


@register.filter
def fmt_offset(seconds: float) -> str:
    """t−2h13m / t+5m / t0: relative times on case pages."""
    s = int(round(seconds))
    if s == 0:
        return "t0"
    sign = "−" if s < 0 else "+"
    s = abs(s)
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    parts = []
    if d:
        parts.append(f"{d}d")
    if h:
        parts.append(f"{h}h")
    if m:
        parts.append(f"{m}m")
    if sec and not d and not h:
        parts.append(f"{sec}s")
    return f"t{sign}{''.join(parts)}"


@register.filter
def lead(seconds) -> str:
    """A lead time before t0 (positive seconds) as an offset: 3600 -> t−1h; empty for None."""
    if seconds is None or seconds == "":
        return ""
    return fmt_offset(-float(seconds))


@register.filter
def fmt_window(w) -> str:
    return f"{fmt_offset(w[0]).replace('t', '', 1) or '0'} … {fmt_offset(w[1]).replace('t', '', 1) or '0'}"


@register.filter
def fmt_z(z: float) -> str:
    """+3.3σ / +38σ / ≥+100σ: beyond 100σ the exact figure says nothing more (MAD floors make it huge)."""
    if z >= Z_DISPLAY_CAP:
        return f"≥+{Z_DISPLAY_CAP:.0f}σ"
    if z <= -Z_DISPLAY_CAP:
        return f"≤−{Z_DISPLAY_CAP:.0f}σ"
    text = f"{abs(z):.0f}" if abs(z) >= 10 else f"{abs(z):.1f}"
    return ("+" if z >= 0 else "−") + text + "σ"


@register.filter
def fmt_num(v: float) -> str:
    """About three significant digits, never scientific notation for everyday magnitudes, never 0.000
    for a small non-zero rate (one error in six hours is 4.6e−5/s, and that is the signal)."""
    if v != v:  # NaN
        return "—"
    if v == 0:
        return "0"
    a = abs(v)
    sign = "−" if v < 0 else ""
    if a >= 1e6:
        mant, exp = f"{a:.2e}".split("e")
        return f"{sign}{mant}e{int(exp)}"
    if a >= 100:
        return f"{sign}{a:,.0f}"
    if a >= 10:
        return f"{sign}{a:.1f}"
    if a >= 0.01:
        return f"{sign}{a:.3g}"
    mant, exp = f"{a:.1e}".split("e")
    return f"{sign}{mant}e−{abs(int(exp))}"


@register.filter
def when(value, fmt: str = "Y-m-d H:i") -> str:
    """A timestamp in the display time zone (UTC unless the person chose one; see
    webapp.middleware.display_time_zone) with the zone's abbreviation: 2026-11-02 10:12 UTC /
    2026-11-02 02:12 PST. ``fmt`` is a Django date format; ``T`` places the abbreviation
    (appended when absent). Empty for None."""
    if value in (None, ""):
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt_timezone.utc)
    bare = fmt.strip("O()P ") == ""  # only an offset asked for
    return dateformat.format(timezone.localtime(value), fmt if "T" in fmt or bare else fmt + " T")


@register.filter
def when_short(value, fmt: str = "m-d H:i:s") -> str:
    """``when`` without the year when the time falls in this year, with it (``Y-`` before
    ``fmt``) when not; "this year" in the display time zone, so 2027-01-01 02:00 UTC is this
    year's 12-31 18:00 PST for a person in Los Angeles."""
    if value in (None, ""):
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt_timezone.utc)
    same = timezone.localtime(value).year == timezone.localtime(timezone.now()).year
    return when(value, fmt if same else "Y-" + fmt)


@register.filter
def utc_day(value, offset_days: int = 0) -> str:
    """The UTC day (YYYY-MM-DD, as the from/to filters take it) of a timestamp, moved by
    ``offset_days``."""
    if value in (None, ""):
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt_timezone.utc)
    return (value.astimezone(dt_timezone.utc) + timedelta(days=int(offset_days))).strftime("%Y-%m-%d")


COMMON_ZONES = ("UTC", "Europe/London", "Europe/Berlin", "America/New_York", "America/Chicago", "America/Denver",
                "America/Los_Angeles", "Asia/Kolkata", "Asia/Shanghai", "Asia/Tokyo", "Australia/Sydney")


@register.simple_tag
def common_zones() -> tuple[str, ...]:
    """Suggestions for the top bar's time-zone selector (any IANA name is accepted)."""
    return COMMON_ZONES


# --- figures and plotly.js -----------------------------------------------------------------

_JSON_HTML_ESCAPES = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def json_for_html(text: str) -> str:
    """JSON text safe inside a <script type="application/json"> element (user text cannot close it)."""
    return text.translate(_JSON_HTML_ESCAPES)


@register.simple_tag
def figure(fig, title: str = "", css_class: str = "small-chart"):
    """The one way a server-drawn figure goes onto a page: a plotly Figure (or its JSON text) in a
    <script type="application/json"> that precursor.js draws; the JSON is escaped for HTML here."""
    text = fig if isinstance(fig, str) else fig.to_json()
    caption = format_html('<figcaption class="muted small">{}</figcaption>', title) if title else ""
    return format_html('<figure class="{}">{}<div class="plotly-figure" data-plotly-figure>'
                       '<script type="application/json">{}</script></div></figure>',
                       css_class, caption, mark_safe(json_for_html(text)))


@functools.lru_cache(maxsize=1)
def plotly_version() -> str:
    import plotly

    return plotly.__version__


def plotly_static_path() -> str:
    """plotly.js from the installed plotly package (webapp.staticfiles.PlotlyFinder), its version
    in the name so it can be cached for good."""
    return f"vendor/plotly-{plotly_version()}.min.js"


@register.simple_tag
def plotly_js(defer: bool = False):
    """<script> for plotly.js, served by Precursor itself (air-gapped clusters: no CDN)."""
    return format_html('<script src="{}"{}></script>', static(plotly_static_path()), mark_safe(" defer") if defer else "")
