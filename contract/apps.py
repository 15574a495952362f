"""The apps an interactive session can serve, and what jobgate knows about common ones.

The gateway's image registry and the worker both describe apps this way: the registry
fills in the built-in start templates when an admin registers an image, and the worker
does the same for apps an image declares in its ``jobgate.service-ports`` label. An app's
*start* template is a command with ``{port}`` and ``{base_url}`` filled in per session.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUILT_IN", "App", "with_defaults"]


@dataclass(frozen=True, slots=True)
class App:
    name: str
    port: int  # in the container
    protocol: str = "http"
    start: str | None = None  # command template: {port}, {base_url}
    strip_prefix: bool = False  # the proxy removes /s/{session}/{name} before forwarding


#: what jobgate knows about common apps; an image registry entry overrides it
BUILT_IN: dict[str, App] = {
    "jupyter": App(
        "jupyter",
        8888,
        start=(
            "jupyter lab --ip=0.0.0.0 --port={port} --no-browser --allow-root"
            " --ServerApp.base_url={base_url} --IdentityProvider.token="
            " --ServerApp.password= --ServerApp.allow_remote_access=True"
            " --ServerApp.trust_xheaders=True"
        ),
    ),
    "code-server": App(
        "code-server",
        8080,
        start="code-server --bind-addr 0.0.0.0:{port} --auth none --disable-telemetry",
        strip_prefix=True,
    ),
    "terminal": App("terminal", 7681, strip_prefix=True),
}


def with_defaults(name: str, port: int, protocol: str = "http") -> App:
    """An app on *port*, with the built-in start template and prefix rule when *name* is known."""
    known = BUILT_IN.get(name)
    if known is None:
        return App(name, port, protocol)
    return App(name, port, protocol, known.start, known.strip_prefix)
