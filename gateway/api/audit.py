"""The audit middleware: every state-changing ``/v1`` call leaves a row (``gateway/domain/
audit.py`` says which; ``services/audit.py`` writes them).

::

    request ─▶ AuditMiddleware: an AuditEntry on the scope (method, path, client, when)
               ─▶ the app: deps.py notes who called and how (note_*), the router the route;
                  the answer's status (and on a 201 the id its body names) noted as it goes
               ◀── the app returns (the answer sent, its dependencies closed) ─▶ the row
                   written (action: the route's operation id; target: its path parameters)

The row is written after the answer, in the same request (rows of concurrent calls share
one transaction): holding the answer until it is written would wait, on SQLite, for the
write lock the route's own database session keeps until its answer is sent. So a client
may see its answer a moment before the row is there, and a process killed in that moment
loses the row; a graceful stop waits for requests in flight, and so for their rows. A row
that cannot be written does not change the answer: it is logged as a WARNING with the
row's fields (docs/security.md says why). A request that raised (the 500 comes from the
server's error handler, outside) is recorded as 500.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import Principal
from gateway.domain.audit import AuditEntry, audited, kept, presented, target_of
from gateway.services.audit import AuditLog

__all__ = [
    "AuditMiddleware",
    "note_credential",
    "note_node",
    "note_principal",
    "note_refused",
    "note_sign_in",
]

log = logging.getLogger(__name__)

SCOPE_KEY: Final = "jobgate.audit"
#: a 201's answer is read for the id it names only up to this size
CREATED_MAX: Final = 64 * 1024


def _entry(request: Request) -> AuditEntry | None:
    entry = request.scope.get(SCOPE_KEY)
    return entry if isinstance(entry, AuditEntry) else None


def note_principal(request: Request, principal: Principal, via: str = "key") -> None:
    """The request was made by *principal* (through its key, or the console's sign-in)."""
    if (entry := _entry(request)) is not None:
        entry.actor = principal.name
        key = f"key {principal.key_name} ({principal.key_prefix})" if principal.key_id else ""
        entry.credential = f"console, {key}" if via == "console" else key


def note_sign_in(request: Request, user: str, provider: str, key_name: str) -> None:
    """A single sign-on through *provider* made key *key_name* for *user*."""
    if (entry := _entry(request)) is not None:
        entry.actor = user
        entry.credential = f"oidc {provider}, made key {key_name}"[:160]


def note_refused(request: Request, token: str | None) -> None:
    """The key the request presented was refused (401): only its shown prefix is kept."""
    if (entry := _entry(request)) is not None:
        entry.credential = presented(token) if token else "none"


def note_node(request: Request, node_id: str | None) -> None:
    """A node's own credential (None: one that was refused)."""
    if (entry := _entry(request)) is not None:
        entry.credential = f"node {node_id}" if node_id else "refused node credential"


def note_credential(request: Request, credential: str) -> None:
    """Any other credential, in words: "join token", "hook signature" ..."""
    if (entry := _entry(request)) is not None:
        entry.credential = credential


class AuditMiddleware:
    """Pure ASGI: records every request :func:`audited` says to, once it is answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not audited(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        entry = AuditEntry(
            at=datetime.now(UTC),
            method=scope["method"],
            path=str(scope.get("root_path", "")) + scope["path"],
            client=str(client[0]) if client else "",
        )
        scope[SCOPE_KEY] = entry
        created = ""

        async def sending(message: Message) -> None:
            nonlocal created
            if message["type"] == "http.response.start":
                entry.status = int(message["status"])
            elif entry.status == 201 and not created and not message.get("more_body", False):
                created = _created(message.get("body", b""))  # only the id is kept
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:  # raised before answering: the server's error handler sends a 500
            entry.status = entry.status or 500
            await self._write(scope, entry, created)

    async def _write(self, scope: Scope, entry: AuditEntry, created: str) -> None:
        route = scope.get("route")
        methods = getattr(route, "methods", None)
        if methods and scope["method"] not in methods:  # a 405: the path's other route
            route = None
        entry.action = str(getattr(route, "operation_id", None) or getattr(route, "name", ""))
        params = target_of(scope.get("path_params") or {})
        entry.target = " ".join(t for t in (params, created) if t)
        if not kept(entry.action, entry.status):
            return
        audit: AuditLog = scope["app"].state.jobgate.audit
        try:
            await audit.record(entry)
        except Exception as exc:  # the answer stands; the row is in the log instead
            log.warning("audit row not written (%s): %s", exc.__class__.__name__, entry.row())


def _created(body: bytes) -> str:
    """The id (else the name) a 201's JSON answer names; nothing else of it is kept."""
    if len(body) > CREATED_MAX:
        return ""
    try:
        answer = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(answer, dict):
        return ""
    for name in ("id", "name"):
        value = answer.get(name)
        if isinstance(value, str) and value:
            return f"{name}={value}"
    return ""
