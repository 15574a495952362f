"""The fast lane reads uvicorn's internals: the pin, the lane's range and uvicorn agree.

A uvicorn outside the range the lane was read against must fail here, loudly, before
any fast-lane test trips over a renamed attribute.
"""

from __future__ import annotations

import asyncio
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from appproxy.fastlane import compat

ROOT = Path(__file__).resolve().parents[3]


def _pinned() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = (Requirement(d) for d in project["dependencies"] if d.startswith("uvicorn"))
    return spec


def test_installed_uvicorn_is_one_the_lane_was_read_against() -> None:
    installed = Version(version("uvicorn"))
    low, high = compat.SUPPORTED
    assert Version(f"{low[0]}.{low[1]}") <= installed < Version(f"{high[0]}.{high[1]}"), (
        f"uvicorn {installed} is not a release the fast lane was checked against "
        f"(appproxy/fastlane/compat.py SUPPORTED={compat.SUPPORTED}): read the lane against "
        "its HttpToolsProtocol, then widen the range and the pin together"
    )
    assert compat.unsupported() is None


def test_the_pin_in_pyproject_is_the_lane_range() -> None:
    low, high = compat.SUPPORTED
    spec = _pinned().specifier
    assert f"{low[0]}.{low[1]}" in spec
    assert f"{high[0]}.{high[1]}" not in spec
    assert f"{high[0]}.{high[1] - 1}.99" in spec
    assert f"{low[0]}.{low[1] - 1}.99" not in spec


def test_every_internal_the_lane_reads_exists() -> None:
    loop = asyncio.new_event_loop()
    try:
        protocol = HttpToolsProtocol(
            config=Config(app=_app), server_state=ServerState(), app_state={}, _loop=loop
        )
        protocol.on_message_begin()  # as httptools does for each request: url, headers, scope
    finally:
        loop.close()
    missing = [name for name in compat.PROTOCOL_ATTRIBUTES if not hasattr(protocol, name)]
    missing += [m for m in compat.PROTOCOL_METHODS if not callable(getattr(protocol, m, None))]
    assert not missing, f"uvicorn {version('uvicorn')} no longer has {missing}"


@pytest.mark.parametrize(
    ("installed", "off"),
    [("0.52.4", True), ("0.53.0", False), ("0.54.9", False), ("0.55.0", True), ("1.0.0", True)],
)
def test_the_lane_stays_off_on_other_releases(
    monkeypatch: pytest.MonkeyPatch, installed: str, off: bool
) -> None:
    monkeypatch.setattr(compat, "version", lambda _name: installed)
    reason = compat.unsupported()
    assert (reason is not None) is off
    if off:
        assert reason is not None
        assert installed in reason
        assert "fast lane" in reason


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("never called")
