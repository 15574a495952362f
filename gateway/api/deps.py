"""FastAPI dependencies: the app state, its services, a database session and the
calling principal.

Routes reach data through services only, each built once per process and kept in
``AppState``: a route names the service it uses by its alias here (``users: Users``).

The principal comes from ``Authorization: Bearer jg_...`` or, without one, from the web
console's sign-in cookie (``gateway/console/cookies.py``: same principal as its key,
CSRF token and Origin checked on writes). The key must carry the scope the route needs
(``scopes.py``, one table for the app): else a 403 naming the scope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import audit
from gateway.api.scopes import ANY_KEY, required
from gateway.auth import Principal, authenticate_request, constant_time_equal, note_use
from gateway.console import cookies as console
from gateway.domain.errors import Forbidden, Unauthenticated
from gateway.services.audit import AuditLog
from gateway.services.blobs import BlobStore
from gateway.services.budgets import BudgetService
from gateway.services.endpoints import EndpointService
from gateway.services.folders import FolderService
from gateway.services.groups import GroupService
from gateway.services.health import HealthService
from gateway.services.hooks import HookService
from gateway.services.images import ImageService
from gateway.services.logs import LogService
from gateway.services.node_credentials import NodeCredentialService
from gateway.services.nodes import NodeService
from gateway.services.oidc import OidcService
from gateway.services.policies import PolicyService
from gateway.services.projects import ProjectService
from gateway.services.secrets import SecretService
from gateway.services.sessions import SessionService
from gateway.services.templates import TemplateService
from gateway.services.usage import UsageService
from gateway.services.users import UserService
from gateway.services.webhooks import WebhookService
from gateway.state import AppState

__all__ = [
    "Admin",
    "AuditLogs",
    "Blobs",
    "Budgets",
    "CurrentNode",
    "CurrentUser",
    "DbSession",
    "Endpoints",
    "Folders",
    "Groups",
    "Health",
    "Hooks",
    "IdempotencyKey",
    "Images",
    "JoinAuth",
    "Logs",
    "NodeBearer",
    "NodeCredentials",
    "Nodes",
    "Oidc",
    "Policies",
    "Projects",
    "Secrets",
    "Sessions",
    "State",
    "Templates",
    "UsageReports",
    "Users",
    "Webhooks",
]

_bearer = HTTPBearer(auto_error=False, description="an API key: jg_...")


async def _state(request: Request) -> AppState:  # async: sync deps run in a thread
    state: AppState = request.app.state.jobgate
    return state


State = Annotated[AppState, Depends(_state)]


async def _health(state: State) -> HealthService:
    return state.health


async def _users(state: State) -> UserService:
    return state.users


async def _projects(state: State) -> ProjectService:
    return state.projects


async def _policies(state: State) -> PolicyService:
    return state.policies


async def _groups(state: State) -> GroupService:
    return state.groups


async def _nodes(state: State) -> NodeService:
    return state.nodes


async def _images(state: State) -> ImageService:
    return state.images


async def _endpoints(state: State) -> EndpointService:
    return state.endpoints


async def _sessions(state: State) -> SessionService:
    return state.sessions


async def _logs(state: State) -> LogService:
    return state.logs


async def _blobs(state: State) -> BlobStore:
    return state.blobs


async def _folders(state: State) -> FolderService:
    return state.folders


async def _templates(state: State) -> TemplateService:
    return state.templates


async def _hooks(state: State) -> HookService:
    return state.hooks


async def _webhooks(state: State) -> WebhookService:
    return state.webhooks


async def _budgets(state: State) -> BudgetService:
    return state.budgets


async def _usage(state: State) -> UsageService:
    return state.usage


async def _secrets(state: State) -> SecretService:
    return state.secrets


async def _audit(state: State) -> AuditLog:
    return state.audit


async def _oidc(state: State) -> OidcService:
    return state.oidc


Health = Annotated[HealthService, Depends(_health)]
Users = Annotated[UserService, Depends(_users)]
Projects = Annotated[ProjectService, Depends(_projects)]
Policies = Annotated[PolicyService, Depends(_policies)]
Budgets = Annotated[BudgetService, Depends(_budgets)]
Groups = Annotated[GroupService, Depends(_groups)]
Nodes = Annotated[NodeService, Depends(_nodes)]
Images = Annotated[ImageService, Depends(_images)]
Endpoints = Annotated[EndpointService, Depends(_endpoints)]
Sessions = Annotated[SessionService, Depends(_sessions)]
Logs = Annotated[LogService, Depends(_logs)]
Blobs = Annotated[BlobStore, Depends(_blobs)]
Folders = Annotated[FolderService, Depends(_folders)]
Secrets = Annotated[SecretService, Depends(_secrets)]
Templates = Annotated[TemplateService, Depends(_templates)]
Hooks = Annotated[HookService, Depends(_hooks)]
Webhooks = Annotated[WebhookService, Depends(_webhooks)]
UsageReports = Annotated[UsageService, Depends(_usage)]
AuditLogs = Annotated[AuditLog, Depends(_audit)]
Oidc = Annotated[OidcService, Depends(_oidc)]


async def _db(state: State) -> AsyncIterator[AsyncSession]:
    async with state.db() as db:
        yield db


DbSession = Annotated[AsyncSession, Depends(_db)]


async def _principal(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    principal = await _authenticated(request, state, credentials)
    audit.note_principal(request, principal, "key" if credentials is not None else "console")
    route = request.scope.get("route")
    scope = required(request.method, getattr(route, "path", ""))
    if scope is not None and scope != ANY_KEY and not principal.allows(scope):
        raise Forbidden(f"this API key lacks the {scope!r} scope", missing_scope=scope)
    await note_use(state.db, principal, state.keys)
    return principal


async def _authenticated(
    request: Request, state: AppState, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    if credentials is not None:
        try:
            return await authenticate_request(state.db, credentials.credentials, state.keys)
        except Unauthenticated:
            audit.note_refused(request, credentials.credentials)
            raise
    cookie = request.cookies.get(console.COOKIE)
    if cookie:  # the web console: same principal as its key, CSRF checks on writes
        try:
            return await _console(request, state, cookie)
        except Unauthenticated:
            audit.note_credential(request, "refused console sign-in")
            raise
        except Forbidden:  # a write without the page's CSRF token, or from another origin
            audit.note_credential(request, "console sign-in, write refused (CSRF or origin)")
            raise
    audit.note_refused(request, None)
    raise Unauthenticated("send an API key: Authorization: Bearer jg_...")


async def _console(request: Request, state: AppState, cookie: str) -> Principal:
    return await console.principal(
        state.pool,
        state.db,
        state.keys,
        cookie=cookie,
        method=request.method,
        csrf=request.headers.get(console.CSRF_HEADER),
        origin=request.headers.get("origin"),
        host=request.headers.get("host"),
    )


CurrentUser = Annotated[Principal, Depends(_principal)]

#: a create's ``Idempotency-Key`` header: 1-255 characters (an empty one is a 422, not
#: a key every later create would share)
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=255,
        description="a retry with the same key and body gets the first answer (200)",
    ),
]


async def _admin(principal: CurrentUser) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs the admin role")
    return principal


Admin = Annotated[Principal, Depends(_admin)]


async def _node(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    if credentials is None:
        audit.note_refused(request, None)
        raise Unauthenticated("this endpoint is for worker nodes (their node credential)")
    try:
        node_id = await state.node_credentials.authenticate(credentials.credentials)
    except Unauthenticated:
        audit.note_node(request, None)
        raise
    audit.note_node(request, node_id)
    return node_id


async def _node_credentials(state: State) -> NodeCredentialService:
    return state.node_credentials


async def _join(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token = state.settings.effective_join_token
    if credentials is None or not token or not constant_time_equal(credentials.credentials, token):
        audit.note_credential(request, "refused join token")
        raise Unauthenticated("joining needs the join token (JOBGATE_JOIN_TOKEN)")
    audit.note_credential(request, "join token")


#: the calling node's id, from its own credential (``node_credentials.py``)
CurrentNode = Annotated[str, Depends(_node)]
#: the node credential a request presented (after CurrentNode authenticated it)
NodeBearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
NodeCredentials = Annotated[NodeCredentialService, Depends(_node_credentials)]
JoinAuth = Depends(_join)
