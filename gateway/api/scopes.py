"""The scope each route needs of the API key that calls it: one table for the whole app.

``deps.py`` checks it for every request that authenticates with a key (a Bearer key or
the console's sign-in, which stands for its key): a key without the route's scope gets
a 403 that names the scope. ``tests/unit/gateway/test_scopes.py`` walks the app's
routes, so a new route without a row here fails until someone decides its scope. What
each scope means: ``gateway/domain/keys.py``.

A row's value is a scope, or one of:

- ``ANY_KEY``: any valid key; what it may do is checked further in (``/v1/users/me``
  says whose a key is; keys mint and revoke only keys within their own scopes);
- ``NO_KEY``: the route takes no API key at all (public, the node token, a hook's
  signature, the console's HTML pages, whose data comes through ``/v1``).

A route missing here (the test makes that a bug) needs ``admin``: closed, not open.
"""

from __future__ import annotations

from typing import Final

from gateway.domain.keys import ADMIN

__all__ = ["ANY_KEY", "NO_KEY", "ROUTE_SCOPES", "required"]

ANY_KEY: Final = "any"
NO_KEY: Final = None
READ, SESSIONS, ENDPOINTS, FOLDERS = "read", "sessions", "endpoints", "folders"

#: "METHOD /path" (the route's template) -> the scope a key needs
ROUTE_SCOPES: Final[dict[str, str | None]] = {
    "GET /healthz": NO_KEY,
    # sessions, and what running them needs (the working dir's blobs, app proxies)
    "POST /v1/sessions": SESSIONS,
    "GET /v1/sessions": READ,
    "GET /v1/sessions/{session_id}": READ,
    "DELETE /v1/sessions/{session_id}": SESSIONS,
    "POST /v1/sessions/{session_id}/commit": SESSIONS,
    "GET /v1/sessions/{session_id}/logs": READ,
    "GET /v1/sessions/{session_id}/apps": READ,
    "POST /v1/sessions/{session_id}/apps/{app}": SESSIONS,
    "HEAD /v1/blobs/{digest}": SESSIONS,
    "PUT /v1/blobs/{digest}": SESSIONS,
    "GET /v1/blobs/{digest}": NO_KEY,  # the node's own credential
    "POST /v1/internal/kernels/{kernel_id}/logs": NO_KEY,  # the node's own credential
    "POST /v1/internal/nodes/join": NO_KEY,  # the join token
    "POST /v1/internal/nodes/redis-user": NO_KEY,  # the node's own credential
    "GET /v1/internal/kernels/{kernel_id}/secrets": NO_KEY,  # the node's own credential
    # user secrets (docs/secrets.md): they reach sessions
    "POST /v1/secrets": SESSIONS,
    "GET /v1/secrets": READ,
    "PUT /v1/secrets/{name}": SESSIONS,
    "DELETE /v1/secrets/{name}": SESSIONS,
    # the cluster and its configuration
    "GET /v1/nodes": READ,
    "GET /v1/usage": READ,
    "GET /v1/audit": ADMIN,
    "GET /v1/usage/shares": READ,
    "GET /v1/nodes/{node_id}": READ,
    "POST /v1/nodes/{node_id}/drain": ADMIN,
    "POST /v1/nodes/{node_id}/cordon": ADMIN,
    "POST /v1/nodes/{node_id}/uncordon": ADMIN,
    "POST /v1/nodes/{node_id}/revoke": ADMIN,
    "GET /v1/images": READ,
    "PUT /v1/images/{name:path}": ADMIN,
    "DELETE /v1/images/{name:path}": SESSIONS,  # one's own committed image
    "GET /v1/resource-groups": READ,
    "PUT /v1/resource-groups/{name}": ADMIN,
    "PATCH /v1/resource-groups/{name}": ADMIN,
    "GET /v1/budgets": READ,  # admins: all; others their own and their projects'
    "GET /v1/budgets/{scope}/{subject}": READ,
    "PUT /v1/budgets/{scope}/{subject}": ADMIN,
    "PATCH /v1/budgets/{scope}/{subject}": ADMIN,
    "DELETE /v1/budgets/{scope}/{subject}": ADMIN,
    "GET /v1/policies": ADMIN,
    "PUT /v1/policies/{scope}/{subject}": ADMIN,
    "PATCH /v1/policies/{scope}/{subject}": ADMIN,
    "DELETE /v1/policies/{scope}/{subject}": ADMIN,
    # people and keys
    "GET /v1/projects": READ,
    "POST /v1/projects": ADMIN,
    "PATCH /v1/projects/{name}": ADMIN,
    "POST /v1/projects/{name}/members": ADMIN,
    "DELETE /v1/projects/{name}/members/{user}": ADMIN,
    "GET /v1/users/me": ANY_KEY,
    # single sign-on (docs/auth.md): the providers are public, a sign-in brings its token
    "GET /v1/auth/sign-in": NO_KEY,
    "POST /v1/auth/token": NO_KEY,  # the provider's ID token
    "GET /v1/auth/providers": ADMIN,
    "GET /v1/auth/providers/{name}": ADMIN,
    "PUT /v1/auth/providers/{name}": ADMIN,
    "DELETE /v1/auth/providers/{name}": ADMIN,
    "GET /v1/auth/providers/{name}/bindings": ADMIN,
    "PUT /v1/auth/providers/{name}/bindings/{binding}": ADMIN,
    "DELETE /v1/auth/providers/{name}/bindings/{binding}": ADMIN,
    "GET /v1/users": ADMIN,
    "POST /v1/users": ADMIN,
    "POST /v1/users/{name}/keys": ANY_KEY,
    "GET /v1/users/{name}/keys": READ,
    "DELETE /v1/users/{name}/keys/{key_id}": ANY_KEY,
    "POST /v1/keys": ANY_KEY,
    "GET /v1/keys": READ,
    "DELETE /v1/keys/{name}": ANY_KEY,
    # inference endpoints
    "POST /v1/endpoints": ENDPOINTS,
    "GET /v1/endpoints": READ,
    "GET /v1/endpoints/{name}": READ,
    "DELETE /v1/endpoints/{name}": ENDPOINTS,
    "POST /v1/endpoints/{name}/scale": ENDPOINTS,
    "POST /v1/endpoints/{name}/revisions": ENDPOINTS,
    "POST /v1/endpoints/{name}/rollback": ENDPOINTS,
    "POST /v1/endpoints/{name}/tokens": ENDPOINTS,
    "GET /v1/endpoints/{name}/tokens": READ,
    "DELETE /v1/endpoints/{name}/tokens/{token_id}": ENDPOINTS,
    # pipelines: they start sessions
    "POST /v1/templates": SESSIONS,
    "GET /v1/templates": READ,
    "GET /v1/templates/{name}": READ,
    "DELETE /v1/templates/{name}": SESSIONS,
    "POST /v1/templates/{name}/run": SESSIONS,
    "POST /v1/triggers": SESSIONS,
    "GET /v1/triggers": READ,
    "GET /v1/triggers/{name}": READ,
    "DELETE /v1/triggers/{name}": SESSIONS,
    "GET /v1/triggers/{name}/deliveries": READ,
    "POST /v1/hooks/{trigger_id}": NO_KEY,  # the forge's signature
    "POST /v1/webhooks": SESSIONS,
    "GET /v1/webhooks": READ,
    "GET /v1/webhooks/{webhook_id}": READ,
    "DELETE /v1/webhooks/{webhook_id}": SESSIONS,
    "POST /v1/webhooks/{webhook_id}/rotate": SESSIONS,
    "GET /v1/webhooks/{webhook_id}/deliveries": READ,
    "POST /v1/webhooks/deliveries/{delivery_id}/redeliver": SESSIONS,
    # data folders (an upload's HEAD is part of writing it: tus asks it to resume)
    "POST /v1/folders": FOLDERS,
    "GET /v1/folders": READ,
    "GET /v1/folders/{folder}": READ,
    "DELETE /v1/folders/{folder}": FOLDERS,
    "POST /v1/folders/{folder}/restore": FOLDERS,
    "POST /v1/folders/{folder}/purge": FOLDERS,
    "PUT /v1/folders/{folder}/shares/{user}": FOLDERS,
    "DELETE /v1/folders/{folder}/shares/{user}": FOLDERS,
    "GET /v1/folders/{folder}/files": READ,
    "GET /v1/folders/{folder}/files/{path:path}": READ,
    "DELETE /v1/folders/{folder}/files/{path:path}": FOLDERS,
    "POST /v1/folders/{folder}/move": FOLDERS,
    "POST /v1/folders/{folder}/mkdir": FOLDERS,
    "POST /v1/folders/{folder}/uploads": FOLDERS,
    "HEAD /v1/uploads/{upload_id}": FOLDERS,
    "PATCH /v1/uploads/{upload_id}": FOLDERS,
    "DELETE /v1/uploads/{upload_id}": FOLDERS,
    # the framework's pages and the metrics (the console's static files are a mount)
    "GET /openapi.json": NO_KEY,
    "HEAD /openapi.json": NO_KEY,
    "GET /docs": NO_KEY,
    "HEAD /docs": NO_KEY,
    "GET /docs/oauth2-redirect": NO_KEY,
    "HEAD /docs/oauth2-redirect": NO_KEY,
    "GET /redoc": NO_KEY,
    "HEAD /redoc": NO_KEY,
    "GET /metrics": NO_KEY,
    "HEAD /metrics": NO_KEY,
    # the web console's pages (HTML shells; their data comes through /v1 above)
    "GET /": NO_KEY,
    "GET /sign-in": NO_KEY,
    "POST /sign-in": NO_KEY,
    "POST /sign-out": NO_KEY,
    "GET /sign-in/oidc/{provider}": NO_KEY,  # single sign-on (gateway/console/sso.py)
    "GET /sign-in/oidc/{provider}/callback": NO_KEY,
    "GET /sessions/{session_id}": NO_KEY,
    "GET /nodes": NO_KEY,
    "GET /admin": NO_KEY,
    "GET /endpoints": NO_KEY,
    "GET /endpoints/{name}": NO_KEY,
    "GET /folders": NO_KEY,
    "GET /folders/{name}": NO_KEY,
    "GET /templates": NO_KEY,
    "GET /templates/{name}": NO_KEY,
    # drawn here from GET /v1/usage for the signed-in caller: a read, their own rows
    "GET /usage": NO_KEY,
}


def required(method: str, path: str) -> str | None:
    """The scope a key needs for *method* on the route template *path*."""
    return ROUTE_SCOPES.get(f"{method} {path}", ADMIN)
