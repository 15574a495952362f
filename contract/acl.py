"""The Redis users of nodes and of the app proxy: what each may touch, and how both
sides know its password.

**A node** (``jobgate-node-{node}``):

The gateway makes the user when the node's worker asks at start
(``POST /v1/internal/nodes/redis-user``, with ``JOBGATE_REDIS_USERS``) and the worker
logs in as it: the password is an HMAC of the node's credential, so neither side
stores or sends another secret, and Redis keeps only its SHA-256 (``#digest``), which
the gateway also keeps to make the user again after Redis lost it (a restart without an
ACL file). The rules follow the keys a worker uses (:mod:`contract.keys`):

* its own queue and the arq keys of its own jobs (ids ``n:{node}:…``), read and write;
* its heartbeat and keeper keys;
* the arq keys of its own event jobs (ids ``e:{node}:…``), and on the shared events queue
  only ``ZADD`` (a selector): it can neither read nor remove other nodes' events;
* ``ZREM`` on arq's abort set, which arq's worker clears after each job (jobgate's
  workers never honour aborts);
* no ``KEYS``, ``SCAN`` or ``RANDOMKEY`` (key names would tell other nodes' kernel ids),
  no ``CLIENT TRACKING`` (its broadcast mode tells every key changed, whatever the
  ACL) - of the connection commands only what a client needs to log in - no ``SELECT``
  of another database, no pub/sub, no administrative or dangerous command but ``INFO``,
  which arq reads.

**The app proxy** (``jobgate-proxy``), whose password is an HMAC of the proxy secret,
which the gateway and the proxies hold anyway: it reads routes and endpoint routes (and
SCANs for the latter), writes activity, spent one-time tokens and endpoint readiness,
load and wake keys, and uses the route, endpoint and wake channels. It cannot write a
route, touch a queue or a job, read console sign-ins or heartbeats.

Anything else is refused with ``NOPERM`` and written to Redis's ``ACL LOG``. Selectors
and ``%R~`` need Redis 7.0 or later. Users are server-wide: one Redis per deployment.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from contract.keys import (
    ACTIVITY_KEY_PREFIX,
    ENDPOINT_CHANNEL,
    ENDPOINT_WAKE_CHANNEL,
    EVENTS_QUEUE,
    ROUTE_CHANNEL,
    ROUTE_KEY_PREFIX,
    USED_TOKEN_PREFIX,
    endpoint_load_key,
    endpoint_ready_key,
    endpoint_route_key,
    endpoint_wake_key,
    heartbeat_key,
    keeper_key,
    node_queue,
)

#: arq's own key names (arq.constants; contract imports no arq: tests/unit/test_job_ids.py
#: checks they agree)
ARQ_JOB_PREFIXES: Final = ("arq:job:", "arq:in-progress:", "arq:retry:", "arq:result:")
ARQ_ABORT_SET: Final = "arq:abort"
ARQ_HEALTH_SUFFIX: Final = ":health-check"

__all__ = [
    "ARQ_ABORT_SET",
    "ARQ_HEALTH_SUFFIX",
    "ARQ_JOB_PREFIXES",
    "NODE_USER_PREFIX",
    "PROXY_USER",
    "node_acl_rules",
    "node_redis_password",
    "node_redis_user",
    "password_digest",
    "proxy_acl_rules",
    "proxy_redis_password",
]

#: every node's Redis user is named ``jobgate-node-{node}``
NODE_USER_PREFIX: Final = "jobgate-node-"


def node_redis_user(node_id: str) -> str:
    return NODE_USER_PREFIX + node_id


def node_redis_password(node_id: str, credential: str) -> str:
    """The node's Redis password, from its node credential (hex)."""
    message = f"jobgate-redis:{node_id}".encode()
    return hmac.new(credential.encode(), message, hashlib.sha256).hexdigest()


def password_digest(password: str) -> str:
    """What Redis keeps of a password (``ACL SETUSER … #digest``)."""
    return hashlib.sha256(password.encode()).hexdigest()


def _connection(db: int) -> list[str]:
    """What a client needs of the connection commands (not ``CLIENT TRACKING``, not a
    ``SELECT`` of another database)."""
    return [
        "+auth",
        "+hello",
        "+ping",
        "+echo",
        "+quit",
        "+reset",
        "+client|setname",
        "+client|getname",
        "+client|id",
        f"+select|{db}",
    ]


def _login(digest: str, db: int) -> list[str]:
    """What every jobgate user starts from: replaced whole (``reset``), its password's
    SHA-256, no channel, no command but reads, writes and logging in; keys per user."""
    return ["reset", "on", f"#{digest}", "resetchannels", "-@all", "+@read", "+@write",
            *_connection(db)]  # fmt: skip


def node_acl_rules(node_id: str, digest: str, db: int = 0) -> list[str]:
    """``ACL SETUSER`` arguments (after the name) for node *node_id*'s user; *digest*: the
    SHA-256 (hex) of its password. ``reset`` first, so a second call replaces all."""
    queue = node_queue(node_id)
    own_jobs = [f"~{prefix}n:{node_id}:*" for prefix in ARQ_JOB_PREFIXES]
    job, _, _, result = ARQ_JOB_PREFIXES
    own_events = [f"~{job}e:{node_id}:*", f"~{result}e:{node_id}:*"]
    return [
        *_login(digest, db),
        "+@transaction",
        "-@dangerous",
        "-scan",
        "-randomkey",
        "+info",
        f"~{queue}",
        f"~{queue}{ARQ_HEALTH_SUFFIX}",
        *own_jobs,
        *own_events,
        f"~{heartbeat_key(node_id)}",
        f"~{keeper_key(node_id)}",
        f"(+zadd ~{EVENTS_QUEUE})",
        f"(+zrem ~{ARQ_ABORT_SET})",
    ]


#: the app proxies' Redis user (all proxies share it)
PROXY_USER: Final = "jobgate-proxy"


def proxy_redis_password(proxy_secret: str) -> str:
    """The app proxy's Redis password, from ``JOBGATE_PROXY_SECRET`` (hex)."""
    return hmac.new(proxy_secret.encode(), b"jobgate-redis:proxy", hashlib.sha256).hexdigest()


def proxy_acl_rules(digest: str, db: int = 0) -> list[str]:
    """``ACL SETUSER`` arguments (after the name) for the app proxy's user."""
    return [
        *_login(digest, db),
        "+@pubsub",
        "-@dangerous",
        "-randomkey",
        f"%R~{ROUTE_KEY_PREFIX}*",
        f"%R~{endpoint_route_key('')}*",
        f"~{ACTIVITY_KEY_PREFIX}*",
        f"~{USED_TOKEN_PREFIX}*",
        f"~{endpoint_ready_key('')}*",
        f"~{endpoint_load_key('')}*",
        f"~{endpoint_wake_key('')}*",
        f"&{ROUTE_CHANNEL}",
        f"&{ENDPOINT_CHANNEL}",
        f"&{ENDPOINT_WAKE_CHANNEL}",
    ]
