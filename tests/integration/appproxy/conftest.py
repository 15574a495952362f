"""Fixtures for the app proxy's integration tests; the parts themselves are in proxy_harness.

Every test here runs twice: on asyncio's own event loop and on uvloop, which is what
``jobgate proxy serve`` runs on (uvloop's transports differ in ways that matter to the
proxy's HTTP client).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import uvloop
from proxy_harness import (
    AppServer,
    GatewayStub,
    Proxy,
    ProxyFactory,
    proxy_starter,
    running_app,
    running_gateway,
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def app_server() -> AsyncIterator[AppServer]:
    async with running_app() as app:
        yield app


@pytest.fixture
async def gateway_stub() -> AsyncIterator[GatewayStub]:
    async with running_gateway() as gateway:
        yield gateway


@pytest.fixture
async def proxy_factory(
    redis_url: str, app_server: AppServer, gateway_stub: GatewayStub
) -> AsyncIterator[ProxyFactory]:
    async with proxy_starter(redis_url, app_server, gateway_stub) as start:
        yield start


@pytest.fixture
async def proxy(proxy_factory: ProxyFactory) -> Proxy:
    """A proxy with default settings and the default route."""
    return await proxy_factory()
