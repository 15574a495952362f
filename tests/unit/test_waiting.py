"""The one polling helper: the truthy answer comes back; a late one names what and the last."""

import itertools

import pytest
from waiting import until, until_sync


async def test_until_returns_the_first_truthy_answer_of_a_sync_or_async_probe() -> None:
    counts = itertools.count()
    assert await until(lambda: next(counts) >= 2 and "ready", timeout=5, what="x") == "ready"

    async def probe() -> int:
        n = next(counts)
        return n if n >= 6 else 0  # falsy answers first: it must keep polling

    assert await until(probe, timeout=5, interval=0.01, what="x") == 6


async def test_a_late_answer_names_what_and_the_last_answer() -> None:
    seen = itertools.count()
    with pytest.raises(
        AssertionError, match=r"^the queue empty 7 \(not within 0.1s; last seen: \[\]\)"
    ):
        await until(
            lambda: [] if next(seen) < 1000 else [1], timeout=0.1, what=lambda: "the queue empty 7"
        )
    with pytest.raises(AssertionError, match=r"^never \(not within 0.1s; last seen: 0\)"):
        until_sync(lambda: 0, timeout=0.1, what="never")


async def test_a_probe_that_knows_it_is_hopeless_fails_at_once() -> None:
    def probe() -> bool:
        raise AssertionError("the session FAILED")

    with pytest.raises(AssertionError, match=r"^the session FAILED$"):
        await until(probe, timeout=60, what="RUNNING")
    with pytest.raises(AssertionError, match=r"^the session FAILED$"):
        until_sync(probe, timeout=60, what="RUNNING")
