"""The one grammar for the names telemetry is filed under: host, component, metric.

Ingestion refuses a batch whose names fall outside it, and the pages accept
exactly the same names, so whatever was stored can be charted, and a signal the
engine proposes ("what's different here") is one the case page accepts.

- host: letters, digits and ``_ . : -``, 1..253 characters (a DNS name, an IPv4
  or IPv6 address);
- component: the same plus ``/`` (``mlx5_0/1``, ``gpu3/nvlink2``), 0..128
  characters ('' is the host itself);
- metric: a Prometheus metric name or a catalog name (``gpu.temp``): a letter or
  ``_`` first, then letters, digits and ``_ . :``, at most 200 characters.
"""
from __future__ import annotations

import re

HOST_MAX = 253
COMPONENT_MAX = 128
METRIC_MAX = 200

HOST_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,%d}" % HOST_MAX)
COMPONENT_RE = re.compile(r"[A-Za-z0-9_./:\-]{0,%d}" % COMPONENT_MAX)
METRIC_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]{0,%d}" % (METRIC_MAX - 1))

HOST_RULE = f"letters, digits and _ . : - only, 1 to {HOST_MAX} characters"
COMPONENT_RULE = f"letters, digits and _ . / : - only, at most {COMPONENT_MAX} characters"
METRIC_RULE = f"a letter or _ first, then letters, digits and _ . : only, at most {METRIC_MAX} characters"


def is_host(name: str) -> bool:
    return isinstance(name, str) and HOST_RE.fullmatch(name) is not None


def is_component(name: str) -> bool:
    return isinstance(name, str) and COMPONENT_RE.fullmatch(name) is not None


def is_metric(name: str) -> bool:
    return isinstance(name, str) and METRIC_RE.fullmatch(name) is not None


RULES = {"host": (is_host, HOST_RULE), "component": (is_component, COMPONENT_RULE), "metric": (is_metric, METRIC_RULE)}


def shown(name: str, limit: int = 60) -> str:
    """A name quoted for an error message: cut, so a 10 MB name does not come back in the answer."""
    return repr(name[:limit]) + (f" (… {len(name)} characters)" if len(name) > limit else "")
