"""Every Redis name jobgate uses: queues, job ids, keys, channels and streams.

One module, as arq keeps its prefixes in ``constants.py``: whoever reads Redis with
``redis-cli --scan --pattern 'jobgate:*'`` finds each name here, with who writes it and
who reads it.

| name | kind | written by | read by |
|---|---|---|---|
| ``jobgate:queue:scheduler`` | arq queue | gateway, workers' events | scheduler |
| ``jobgate:queue:events`` | arq queue | workers | gateway (event consumer) |
| ``jobgate:queue:node:{node}`` | arq queue | scheduler, gateway | the node's worker |
| ``jobgate:queue:simhost:{node}`` | arq queue | scheduler | a simulated host |
| ``jobgate:queue:host:{node}`` | arq queue | scheduler, gateway | a host of many nodes (Slurm) |
| ``jobgate:heartbeat:{node}`` | string, TTL | worker | scheduler, ``/v1/nodes`` |
| ``jobgate:node-alive:{node}`` | string, TTL | the node's keeper | reconciler, ``/v1/nodes`` |
| ``jobgate:schedule-dirty:{group}`` | string, TTL | gateway | scheduler |
| ``jobgate:live:{session}`` | stream | gateway | SSE followers |
| ``jobgate:route:{session}`` | string | gateway | app proxy |
| ``jobgate:route-changes`` | pub/sub | gateway | app proxy |
| ``jobgate:activity:{session}`` | string | app proxy | gateway (idle reaper) |
| ``jobgate:app-token-used:{id}`` | string, TTL | app proxy | app proxy |
| ``jobgate:console:{sha256(cookie)}`` | string, TTL | gateway (console sign-in) | gateway |
| ``jobgate:endpoint:{name}`` | string | gateway (endpoint controller) | app proxy |
| ``jobgate:endpoint-changes`` | pub/sub | gateway | app proxy |
| ``jobgate:endpoint-ready:{endpoint}`` | hash (session → health) | app proxy | gateway |
| ``jobgate:endpoint-load:{endpoint}`` | hash (proxy → load), TTL | app proxy | autoscaler |
| ``jobgate:endpoint-wake:{endpoint}`` | string, TTL | app proxy | gateway (controller) |
| ``jobgate:endpoint-wakes`` | pub/sub | app proxy, gateway (API, events) | gateway (controller) |
| ``jobgate:endpoint-controller`` | string, TTL | endpoint controller (leader) | schedulers |
| ``n:{node}:start:{kernel}``, ``n:{node}:stop:…``, … | arq job ids | gateway | the node |
| ``e:{node}:{uuid}`` (a sim host: ``events:{uuid}``) | arq job ids | the node's worker | gateway |
| ``schedule:{group}`` | arq job id | gateway | scheduler |

A job on a node's queue and a node's event job carry the node in their id, so the node's
own Redis user (:mod:`contract.acl`) reaches the keys arq keeps for them
(``arq:job:{id}`` and the rest) and no other node's.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACTIVITY_KEY_PREFIX",
    "CONSOLE_SESSION_PREFIX",
    "ENDPOINT_CHANNEL",
    "ENDPOINT_LEADER_KEY",
    "ENDPOINT_WAKE_CHANNEL",
    "EVENTS_QUEUE",
    "HEARTBEAT_PREFIX",
    "KEEPER_PREFIX",
    "LIVE_KEY_PREFIX",
    "ROUTE_CHANNEL",
    "ROUTE_KEY_PREFIX",
    "SCHEDULER_QUEUE",
    "USED_TOKEN_PREFIX",
    "activity_key",
    "commit_job_id",
    "console_session_key",
    "console_sso_key",
    "dirty_key",
    "endpoint_load_key",
    "endpoint_ready_key",
    "endpoint_route_key",
    "endpoint_wake_key",
    "event_job_id",
    "event_job_node",
    "heartbeat_key",
    "is_events_job",
    "keeper_key",
    "live_key",
    "many_host_queue",
    "node_queue",
    "own_jobs",
    "queued_job_id",
    "route_key",
    "schedule_job_id",
    "sim_host_queue",
    "sso_used_key",
    "start_job_id",
    "stop_job_id",
    "used_token_key",
]

PREFIX: Final = "jobgate:"

# ---- arq queues ------------------------------------------------------------------------
SCHEDULER_QUEUE: Final = "jobgate:queue:scheduler"
EVENTS_QUEUE: Final = "jobgate:queue:events"


def node_queue(node_id: str) -> str:
    """A worker node's own queue (start and stop jobs for its kernels)."""
    return f"jobgate:queue:node:{node_id}"


def sim_host_queue(node_id: str) -> str:
    """The one queue a simulated host serves for all its nodes."""
    return f"jobgate:queue:simhost:{node_id}"


def many_host_queue(node_id: str) -> str:
    """The one queue a worker that attaches many real nodes (a Slurm partition's)
    serves for all of them; *node_id* is the worker's own id."""
    return f"jobgate:queue:host:{node_id}"


NODE_QUEUE_PREFIX: Final = "jobgate:queue:node:"


def queued_job_id(queue: str, job_id: str) -> str:
    """*job_id* as enqueued on *queue*: ``n:{node}:{job_id}`` on a node's queue."""
    if queue.startswith(NODE_QUEUE_PREFIX):
        return own_jobs(queue.removeprefix(NODE_QUEUE_PREFIX)) + job_id
    return job_id


def event_job_id(node_id: str | None, unique: str) -> str:
    """An events job's id: ``e:{node}:{unique}`` from one node's worker (whose Redis user
    may write only those), ``events:{unique}`` from a sim host (many nodes, one login)."""
    return f"e:{node_id}:{unique}" if node_id else f"events:{unique}"


def event_job_node(job_id: str) -> str | None:
    """The node an events job's id names (None: a sim host's or an older worker's). Node
    ids hold no ``:``, so the first field is the node whose Redis user wrote it."""
    if not job_id.startswith("e:"):
        return None
    node, sep, _ = job_id[2:].partition(":")
    return node if sep and node else None


def is_events_job(job_id: str) -> bool:
    """Whether *job_id* may be consumed from the events queue: a node's (``e:``) or one
    written with the shared login (``events:``). A node may add any id to that queue, so
    the consumer takes no other (it would delete another queue's job's keys)."""
    return job_id.startswith(("e:", "events:"))


def own_jobs(node_id: str) -> str:
    """The prefix of every job id on *node_id*'s queue (:func:`queued_job_id`)."""
    return f"n:{node_id}:"


# ---- arq job ids: derived from database rows, so a second enqueue is refused -----------
def start_job_id(kernel_id: str) -> str:
    return f"start:{kernel_id}"


def stop_job_id(kernel_id: str) -> str:
    return f"stop:{kernel_id}"


def schedule_job_id(resource_group: str) -> str:
    return f"schedule:{resource_group}"


# ---- keys ------------------------------------------------------------------------------
HEARTBEAT_PREFIX: Final = "jobgate:heartbeat:"
KEEPER_PREFIX: Final = "jobgate:node-alive:"
LIVE_KEY_PREFIX: Final = "jobgate:live:"
ROUTE_KEY_PREFIX: Final = "jobgate:route:"
ACTIVITY_KEY_PREFIX: Final = "jobgate:activity:"
USED_TOKEN_PREFIX: Final = "jobgate:app-token-used:"
CONSOLE_SESSION_PREFIX: Final = "jobgate:console:"
ROUTE_CHANNEL: Final = "jobgate:route-changes"


def heartbeat_key(node_id: str) -> str:
    """A node's :class:`~contract.messages.Heartbeat` (JSON) with a TTL: the node is alive."""
    return HEARTBEAT_PREFIX + node_id


def keeper_key(node_id: str) -> str:
    """Written with a TTL by the node's keeper, a process that outlives a worker restart:
    the machine (and the kernels on it) is alive even while its worker is not."""
    return KEEPER_PREFIX + node_id


def dirty_key(resource_group: str) -> str:
    """Set when a group needs a scheduling pass; the scheduler clears it before each pass."""
    return f"jobgate:schedule-dirty:{resource_group}"


def live_key(session_id: str) -> str:
    """A session's stream of live status and log events."""
    return LIVE_KEY_PREFIX + session_id


def route_key(session_id: str) -> str:
    """A session's :class:`~contract.routes.RouteRecord` (JSON) for the app proxy."""
    return ROUTE_KEY_PREFIX + session_id


def activity_key(session_id: str) -> str:
    """Epoch seconds of the last proxied traffic into a session."""
    return ACTIVITY_KEY_PREFIX + session_id


def used_token_key(token_id: str) -> str:
    """Marks a one-time app token as spent."""
    return USED_TOKEN_PREFIX + token_id


def console_sso_key(state_digest: str) -> str:
    """A console sign-in under way at an identity provider (JSON: the provider, nonce,
    PKCE verifier and the browser's binding), by the SHA-256 of its ``state``; read once."""
    return CONSOLE_SESSION_PREFIX + "sso:" + state_digest


def sso_used_key(token_digest: str) -> str:
    """An ID token already traded for a key (by its SHA-256), until it expires: each
    token signs in once, so one copied from a log or a proxy cannot sign in again."""
    return "jobgate:sso:used:" + token_digest


def console_session_key(cookie_digest: str) -> str:
    """A web console sign-in (JSON: the API key's hash and the CSRF token), by the SHA-256
    of the cookie's value, so a Redis dump holds no usable cookie."""
    return CONSOLE_SESSION_PREFIX + cookie_digest


# ---- inference endpoints (see contract.endpoints) --------------------------------------
ENDPOINT_CHANNEL: Final = "jobgate:endpoint-changes"
ENDPOINT_WAKE_CHANNEL: Final = "jobgate:endpoint-wakes"


def endpoint_route_key(name: str) -> str:
    """An endpoint's :class:`~contract.endpoints.EndpointRoute` (JSON), by endpoint name."""
    return f"jobgate:endpoint:{name}"


def endpoint_ready_key(endpoint_id: str) -> str:
    """Hash: replica session id -> :class:`~contract.endpoints.ReplicaHealth` (JSON)."""
    return f"jobgate:endpoint-ready:{endpoint_id}"


def endpoint_load_key(endpoint_id: str) -> str:
    """Hash: proxy id -> :class:`~contract.endpoints.LoadReport` (JSON)."""
    return f"jobgate:endpoint-load:{endpoint_id}"


def endpoint_wake_key(endpoint_id: str) -> str:
    """Set (NX, with a TTL) by a proxy holding a request while no replica is ready."""
    return f"jobgate:endpoint-wake:{endpoint_id}"


#: the endpoint controller's leader lease (value: the holder's random id)
ENDPOINT_LEADER_KEY: Final = "jobgate:endpoint-controller"


# ---- session commits (issue 15): one commit job per (kernel, image) --------------------
def commit_job_id(kernel_id: str, image: str, request: str) -> str:
    """One commit request's job (the gateway sends it once, when the image row enters
    "committing"; a repeated request while it commits sends nothing)."""
    return f"commit:{kernel_id}:{image}:{request}"
