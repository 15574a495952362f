"""The harness's note of a worker that does not stop: where its task waits, down the
chain of awaits, in the run's artefacts (tests/harness.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harness import _note_hung_worker


async def _drain_forever(never: asyncio.Event) -> None:
    await never.wait()


async def _shutting_down(never: asyncio.Event) -> None:
    await _drain_forever(never)


async def test_a_hung_worker_is_noted_with_the_awaits_it_is_stuck_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBGATE_TEST_ARTIFACTS", str(tmp_path / "artefacts"))
    never = asyncio.Event()
    task = asyncio.create_task(_shutting_down(never))
    await asyncio.sleep(0)  # it runs up to the wait
    try:
        _note_hung_worker("n7", task)
        _note_hung_worker("n8", task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    note = (tmp_path / "artefacts" / "hung-workers.txt").read_text()
    first, second = note.split("== ")[1:]
    assert "worker n7 did not stop within 60 s" in first
    assert "test_a_hung_worker_is_noted" in first  # the test it happened in
    lines = first.splitlines()[1:]
    # ours, then asyncio's own: the Event it waits on
    names = [line.rsplit(" in ", 1)[1] for line in lines]
    assert names == ["_shutting_down", "_drain_forever", "wait"]
    assert all("test_harness_workers.py:" in line for line in lines[:2])
    assert "asyncio/locks.py:" in lines[2]
    assert "worker n8" in second  # appended, not overwritten


def test_without_an_artefacts_folder_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBGATE_TEST_ARTIFACTS", raising=False)
    monkeypatch.chdir(tmp_path)

    async def run() -> None:
        never = asyncio.Event()
        task = asyncio.create_task(_shutting_down(never))
        await asyncio.sleep(0)
        _note_hung_worker("n1", task)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    assert list(tmp_path.iterdir()) == []
