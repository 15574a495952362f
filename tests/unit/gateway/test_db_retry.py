"""gateway.db.retry: a transaction that loses a deadlock runs again; other errors do not."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError

from gateway.db.retry import retry_conflicts, sqlstate


class _DriverError(Exception):
    def __init__(self, state: str) -> None:
        super().__init__(f"driver error {state}")
        self.sqlstate = state


def _error(state: str) -> DBAPIError:
    return DBAPIError("UPDATE endpoints ...", {}, _DriverError(state))


@pytest.mark.parametrize("state", ["40P01", "40001"])
async def test_a_lost_conflict_runs_the_transaction_again(state: str) -> None:
    calls: list[int] = []

    async def work() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _error(state)
        return "done"

    assert await retry_conflicts(work, what="test") == "done"
    assert len(calls) == 3


async def test_other_errors_and_the_last_attempt_are_raised() -> None:
    calls: list[int] = []

    async def unique_violation() -> None:
        calls.append(1)
        raise _error("23505")

    with pytest.raises(DBAPIError) as raised:
        await retry_conflicts(unique_violation, what="test")
    assert (len(calls), sqlstate(raised.value)) == (1, "23505")

    calls.clear()

    async def always_deadlocked() -> None:
        calls.append(1)
        raise _error("40P01")

    with pytest.raises(DBAPIError):
        await retry_conflicts(always_deadlocked, what="test", attempts=3)
    assert len(calls) == 3
