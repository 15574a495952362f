"""Which session and app a request is for, from its path or from its host name.

Path mode needs no DNS and is the default. Subdomain mode (when a base domain is set)
serves apps that cannot live under a prefix at the root of their own host; the first
``--`` of the leftmost label separates session and app (session ids never contain
``--``). Paths stay percent-encoded exactly as received, because apps such as Jupyter
put encoded file names in them.

    >>> parse_path("/s/0f3a/jupyter/lab", "")
    Target(session_id='0f3a', app='jupyter', prefix='/s/0f3a/jupyter', rest='/lab', \
cookie_path='/s/0f3a/')
    >>> parse_path("/s/0f3a/jupyter", "a=1")
    AddSlash(location='/s/0f3a/jupyter/?a=1')
    >>> parse_host("0f3a--code-server.apps.example.org:8443", "apps.example.org", "/x")
    Target(session_id='0f3a', app='code-server', prefix='', rest='/x', cookie_path='/')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.endpoints import ENDPOINT_NAME_PATTERN, valid_endpoint_name
from contract.routes import APP_NAME_PATTERN, SESSION_ID_PATTERN, valid_app_name, valid_session_id

__all__ = [
    "AddSlash",
    "EndpointTarget",
    "Target",
    "endpoint_target",
    "parse_endpoint_host",
    "parse_endpoint_path",
    "parse_host",
    "parse_path",
]

PATH_ROOT = "/s/"
# /s/{session}/{app} then, unless the slash is missing, the rest of the path from its "/"
ENDPOINT_ROOT = "/e/"
# /e/{name} then the rest of the path from its "/" (none: the model server's root)
_ENDPOINT_PATH = re.compile(f"/e/(?P<name>{ENDPOINT_NAME_PATTERN})(?P<rest>/.*)?", re.DOTALL)
_APP_PATH = re.compile(f"/s/({SESSION_ID_PATTERN})/({APP_NAME_PATTERN})(/.*)?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Target:
    """A request's destination; ``rest`` is the raw path after ``prefix``, starting with /."""

    session_id: str
    app: str
    prefix: str  # "/s/{session}/{app}" in path mode, "" in subdomain mode
    rest: str
    cookie_path: str  # where the auth cookie is scoped: the session's prefix, or the host

    def upstream_path(self, strip_prefix: bool) -> str:
        """The path the app sees: with the prefix (Jupyter's base_url) or without it."""
        return self.rest if strip_prefix else self.prefix + self.rest


@dataclass(frozen=True, slots=True)
class AddSlash:
    """``/s/{session}/{app}`` without the final slash: send the browser to the slashed URL."""

    location: str


def parse_path(raw_path: str, query: str) -> Target | AddSlash | None:
    """The target of a path-mode URL, or None when the path is not an app's."""
    match = _APP_PATH.fullmatch(raw_path)
    if match is None or "--" in match.group(1):
        return None
    session_id, app, rest = match.groups()
    prefix = f"/s/{session_id}/{app}"
    if rest is None:
        return AddSlash(prefix + "/" + (f"?{query}" if query else ""))
    return Target(session_id, app, prefix, rest, f"/s/{session_id}/")


def parse_host(host: str, base_domain: str, raw_path: str) -> Target | None:
    """The target of a subdomain-mode request, or None when the host is not an app's."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower().rstrip(".")
    suffix = "." + base_domain
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    session_id, sep, app = label.partition("--")
    if not sep or "." in label:
        return None
    if not valid_session_id(session_id) or not valid_app_name(app):
        return None
    return Target(session_id, app, "", raw_path or "/", "/")


@dataclass(frozen=True, slots=True)
class EndpointTarget:
    """An inference endpoint request: ``rest`` is what the model server sees (``/ping``)."""

    name: str
    prefix: str  # "/e/{name}" in path mode, "" in subdomain mode
    rest: str


def parse_endpoint_path(raw_path: str) -> EndpointTarget | None:
    """``/e/{name}/rest`` (``/e/{name}`` is the server's root; no redirect for API clients).

    >>> parse_endpoint_path("/e/iris/invocations")
    EndpointTarget(name='iris', prefix='/e/iris', rest='/invocations')
    """
    match = _ENDPOINT_PATH.fullmatch(raw_path)
    if match is None or "--" in match["name"]:  # the pattern checked the rest of the name
        return None
    name, rest = match["name"], match["rest"]
    return EndpointTarget(name, f"/e/{name}", rest or "/")


def parse_endpoint_host(
    host: str, base_domain: str, raw_path: str, *, exclude: str = ""
) -> EndpointTarget | None:
    """``{name}.{base_domain}`` (a label without ``--``, which marks a session's app).

    >>> parse_endpoint_host("iris.apps.example.org", "apps.example.org", "/ping")
    EndpointTarget(name='iris', prefix='', rest='/ping')
    """
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower().rstrip(".")
    suffix = "." + base_domain
    if not name.endswith(suffix) or name == exclude:
        return None
    label = name[: -len(suffix)]
    if not valid_endpoint_name(label):
        return None
    return EndpointTarget(label, "", raw_path or "/")


def endpoint_target(
    host: str, raw_path: str, *, base_domain: str | None, public_host: str, on_path: bool
) -> EndpointTarget | None:
    """The endpoint a request is for: its host first (with a base domain; never the
    proxy's own public host), then its ``/e/{name}`` path when *on_path*."""
    target: EndpointTarget | None = None
    if base_domain:
        target = parse_endpoint_host(host, base_domain, raw_path, exclude=public_host)
    if target is None and on_path:
        target = parse_endpoint_path(raw_path)
    return target
