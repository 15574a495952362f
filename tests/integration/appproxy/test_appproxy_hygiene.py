"""What never leaks: tokens, cookies and keys stay out of logs; one Server/Date header."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from proxy_harness import SESSION, Proxy, ProxyFactory
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from contract.routes import AppRoute, RouteRecord, write_route

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record, uvicorn's own loggers (which do not propagate) included.

    Attach it after starting the proxy: uvicorn's logging set-up replaces handlers.
    """
    own = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.access", "uvicorn.error")]
    try:
        yield caplog
    finally:
        for logger in own:
            logger.removeHandler(caplog.handler)


def capture_everything(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("uvicorn", "uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addHandler(caplog.handler)
        caplog.set_level(logging.DEBUG, logger=name)


async def test_no_secret_in_any_log(
    proxy_factory: ProxyFactory, all_logs: pytest.LogCaptureFixture
) -> None:
    proxy = await proxy_factory(proxy_access_log=True)
    capture_everything(all_logs)
    link = proxy.link("echo")
    token = link.split("jobgate_token=", 1)[1]
    async with proxy.client() as client:
        exchanged = await client.get(link)
        assert exchanged.status_code == 303
        cookie = client.cookies["jobgate_auth"]
        assert (await client.get(exchanged.headers["location"])).status_code == 200
        assert (await client.get(link)).status_code == 401  # reused: refused, and logged
    async with proxy.client(headers={"Authorization": "Bearer jg_alice"}) as client:
        assert (await client.get(f"/s/{SESSION}/echo/?x=1")).status_code == 200
    await write_route(
        proxy.redis,
        RouteRecord(
            session_id=SESSION,
            owner_id="user-alice",
            apps={"echo": AppRoute(upstream="http://127.0.0.1:9")},
        ),
    )
    async with proxy.client(cookies={"jobgate_auth": cookie}) as client:
        assert (await client.get(f"/s/{SESSION}/echo/?app_token=abc")).status_code == 502
    # the proxy's records only: the test's own HTTP client logs the URLs it asks for
    text = "\n".join(
        r.getMessage() for r in all_logs.records if r.name.startswith(("appproxy", "uvicorn"))
    )
    assert "jobgate_token=[redacted]" in text  # the access log ran, and redacted
    for secret in (token, cookie, "jg_alice"):
        assert secret not in text


async def test_one_server_and_date_header(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert len(response.headers.get_list("server")) == 1  # the app's, not uvicorn's too
    assert response.headers["server"].startswith("Python")  # aiohttp's own
    assert len(response.headers.get_list("date")) == 1


async def test_websockets_are_in_the_access_log_without_secrets(
    proxy_factory: ProxyFactory, all_logs: pytest.LogCaptureFixture
) -> None:
    proxy = await proxy_factory(proxy_access_log=True)
    capture_everything(all_logs)
    cookie = proxy.cookie()["jobgate_auth"]
    ws_base = proxy.url.replace("http://", "ws://")
    async with connect(
        f"{ws_base}/s/{SESSION}/echo/ws", additional_headers={"Cookie": f"jobgate_auth={cookie}"}
    ) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"
    token = proxy.link("echo").split("jobgate_token=", 1)[1]
    with pytest.raises(InvalidStatus) as refused:  # a sign-in link is for browsers
        async with connect(f"{ws_base}/s/{SESSION}/echo/ws?jobgate_token={token}"):
            pass
    assert refused.value.response.status_code == 400
    lines = [r.getMessage() for r in all_logs.records if r.name == "uvicorn.access"]
    assert any(f'"WebSocket /s/{SESSION}/echo/ws" 101' in line for line in lines), lines
    assert any(
        f'"WebSocket /s/{SESSION}/echo/ws?jobgate_token=[redacted]" 400' in line for line in lines
    ), lines
    text = "\n".join(
        r.getMessage() for r in all_logs.records if r.name.startswith(("appproxy", "uvicorn"))
    )
    for secret in (token, cookie):
        assert secret not in text
