"""The gateway and scheduler processes tune Python's cyclic collector before they work."""

from __future__ import annotations

import gc

import pytest

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


def test_the_scheduler_process_tunes_the_collector_before_its_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gateway.loops.scheduler_process as runner
    from jobgate import logs
    from jobgate.commands import serve

    order: list[str] = []

    async def run_scheduler(settings: object) -> None:
        order.append("passes")

    monkeypatch.setattr(logs, "setup", lambda component: None)  # leave logging be
    monkeypatch.setattr(serve, "tune_gc", lambda: order.append("tune_gc"))
    monkeypatch.setattr(runner, "run_scheduler", run_scheduler)
    serve.scheduler_run()
    assert order == ["tune_gc", "passes"]
