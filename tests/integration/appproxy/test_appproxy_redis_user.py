"""The app proxy on its own Redis user (JOBGATE_REDIS_USERS): it serves apps as before,
and its login, stolen, reads routes but writes none, and reaches no queue, job, console
sign-in or heartbeat."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from proxy_harness import SECRET, SESSION, ProxyFactory
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError
from waiting import until

from appproxy import server
from contract.acl import PROXY_USER, proxy_redis_password
from contract.keys import (
    ENDPOINT_WAKE_CHANNEL,
    activity_key,
    console_session_key,
    heartbeat_key,
    node_queue,
    route_key,
)
from gateway.services.redis_users import RedisUsers
from plumbing.redis_login import with_login

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def proxy_user(redis_url: str) -> AsyncIterator[str]:
    """The proxy's user, made as the gateway makes it; its login."""
    admin = Redis.from_url(redis_url)
    try:
        await RedisUsers(admin, db=None, enabled=True, proxy_secret=SECRET).make_proxy()  # type: ignore[arg-type]
        yield with_login(redis_url, PROXY_USER, proxy_redis_password(SECRET))
    finally:
        await admin.execute_command("ACL", "DELUSER", PROXY_USER)
        await admin.aclose()


async def test_the_proxy_serves_on_its_own_user_and_its_login_writes_no_route(
    proxy_factory: ProxyFactory, proxy_user: str, redis_url: str
) -> None:
    proxy = await proxy_factory(redis_users=True)
    assert server.redis_url(proxy.settings) == proxy_user
    # a one-time link (its token spent in Redis), then the cookie; activity recorded
    async with proxy.client() as client:
        first = await client.get(proxy.link())
        assert first.status_code in (200, 302, 303), first.text
        again = await client.get(proxy.link())
        assert again.status_code in (200, 302, 303)
    async with proxy.client(cookies=proxy.cookie()) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200

    async def touched() -> bool:
        return bool(await proxy.redis.exists(activity_key(SESSION)))

    await until(touched, timeout=10, what="the proxy's activity written on its own login")
    clients = await proxy.redis.client_list()
    assert any(c.get("user") == PROXY_USER for c in clients)

    stolen = Redis.from_url(proxy_user)
    try:
        assert await stolen.get(route_key(SESSION))  # routes: read
        assert await stolen.publish(ENDPOINT_WAKE_CHANNEL, "e") >= 0
        refused = {
            "write a route": stolen.set(route_key(SESSION), b"{}"),
            "push to a node's queue": stolen.zadd(node_queue("n1"), {"x": 1}),
            "read a job": stolen.get("arq:job:n:n1:start:k1"),
            "read a console sign-in": stolen.get(console_session_key("x")),
            "read a heartbeat": stolen.get(heartbeat_key("n1")),
            "flush": stolen.flushdb(),
            "manage users": stolen.execute_command("ACL", "SETUSER", "x"),
        }
        allowed = []
        for what, attempt in refused.items():
            try:
                await attempt
            except NoPermissionError:
                continue
            allowed.append(what)
        assert allowed == []
    finally:
        await stolen.aclose()
