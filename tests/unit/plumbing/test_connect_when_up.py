"""A gateway, scheduler or worker started while Redis is down waits for it, not exits."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from plumbing import arq as jobs


async def test_tries_again_until_redis_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = object()
    failures = [RedisConnectionError("refused"), ConnectionRefusedError(111, "refused")]
    calls: list[tuple[str, float | None]] = []

    async def connect(redis_url: str, **kwargs: Any) -> object:
        calls.append((kwargs["default_queue"], kwargs["socket_timeout"]))
        if failures:
            raise failures.pop(0)
        return pool

    monkeypatch.setattr(jobs, "connect", connect)
    got = await jobs.connect_when_up(
        "redis://127.0.0.1:1/0", default_queue="q", socket_timeout=5.0, retry_s=0.0
    )
    assert got is pool
    assert calls == [("q", 5.0)] * 3


async def test_a_wrong_login_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    async def connect(redis_url: str, **kwargs: Any) -> object:
        nonlocal calls
        calls += 1
        raise AuthenticationError("invalid username-password pair")

    monkeypatch.setattr(jobs, "connect", connect)
    with pytest.raises(AuthenticationError):
        await jobs.connect_when_up("redis://u:p@127.0.0.1:1/0", retry_s=0.0)
    assert calls == 1
