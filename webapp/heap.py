"""Short garbage-collector pauses in long-running web processes.

CPython's full (generation 2) collection walks every container object the
process holds. Once Django, the URLconf with its API schemas, numpy, pyarrow and
the engine client are loaded that is ~120,000 objects, and a full pass over
them took 40-60 ms on the reference machine, once every 10-20 case overlays: a
pause in the middle of somebody's request. Those objects live as long as the
process, so after start-up they are moved to the collector's permanent
generation (``gc.freeze``); later full passes walk only what requests allocate.
"""
from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Load every view and API module, collect once, freeze what is left; returns the frozen count."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # imports the views, the API routers and their schemas
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
