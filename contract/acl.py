"""Each node's own Redis user: what it may touch, and how both sides know its password.

The gateway makes the user when the node joins (``JOBGATE_REDIS_NODE_USERS``), the
worker logs in as it: the password is an HMAC of the node's credential, so neither side
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
  no pub/sub, no administrative or dangerous command but ``INFO``, which arq reads.

Anything else is refused with ``NOPERM`` and written to Redis's ``ACL LOG``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from contract.keys import EVENTS_QUEUE, heartbeat_key, keeper_key, node_queue

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
    "node_acl_rules",
    "node_redis_password",
    "node_redis_user",
    "password_digest",
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


def node_acl_rules(node_id: str, digest: str) -> list[str]:
    """``ACL SETUSER`` arguments (after the name) for node *node_id*'s user; *digest*: the
    SHA-256 (hex) of its password. ``reset`` first, so a second call replaces all."""
    queue = node_queue(node_id)
    own_jobs = [f"~{prefix}n:{node_id}:*" for prefix in ARQ_JOB_PREFIXES]
    job, _, _, result = ARQ_JOB_PREFIXES
    own_events = [f"~{job}e:{node_id}:*", f"~{result}e:{node_id}:*"]
    return [
        "reset",
        "on",
        f"#{digest}",
        "resetchannels",
        "-@all",
        "+@read",
        "+@write",
        "+@transaction",
        "+@connection",
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
