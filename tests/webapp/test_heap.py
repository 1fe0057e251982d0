"""The start-up heap is frozen, so full collections during requests walk only request objects."""
from __future__ import annotations

import gc

from webapp.heap import freeze_startup_heap


def test_freeze_moves_the_startup_objects_out_of_full_collections():
    before = len(gc.get_objects())
    try:
        frozen = freeze_startup_heap()
        assert frozen >= before // 2  # Django, the URLconf and the API are loaded by now
        assert len(gc.get_objects()) < before // 10
        # The views and API modules were imported by the freeze (so they are frozen too).
        import sys

        assert "investigations.views.cases" in sys.modules and "webapp.api" in sys.modules
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
