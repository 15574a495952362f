"""The examples in the proxy's docstrings are true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "contract.tokens",
    "appproxy.frontend.addressing",
    "appproxy.frontend.cookies",
    "appproxy.backend.headers",
    "appproxy.backend.http1",
    "appproxy.backend.tunnel",
    "appproxy.backend.timers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
