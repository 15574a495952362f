"""The apps an interactive session can serve, and what jobgate knows about common ones.

The gateway's image registry and the worker both describe apps this way: the registry
fills in the built-in start templates when an admin registers an image, and the worker
does the same for apps an image declares in its ``jobgate.service-ports`` label. An app's
*start* template is a command with ``{port}`` and ``{base_url}`` filled in per session.

**The app secret.** An interactive session's apps are published on a node port that
other processes on the node can reach, so each app checks a per-session secret
(:func:`contract.tokens.app_secret`) that only the app proxy presents. The worker hands
it to the container in the environment (:func:`secret_env`: never on a command line,
which every user of the node can read in ``/proc``); the proxy sends it the way the app
checks it (:data:`CREDENTIALS`):

=============  ==========================================  ==============================
app            how the app checks it                        what the proxy sends
=============  ==========================================  ==============================
jupyter        ``JUPYTER_TOKEN`` (IdentityProvider.token)  ``Authorization: token …``
code-server    ``--auth password``, ``HASHED_PASSWORD``      cookie ``code-server-session``
terminal       ``ttyd -c jobgate:$JOBGATE_APP_SECRET``      ``Authorization: Basic …``
any other      its own check of ``JOBGATE_APP_SECRET``     ``X-Jobgate-App-Secret: …``
=============  ==========================================  ==============================

``X-Jobgate-App-Secret`` goes to every app, with the app's own form where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "APP_SECRET_ENV",
    "BASIC_USER",
    "BUILT_IN",
    "CODE_SERVER_COOKIE",
    "CREDENTIALS",
    "App",
    "Credential",
    "credential_for",
    "secret_env",
    "with_defaults",
]

#: the container variable that holds the session's app secret (any app may check it)
APP_SECRET_ENV: Final = "JOBGATE_APP_SECRET"
#: the user name of the terminal's Basic credential (``ttyd -c jobgate:<secret>``)
BASIC_USER: Final = "jobgate"
#: code-server's session cookie; with ``HASHED_PASSWORD`` set, its value is that string
CODE_SERVER_COOKIE: Final = "code-server-session"

#: how the proxy presents the secret: "header" (X-Jobgate-App-Secret only), "token"
#: (Authorization: token), "cookie" (code-server's), "basic" (Authorization: Basic)
Credential = Literal["header", "token", "cookie", "basic"]
CREDENTIALS: Final[dict[str, Credential]] = {
    "jupyter": "token",
    "code-server": "cookie",
    "terminal": "basic",
}


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
            " --ServerApp.base_url={base_url} --ServerApp.password="
            " --ServerApp.allow_remote_access=True"
            " --ServerApp.trust_xheaders=True"
        ),
    ),
    "code-server": App(
        "code-server",
        8080,
        start="code-server --bind-addr 0.0.0.0:{port} --auth password --disable-telemetry",
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


def credential_for(name: str) -> Credential:
    """How the proxy presents the secret to the app called *name*."""
    return CREDENTIALS.get(name, "header")


def secret_env(secret: str) -> dict[str, str]:
    """The variables that hand *secret* to the apps a container may start."""
    return {
        APP_SECRET_ENV: secret,
        "JUPYTER_TOKEN": secret,  # jupyter_server's IdentityProvider.token
        # code-server compares its session cookie with this string (its "SHA256" mode)
        "HASHED_PASSWORD": secret,
    }
