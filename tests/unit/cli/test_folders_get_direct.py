"""`jobgate folders get` skips httpx (``transfer._direct``) only where httpx would not
use a proxy for the gateway: ``ALL_PROXY`` counts as much as ``HTTP_PROXY``, and
``NO_PROXY`` naming the gateway exempts it."""

from __future__ import annotations

import pytest

from jobgate import transfer
from jobgate.client import Client
from jobgate.profile import Profile

GATEWAY = "http://gateway.example:8080"
PROXY = "http://proxy.example:3128"
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the proxy settings this machine may have."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def _direct() -> bool:
    """Whether a download from GATEWAY skips httpx, with the environment as set now."""
    api = Client(Profile(url=GATEWAY, api_key="k"))
    try:
        return transfer._direct(api) is not None
    finally:
        api.http.close()


def test_without_a_proxy_the_download_is_direct() -> None:
    assert _direct()


@pytest.mark.parametrize("name", ["ALL_PROXY", "all_proxy", "HTTP_PROXY"])
def test_a_proxy_for_the_gateway_keeps_the_download_on_httpx(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, PROXY)
    assert not _direct()


@pytest.mark.parametrize("no_proxy", ["gateway.example", ".example", "*"])
def test_no_proxy_covering_the_gateway_makes_it_direct_again(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    monkeypatch.setenv("ALL_PROXY", PROXY)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert _direct()


def test_no_proxy_for_another_host_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", PROXY)
    monkeypatch.setenv("NO_PROXY", "other.example")
    assert not _direct()
