"""Small statistics shared by the query runners and the workspace (no Django, no engine)."""
from __future__ import annotations

from scipy.stats import beta


def jeffreys_interval(hits: int, misses: int, confidence: float = 0.95):
    """(estimate, low, high) of a proportion with the equal-tailed Jeffreys interval
    (Beta(hits + ½, misses + ½); low = 0 when hits = 0, high = 1 when misses = 0, per Brown,
    Cai & DasGupta 2001); (None, None, None) without any observation."""
    if hits < 0 or misses < 0:
        raise ValueError("counts must not be negative")
    n = hits + misses
    if n == 0:
        return None, None, None
    tail = (1 - confidence) / 2
    low = 0.0 if hits == 0 else float(beta.ppf(tail, hits + 0.5, misses + 0.5))
    high = 1.0 if misses == 0 else float(beta.ppf(1 - tail, hits + 0.5, misses + 0.5))
    return hits / n, low, high
