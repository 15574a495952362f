"""The gateway <-> app proxy contract: route records, app names and app URLs.

The gateway writes routes and mints links; the proxy reads routes and checks links. Both
import this module; neither imports the other. It needs only pydantic and, for the async
helpers, a ``redis.asyncio.Redis`` that the caller brings. Key and channel names are in
:mod:`contract.keys`.

* **Routes** - one Redis key per session, ``route_key(session_id)``, holding a
  :class:`RouteRecord` as JSON. The gateway writes it with :func:`write_route` once the
  session's ports are known and marks it ended with :func:`end_route` when the session
  ends (the ended record keeps answering "session has ended" for ``ENDED_ROUTE_TTL``).
  Both publish the session id on ``contract.keys.ROUTE_CHANNEL``; proxies drop their cached copy.
  Publishing ``"*"`` tells every proxy to drop its whole cache.
* **Activity** - the proxy writes ``activity_key(session_id)`` = epoch seconds (an
  integer, as a string) at most every few seconds while traffic flows; the gateway's
  reconciler reads it to end idle interactive sessions.
* **App URLs** - :func:`app_url` builds the link the gateway returns from
  ``POST /v1/sessions/{id}/apps/{app}``, with a one-time token from
  :func:`~contract.tokens.issue_app_token`.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.apps import Credential
from contract.keys import ROUTE_CHANNEL, route_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "APP_NAME_PATTERN",
    "ENDED_ROUTE_TTL",
    "INVALIDATE_ALL",
    "SESSION_ID_PATTERN",
    "TOKEN_QUERY_PARAM",
    "AppRoute",
    "RouteRecord",
    "app_url",
    "end_route",
    "valid_app_name",
    "valid_session_id",
    "write_route",
]

ENDED_ROUTE_TTL: Final = 86_400  # an ended route answers "session has ended" for a day
TOKEN_QUERY_PARAM: Final = "jobgate_token"
INVALIDATE_ALL: Final = "*"  # published on ROUTE_CHANNEL: drop every cached route

# Session ids and app names travel in URL paths and DNS labels ({session}--{app}), so
# they are restricted to what both carry unchanged; "--" separates the two in a host.
SESSION_ID_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
APP_NAME_PATTERN: Final = r"[a-z0-9][a-z0-9_-]{0,31}"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_APP_NAME = re.compile(APP_NAME_PATTERN)


def valid_session_id(value: str) -> bool:
    """Letters, digits, ``_`` and ``-`` (no ``--``), at most 64 characters, like a UUID."""
    return bool(_SESSION_ID.fullmatch(value)) and "--" not in value


def valid_app_name(value: str) -> bool:
    """Lower-case letters, digits, ``_`` and ``-``, at most 32: ``jupyter``, ``code-server``."""
    return bool(_APP_NAME.fullmatch(value))


class AppRoute(BaseModel):
    """Where one app of a session listens, and whether it wants its URL prefix removed."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    upstream: str  # "http://host:port", no path
    protocol: Literal["http"] = "http"  # HTTP, SSE and WebSocket all ride on "http"
    strip_prefix: bool = False  # False: the app sees /s/{session}/{app}/... (Jupyter)
    #: how the proxy presents the session's app secret (contract.apps.CREDENTIALS); the
    #: secret itself is not here, the proxy derives it. None: the app checks nothing (an
    #: inference replica, or a route written by an older gateway)
    credential: Credential | None = None

    @field_validator("upstream")
    @classmethod
    def _origin_only(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"upstream must be http(s)://host:port, got {value!r}")
        if parts.path not in {"", "/"} or parts.query or parts.fragment:
            raise ValueError(f"upstream must not carry a path or query, got {value!r}")
        return f"{parts.scheme}://{parts.netloc}"


class RouteRecord(BaseModel):
    """Everything a proxy needs to route and authorise traffic into one session."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    session_id: str
    owner_id: str
    status: Literal["running", "ended"] = "running"
    apps: dict[str, AppRoute] = Field(default_factory=dict)
    updated_at: float = Field(default_factory=time.time)

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str) -> str:
        if not valid_session_id(value):
            raise ValueError(f"session id {value!r} cannot appear in a URL or host name")
        return value

    @field_validator("apps")
    @classmethod
    def _app_names(cls, value: dict[str, AppRoute]) -> dict[str, AppRoute]:
        for name in value:
            if not valid_app_name(name):
                raise ValueError(f"app name {name!r}: use a-z, 0-9, '_' and '-' (32 at most)")
        return value

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str | bytes) -> RouteRecord:
        return cls.model_validate_json(raw)


async def write_route(redis: Redis, record: RouteRecord) -> None:
    """Store a running session's route and tell every proxy to reload it."""
    async with redis.pipeline(transaction=True) as pipe:
        if record.status == "ended":
            pipe.set(route_key(record.session_id), record.to_json(), ex=ENDED_ROUTE_TTL)
        else:
            pipe.set(route_key(record.session_id), record.to_json())
        pipe.publish(ROUTE_CHANNEL, record.session_id)
        await pipe.execute()


async def end_route(
    redis: Redis, session_id: str, *, owner_id: str | None = None, ttl: int = ENDED_ROUTE_TTL
) -> None:
    """Mark a session's route ended (kept ``ttl`` seconds for the "ended" page) and publish.

    Without a stored record and without ``owner_id`` there is nothing to keep: the key is
    removed and proxies answer 404 for the session.
    """
    raw: Any = await redis.get(route_key(session_id))
    owner = owner_id
    if raw is not None:
        owner = owner or RouteRecord.from_json(raw).owner_id
    async with redis.pipeline(transaction=True) as pipe:
        if owner is None:
            pipe.delete(route_key(session_id))
        else:
            ended = RouteRecord(session_id=session_id, owner_id=owner, status="ended", apps={})
            pipe.set(route_key(session_id), ended.to_json(), ex=ttl)
        pipe.publish(ROUTE_CHANNEL, session_id)
        await pipe.execute()


def app_url(
    public_url: str, session_id: str, app: str, token: str, *, base_domain: str | None = None
) -> str:
    """The link that opens ``app``: path mode by default, ``{session}--{app}.{base_domain}``.

    ``public_url`` is the proxy as browsers reach it (``https://apps.example.org``, served
    at the root of its host); in subdomain mode only its scheme and port are used.
    """
    parts = urlsplit(public_url)
    query = f"?{TOKEN_QUERY_PARAM}={token}"
    if base_domain:
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{session_id}--{app}.{base_domain}{port}/{query}"
    return f"{parts.scheme}://{parts.netloc}/s/{session_id}/{app}/{query}"
