"""A small synchronous client for the jobgate API (what the CLI uses).

Errors come back as :class:`ApiError` carrying the RFC 7807 problem the gateway sent.
``follow()`` reads a Server-Sent Events stream and yields ``(event, data)`` pairs.
"""

from __future__ import annotations

import json
import ssl
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

# httpx imports its own command line (click, pygments, rich.syntax: half its import time)
# unless that import fails; jobgate never runs it, and every command pays for the import
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import httpx  # noqa: E402

from jobgate.errors import ApiError  # noqa: E402
from jobgate.profile import Profile  # noqa: E402

__all__ = ["ApiError", "Client", "iter_sse", "segment", "segments"]


def segment(value: str) -> str:
    """*value* as one URL path segment: a name with ``/``, ``?`` or ``#`` in it stays one
    name (``show "a/tokens"`` must not reach another route), and so do ``.`` and ``..``
    (which an HTTP client would otherwise resolve away: ``show ..`` is not ``GET /v1``).
    An empty name is refused here: it would name the list route instead."""
    if not value:
        raise ApiError(0, "Usage", "a name cannot be empty")
    return _part(value)


def _part(value: str) -> str:
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def segments(path: str) -> str:
    """A path inside a folder, each of its parts a :func:`segment` (the server checks them)."""
    return "/".join(_part(part) for part in path.split("/"))


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    raise ApiError(
        response.status_code,
        str(body.get("title", response.reason_phrase)),
        str(body.get("detail", response.text[:200] or response.reason_phrase)),
        body.get("field") or body.get("check"),  # a refused sign-in names its check
    )


def iter_sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Parse ``event:``/``data:`` frames; comments (keep-alives) are skipped."""
    event, data = "message", list[str]()
    for line in lines:
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def tls_for(url: str) -> ssl.SSLContext | bool:
    """What a client of *url* verifies TLS peers with. An ``https://`` URL: the system's
    trust store, as httpx loads it. A plain ``http://`` one never speaks TLS, and loading
    the store costs tens of milliseconds per command; it gets a context that requires
    verification and trusts nobody, so a TLS peer it ever met would be refused, not
    trusted."""
    if url.lower().startswith("https://"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class Client:
    def __init__(self, profile: Profile, timeout: float = 30.0) -> None:
        if not profile.url:
            raise ApiError(0, "Not configured", "no API URL: run `jobgate up` or set JOBGATE_URL")
        self.profile = profile
        headers = {"Authorization": f"Bearer {profile.api_key}"} if profile.api_key else {}
        self.http = httpx.Client(
            base_url=profile.url, headers=headers, timeout=timeout, verify=tls_for(profile.url)
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON body; ``None`` for an answer without one (204)."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        _raise_for(response)
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def _unreachable(self, exc: httpx.TransportError, lost: bool = False) -> ApiError:
        what = "lost the connection to" if lost else "cannot reach"
        cause = str(exc).split("]")[-1].strip() or type(exc).__name__
        return ApiError(
            0,
            "Unreachable",
            f"{what} the jobgate API at {self.profile.url} ({cause}); "
            "is it running? start one with `jobgate up`",
        )

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def follow(self, path: str, **params: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            with self.http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(30.0, read=None)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for(response)
                yield from iter_sse(response.iter_lines())
        except httpx.TransportError as exc:
            raise self._unreachable(exc, lost=True) from None

    def resolve_session(self, ref: str) -> str:
        """A full id from an id, a unique id prefix, or a session name.

        A name means the caller's newest session with that name: names are unique among
        live sessions, so that is the live one if there is one, else the newest that ended.
        """
        if not ref:
            raise ApiError(0, "Usage", "a name cannot be empty")
        if _is_uuid(ref):
            return ref
        items: list[dict[str, Any]] = []
        if all(c in "0123456789abcdef-" for c in ref.lower()):
            items = self.get("/v1/sessions", params={"id_prefix": ref, "limit": 2, "all": True})[
                "items"
            ]
            if len(items) > 1:
                raise ApiError(
                    409, "Ambiguous", f"{ref!r} matches several sessions; give more of the id"
                )
        if not items:
            items = self.get("/v1/sessions", params={"name": ref, "limit": 1})["items"]
        if not items:
            raise ApiError(
                404, "Not found", f"no session matches {ref!r} (an id, id prefix or name)"
            )
        session_id: str = items[0]["id"]
        return session_id

    def close(self) -> None:
        self.http.close()


def _is_uuid(ref: str) -> bool:
    """Whether *ref* is a whole session id (a 36-character name is not)."""
    try:
        return str(uuid.UUID(ref)) == ref.lower()
    except ValueError:
        return False
