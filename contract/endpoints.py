"""The gateway <-> app proxy contract for inference endpoints.

The gateway's endpoint controller decides which replicas exist and which take traffic;
the app proxy routes ``/e/{name}/…`` (or ``{name}.{base_domain}``) to them, probes their
readiness, counts their load and asks for a replica when a request arrives at zero.
Neither imports the other; both import this module. Key names are in :mod:`contract.keys`.

* **Routes** - ``endpoint_route_key(name)`` holds an :class:`EndpointRoute` (JSON), written
  by the controller with :func:`write_endpoint_route` whenever replicas, revision, tokens or
  settings change, and published on ``ENDPOINT_CHANNEL`` (the endpoint's name; ``"*"``
  drops every cached endpoint). A removed endpoint's key is deleted (proxies answer 404).
* **Readiness** - each proxy probes every replica listed in a route it serves (path,
  interval, timeout, thresholds from :class:`Probe`) and writes the verdict to the hash
  ``endpoint_ready_key(endpoint_id)``: field = replica session id, value =
  :class:`ReplicaHealth` (JSON). The controller reads it for status, rolling updates and
  scaling; the proxy sends traffic only to replicas whose health it saw as ready.
* **Load** - each proxy process writes its own field (``proxy_id``) of the hash
  ``endpoint_load_key(endpoint_id)`` every ``LOAD_REPORT_INTERVAL`` seconds with a
  :class:`LoadReport`; the key has a TTL of ``LOAD_REPORT_TTL``. The autoscaler (and
  ``GET /v1/endpoints/{name}``, per replica too) sums the fresh reports (``at`` within
  ``LOAD_REPORT_TTL``) across proxies.
* **Wake** - a proxy holding a request for an endpoint with no ready replica sets
  ``endpoint_wake_key(endpoint_id)`` (``SET NX EX``, value = epoch seconds) and publishes
  the endpoint id on ``ENDPOINT_WAKE_CHANNEL``; a burst of held requests thus asks once.
  The controller treats a wake as "desired replicas >= 1 now" and clears the key when a
  replica is ready. The gateway also publishes an endpoint's id there after an API write
  and when one of its replicas changes status (so the controller acts at once, not at
  its next tick); the controller only takes a message as "tick now".
* **Tokens** - endpoint tokens are ``jge_`` + 32 url-safe random bytes; the database and
  the route keep only :func:`token_digest` (SHA-256 hex). The proxy compares digests
  with ``hmac.compare_digest`` and honours ``expires_at``. The owner's jobgate API key is
  accepted too (the proxy resolves it as it does for sessions and compares ``owner_id``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.keys import ENDPOINT_CHANNEL, endpoint_route_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "ENDPOINT_APP",
    "ENDPOINT_NAME_PATTERN",
    "ENDPOINT_TOKEN_PREFIX",
    "LOAD_REPORT_INTERVAL",
    "LOAD_REPORT_TTL",
    "PROBE_PATH_PATTERN",
    "EndpointRoute",
    "LoadReport",
    "Probe",
    "ReplicaHealth",
    "ReplicaTarget",
    "TokenGrant",
    "delete_endpoint_route",
    "endpoint_url",
    "new_endpoint_token",
    "token_digest",
    "valid_endpoint_name",
    "write_endpoint_route",
]

#: the app name under which a replica session exposes its server port (its RouteRecord)
ENDPOINT_APP: Final = "inference"
ENDPOINT_TOKEN_PREFIX: Final = "jge_"
LOAD_REPORT_INTERVAL: Final = 1.0  # seconds between a proxy's load reports
LOAD_REPORT_TTL: Final = 5.0  # a report older than this is ignored (its proxy is gone)

# Endpoint names appear in URL paths and as a DNS label ({name}.{base_domain}).
ENDPOINT_NAME_PATTERN: Final = r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?"
_NAME = re.compile(ENDPOINT_NAME_PATTERN)


def valid_endpoint_name(value: str) -> bool:
    """A DNS label of at most 40: lower-case letters, digits and inner ``-``."""
    return bool(_NAME.fullmatch(value)) and "--" not in value


def new_endpoint_token() -> str:
    """A fresh endpoint token; show it once, store only :func:`token_digest`."""
    return ENDPOINT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


#: what a probe's path must be: an absolute URL path with no spaces, NUL or line breaks
#: (checked wherever a :class:`Probe` is read: the gateway's API, the controller, the proxy)
PROBE_PATH_PATTERN = "^/[^ \\x00\\r\\n]*$"


class Probe(BaseModel):
    """A replica's readiness probe (HTTP GET ``path`` answered 2xx/3xx is a success)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(
        default="/",
        pattern=PROBE_PATH_PATTERN,
        description="an absolute URL path (no spaces, NUL or line breaks)",
    )
    interval_s: float = Field(default=2.0, gt=0, le=300)
    timeout_s: float = Field(default=1.0, gt=0, le=60)
    failure_threshold: int = Field(default=2, ge=1, le=100)
    success_threshold: int = Field(default=1, ge=1, le=100)
    initial_delay_s: float = Field(default=0.0, ge=0, le=3600)


class ReplicaTarget(BaseModel):
    """One replica as the proxy needs it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    session_id: str
    index: int  # the replica's number within the endpoint, for logs and `show`
    revision: int
    upstream: str | None = None  # "http://host:port" once the session's port is known
    state: Literal["starting", "serving", "draining"] = "starting"
    # starting: probe it, no traffic until ready; serving: traffic when ready;
    # draining: no new requests, in-flight ones finish (the controller stops it later)


class TokenGrant(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    digest: str  # token_digest(token)
    expires_at: float | None = None  # epoch seconds; None never expires


class EndpointRoute(BaseModel):
    """Everything a proxy needs to route, authorise and balance one endpoint's traffic."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    endpoint_id: str
    name: str
    owner_id: str
    public: bool = False
    revision: int = 1
    replicas: tuple[ReplicaTarget, ...] = ()
    tokens: tuple[TokenGrant, ...] = ()
    probe: Probe = Probe()
    concurrency_per_replica: int = Field(default=32, ge=1)  # in flight per replica
    queue_limit: int = Field(default=128, ge=0)  # waiting requests beyond that, then 503
    wake_timeout_s: float = Field(default=60.0, gt=0)  # how long a request is held at zero
    updated_at: float = Field(default_factory=time.time)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not valid_endpoint_name(value):
            raise ValueError(f"endpoint name {value!r} is not a DNS label")
        return value

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str | bytes) -> EndpointRoute:
        return cls.model_validate_json(raw)


class ReplicaHealth(BaseModel):
    """A proxy's readiness verdict on one replica."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ready: bool
    at: float  # epoch seconds of the probe that decided it
    reason: str = ""  # why not ready: "connection refused", "HTTP 500 from /ping", …
    proxy_id: str = ""


class LoadReport(BaseModel):
    """One proxy process's view of one endpoint's load."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    at: float  # epoch seconds
    in_flight: int  # requests being served by replicas now
    queued: int  # requests waiting for a replica slot (or for a replica at zero)
    requests_total: int  # since the proxy started (for rates across reports)
    rps: float  # requests per second over the proxy's last ~10 s
    per_replica_in_flight: dict[str, int] = Field(default_factory=dict)  # by session id
    #: requests per second this proxy sent to each replica (same window as ``rps``)
    per_replica_rps: dict[str, float] = Field(default_factory=dict)


async def write_endpoint_route(redis: Redis, route: EndpointRoute) -> None:
    """Store an endpoint's route and tell every proxy to reload it."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(endpoint_route_key(route.name), route.to_json())
        pipe.publish(ENDPOINT_CHANNEL, route.name)
        await pipe.execute()


async def delete_endpoint_route(redis: Redis, name: str) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(endpoint_route_key(name))
        pipe.publish(ENDPOINT_CHANNEL, name)
        await pipe.execute()


def endpoint_url(public_url: str, name: str, *, base_domain: str | None = None) -> str:
    """``{public_url}/e/{name}/`` in path mode, ``{scheme}://{name}.{base_domain}[:port]/``."""
    parts = urlsplit(public_url)
    if base_domain:
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{name}.{base_domain}{port}/"
    return f"{parts.scheme}://{parts.netloc}/e/{name}/"
