"""Template filters shared by Precursor's pages."""
from __future__ import annotations

from django import template

register = template.Library()


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
