"""The gateway's HTTP protocol (``gateway/api/http11.py``) stands on uvicorn's internals,
like the proxy's fast lane (whose pin test checks the release): every attribute and
method it reads must still be there, or this fails loudly before a folder transfer does.
"""

from __future__ import annotations

import inspect
import re

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.api.http11 import GatewayCycle, GatewayProtocol

#: what GatewayCycle reads or sets on the cycle uvicorn made
CYCLE_ATTRIBUTES = (
    "scope",
    "transport",
    "flow",
    "disconnected",
    "keep_alive",
    "waiting_for_100_continue",
    "response_started",
    "response_complete",
    "chunked_encoding",
    "expected_content_length",
    "more_body",
    "message_event",
)
#: what GatewayProtocol reads on the protocol, or overrides
PROTOCOL_NAMES = ("cycle", "scope", "scheme", "transport", "parser", "flow")
PROTOCOL_METHODS = ("on_headers_complete", "on_body", "_should_upgrade")


def _assigned(cls: type) -> set[str]:
    source = "".join(inspect.getsource(m) for _, m in inspect.getmembers(cls, inspect.isfunction))
    return set(re.findall(r"self\.([a-z_0-9]+)\s*(?::[^=]+)?=[^=]", source))


def test_every_cycle_internal_the_gateway_reads_is_set_by_uvicorn() -> None:
    missing = [a for a in CYCLE_ATTRIBUTES if a not in _assigned(RequestResponseCycle)]
    assert not missing, f"uvicorn's RequestResponseCycle no longer sets {missing}"
    for name in ("receive", "send"):  # overridden with uvicorn's own shape
        ours = inspect.signature(getattr(GatewayCycle, name))
        theirs = inspect.signature(getattr(RequestResponseCycle, name))
        assert list(ours.parameters) == list(theirs.parameters)


def test_every_protocol_internal_the_gateway_reads_exists() -> None:
    missing = [a for a in PROTOCOL_NAMES if a not in _assigned(HttpToolsProtocol)]
    missing += [m for m in PROTOCOL_METHODS if not callable(getattr(HttpToolsProtocol, m, None))]
    assert not missing, f"uvicorn's HttpToolsProtocol no longer has {missing}"
    assert issubclass(GatewayProtocol, HttpToolsProtocol)
    assert issubclass(GatewayCycle, RequestResponseCycle)
