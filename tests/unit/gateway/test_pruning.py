"""The pruning loop (gateway/loops/pruning.py): a failed round is logged and the next runs;
what a round deleted is logged; a failure of another kind ends the loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.loops.pruning import repeat


async def test_a_failed_round_is_logged_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds: list[int] = []
    third = asyncio.Event()

    async def job() -> int:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise OSError("disk went away")
        if len(rounds) == 3:
            third.set()
        return 2

    with caplog.at_level(logging.INFO, logger="gateway.loops.pruning"):
        loop = asyncio.create_task(repeat(job, 0, "old things", errors=(OSError,)))
        await third.wait()
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    messages = [r.getMessage() for r in caplog.records]
    assert "deleting old things failed; trying again next round" in messages
    assert "deleted 2 old things" in messages
    assert len(rounds) >= 3


async def test_a_failure_of_another_kind_ends_the_loop() -> None:
    async def job() -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await repeat(job, 0, "old things", at_once=True, errors=(OSError,))


async def test_a_stop_lets_the_round_under_way_end_first() -> None:
    """A round cancelled inside a database call can leave its connection's socket open:
    cancelling the loop waits for the round, which ends as it would have."""
    started, release = asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def job() -> int:
        started.set()
        await release.wait()
        ended.append("whole")
        return 0

    loop = asyncio.create_task(repeat(job, 60, "old things", at_once=True))
    await started.wait()
    loop.cancel()
    await asyncio.sleep(0)
    assert not loop.done()  # still waiting for its round
    release.set()
    await asyncio.gather(loop, return_exceptions=True)
    assert loop.cancelled()
    assert ended == ["whole"]
