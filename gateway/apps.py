"""The gateway's half of the app proxy: routes in Redis, app links, idle sessions.

::

    worker "running" (apps + host ports) ─▶ EventHandler ─▶ route_for ─▶ Outbox.routes
    session ends ───────────────────────▶ EventHandler ─▶ Outbox.ended_routes
                              (the outbox writes both to Redis after the commit)
    POST /v1/sessions/{id}/apps/{app} ─▶ open_app ─▶ signed one-time link ─▶ the proxy
    reconciler (_idle) ─▶ activity keys the proxy writes ─▶ idle_deadline ─▶ terminate

The route and token formats belong to :mod:`appproxy.contract`; this module only decides
what goes in them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from contract.apps import credential_for
from contract.keys import activity_key
from contract.routes import AppRoute, RouteRecord, app_url
from contract.tokens import issue_app_token
from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.models import Kernel, Node, Session
from gateway.domain.errors import Conflict, NotFound

__all__ = ["AppLink", "last_activity", "open_app", "route_for"]


@dataclass(frozen=True, slots=True)
class AppLink:
    url: str
    expires_at: float


def route_for(session: Session, kernel: Kernel, node: Node) -> RouteRecord | None:
    """Where each app of a running session listens: the node's address + host port, and
    how the proxy presents the app secret (an interactive session's apps check one; an
    inference replica's server cannot be made to)."""
    checks = session.type == "interactive"
    apps = {}
    for name, host_port in kernel.ports.items():
        info = session.apps.get(name, {})
        if info.get("protocol", "http") != "http":
            continue
        apps[name] = AppRoute(
            upstream=f"http://{node.address}:{int(host_port)}",
            strip_prefix=bool(info.get("strip_prefix", False)),
            credential=credential_for(name) if checks else None,
        )
    if not apps:
        return None
    return RouteRecord(session_id=session.id, owner_id=session.owner_id, apps=apps)


def open_app(
    settings: GatewaySettings, principal: Principal, session: Session, app: str
) -> AppLink:
    """A one-time, short-lived link that opens *app* of a RUNNING session."""
    if app not in session.apps:
        known = ", ".join(sorted(session.apps)) or "none"
        raise NotFound(f"session {session.id[:8]} serves no app {app!r} (it serves: {known})")
    if session.status != "RUNNING":
        raise Conflict(f"the session is {session.status}; apps open once it runs")
    ttl = settings.app_token_ttl_s
    token = issue_app_token(
        settings.proxy_secret.get_secret_value(),
        session.id,
        app,
        principal.user_id,
        ttl,
        admin=principal.is_admin and principal.user_id != session.owner_id,
    )
    strip = bool(session.apps[app].get("strip_prefix", False))
    domain = settings.proxy_base_domain if strip else None
    url = app_url(settings.proxy_public_url, session.id, app, token, base_domain=domain)
    return AppLink(url=url, expires_at=time.time() + ttl)


async def last_activity(redis: Redis, session_id: str) -> datetime | None:
    """When the proxy last carried traffic for the session (None: never)."""
    raw: Any = await redis.get(activity_key(session_id))
    if raw is None:
        return None
    return datetime.fromtimestamp(float(raw), UTC)
