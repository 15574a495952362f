"""The gateway process tunes Python's cyclic collector before it serves (p99 of creates)."""

from __future__ import annotations

import gc

from jobgate.commands.serve import GC_THRESHOLD, tune_gc


def test_tune_gc_freezes_what_start_up_made_and_collects_the_young_rarely() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (GC_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0  # start-up objects are out of the collector's walk
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
