"""The uvicorn releases whose internals the fast lane reads, checked before it is used.

The lane stands inside uvicorn's ``HttpToolsProtocol`` (:mod:`.protocol`) and reads about
twenty of its attributes, some private (``_start_asgi_task`` appeared in 0.45; 0.53
changed how ``Connection: close`` is written). ``pyproject.toml`` pins uvicorn to
:data:`SUPPORTED`, and ``tests/unit/appproxy/test_uvicorn_pin.py`` fails loudly when the
pin, this range or the internals drift apart. At start-up :func:`unsupported` says why
the lane must stay off on any other uvicorn (the ASGI path then serves everything).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["PROTOCOL_ATTRIBUTES", "PROTOCOL_METHODS", "SUPPORTED", "unsupported"]

#: [lowest, first unsupported): the uvicorn releases the lane was read against
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((0, 53), (0, 55))

#: what the lane reads on a live ``HttpToolsProtocol`` (set in __init__ or on_message_begin)
PROTOCOL_ATTRIBUTES: tuple[str, ...] = (
    "access_log",
    "app",
    "client",
    "cycle",
    "expect_100_continue",
    "flow",
    "headers",
    "limit_concurrency",
    "loop",
    "parser",
    "pipeline",
    "root_path",
    "scheme",
    "server_state",
    "timeout_keep_alive",
    "transport",
    "url",
)
#: the protocol's methods the lane overrides or calls
PROTOCOL_METHODS: tuple[str, ...] = (
    "_start_asgi_task",
    "connection_lost",
    "connection_made",
    "data_received",
    "on_body",
    "on_headers_complete",
    "on_message_complete",
    "pause_writing",
    "resume_writing",
    "timeout_keep_alive_handler",
)


def _release(text: str) -> tuple[int, int]:
    parts = [int("".join(c for c in part if c.isdigit()) or 0) for part in text.split(".")]
    return parts[0], parts[1] if len(parts) > 1 else 0


def unsupported() -> str | None:
    """Why the installed uvicorn cannot carry the lane, or None when it can."""
    try:
        installed = version("uvicorn")
    except PackageNotFoundError:  # pragma: no cover - uvicorn is a dependency
        return "uvicorn is not installed"
    low, high = SUPPORTED
    if not low <= _release(installed) < high:
        return (
            f"uvicorn {installed} is outside {low[0]}.{low[1]}-{high[0]}.{high[1] - 1}.x, "
            "the releases whose internals the fast lane reads"
        )
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    missing = [name for name in PROTOCOL_METHODS if not hasattr(HttpToolsProtocol, name)]
    if missing:
        return f"uvicorn {installed} lacks {', '.join(missing)}"
    return None
