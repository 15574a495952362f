"""Who may call what: every route of the app against every kind of caller.

The table below is the authorization policy, one row per route. The test reads the
app's own route table, so a new route without a row fails here until someone decides
who may call it. Each route is called by each principal and the answer's status must
match the rule:

=========  ==========================================================================
rule       expected
=========  ==========================================================================
public     anyone, even without a key, gets through
user       any valid API key; no key, a wrong or revoked key, a node credential or the
           join token → 401
admin      admins; other users → 403; no key, wrong, revoked, node credential, join → 401
owner      a session's owner and admins; anyone else → 404 (as if it did not exist)
self       the named user and admins; other users → 403
folder     the folder's owner (and those it is shared with) and admins; anyone else →
           404 (as if it did not exist); the owner may get a 404 once it purged it
node       a node's own credential only (a 403 for what is not placed on that node:
           test_node_credentials.py); every API key (an admin's too), the join token → 401
join       the join token only; anything else → 401
=========  ==========================================================================

"Gets through" means the answer is not 401 or 403, nor the 404 of a session one may not
see: it may still be 404 for a made-up name or app, 409 for a state, 422 for the empty
body sent. Someone else's session gets exactly the 404 of a session that does not exist.
Project members get nothing from membership on a session: sessions are private to
their owner (and admins).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import httpx
from harness import NODE_TOKEN, Stack

from gateway.app import create_app

PUBLIC, USER, ADMIN, OWNER, SELF, NODE = "public", "user", "admin", "owner", "self", "node"
JOIN = "join"
FOLDER = "folder"

#: "METHOD /path" -> rule
MATRIX: dict[str, str] = {
    "GET /healthz": PUBLIC,
    # sessions and what hangs off them
    "POST /v1/sessions": USER,
    "GET /v1/sessions": USER,
    "GET /v1/sessions/{session_id}": OWNER,
    "DELETE /v1/sessions/{session_id}": OWNER,
    "GET /v1/sessions/{session_id}/logs": OWNER,
    "GET /v1/sessions/{session_id}/apps": OWNER,
    "POST /v1/sessions/{session_id}/apps/{app}": OWNER,
    "POST /v1/sessions/{session_id}/commit": OWNER,  # and a policy, for non-admins
    # nodes: everyone may look, admins act
    "GET /v1/nodes": USER,
    "GET /v1/nodes/{node_id}": USER,
    "POST /v1/nodes/{node_id}/drain": ADMIN,
    "POST /v1/nodes/{node_id}/cordon": ADMIN,
    "POST /v1/nodes/{node_id}/uncordon": ADMIN,
    "POST /v1/nodes/{node_id}/revoke": ADMIN,
    # usage: anyone, their own and their projects' (another user's: 403, test_usage.py)
    "GET /v1/usage": USER,
    "GET /v1/audit": ADMIN,
    "GET /v1/usage/shares": USER,
    # configuration
    "GET /v1/resource-groups": USER,
    "PUT /v1/resource-groups/{name}": ADMIN,
    "PATCH /v1/resource-groups/{name}": ADMIN,
    "GET /v1/images": USER,
    "PUT /v1/images/{name}": ADMIN,
    # a private image its owner and admins (anyone else: 404); a public one admins (403)
    "DELETE /v1/images/{name}": USER,
    # budgets: admins set them; a user reads their own and their projects' (test_budgets.py)
    "GET /v1/budgets": USER,
    "GET /v1/budgets/{scope}/{subject}": SELF,
    "PUT /v1/budgets/{scope}/{subject}": ADMIN,
    "PATCH /v1/budgets/{scope}/{subject}": ADMIN,
    "DELETE /v1/budgets/{scope}/{subject}": ADMIN,
    "GET /v1/policies": ADMIN,
    "PUT /v1/policies/{scope}/{subject}": ADMIN,
    "PATCH /v1/policies/{scope}/{subject}": ADMIN,
    "DELETE /v1/policies/{scope}/{subject}": ADMIN,
    # people
    "GET /v1/projects": USER,
    "POST /v1/projects": ADMIN,
    "PATCH /v1/projects/{name}": ADMIN,
    "POST /v1/projects/{name}/members": ADMIN,
    "DELETE /v1/projects/{name}/members/{user}": ADMIN,
    "GET /v1/users/me": USER,
    # single sign-on: anyone may see the providers and bring a token; admins set them up
    "GET /v1/auth/sign-in": PUBLIC,
    "POST /v1/auth/token": PUBLIC,
    "GET /v1/auth/providers": ADMIN,
    "GET /v1/auth/providers/{name}": ADMIN,
    "PUT /v1/auth/providers/{name}": ADMIN,
    "DELETE /v1/auth/providers/{name}": ADMIN,
    "GET /v1/auth/providers/{name}/bindings": ADMIN,
    "PUT /v1/auth/providers/{name}/bindings/{binding}": ADMIN,
    "DELETE /v1/auth/providers/{name}/bindings/{binding}": ADMIN,
    "GET /v1/users": ADMIN,
    "POST /v1/users": ADMIN,
    "POST /v1/users/{name}/keys": SELF,
    "GET /v1/users/{name}/keys": SELF,
    "DELETE /v1/users/{name}/keys/{key_id}": SELF,
    # one's own keys (admins: anyone's with ?user=; tests/integration/gateway/test_api_keys.py)
    "POST /v1/keys": USER,
    "GET /v1/keys": USER,
    "DELETE /v1/keys/{name}": USER,
    # working directories: users upload and check, nodes fetch
    "HEAD /v1/blobs/{digest}": USER,
    "PUT /v1/blobs/{digest}": USER,
    "GET /v1/blobs/{digest}": NODE,
    # worker nodes
    "POST /v1/internal/kernels/{kernel_id}/logs": NODE,
    "POST /v1/internal/nodes/join": JOIN,
    "POST /v1/internal/nodes/redis-user": NODE,
    "GET /v1/internal/kernels/{kernel_id}/secrets": NODE,
    # user secrets (docs/secrets.md): each user's own and their projects' (someone
    # else's is a 404 like a made-up name)
    "POST /v1/secrets": USER,
    "GET /v1/secrets": USER,
    "PUT /v1/secrets/{name}": USER,
    "DELETE /v1/secrets/{name}": USER,
    # inference endpoints (by name; someone else's is "no endpoint NAME")
    "POST /v1/endpoints": USER,
    "GET /v1/endpoints": USER,
    "GET /v1/endpoints/{name}": OWNER,
    "DELETE /v1/endpoints/{name}": OWNER,
    "POST /v1/endpoints/{name}/scale": OWNER,
    "POST /v1/endpoints/{name}/revisions": OWNER,
    "POST /v1/endpoints/{name}/rollback": OWNER,
    "POST /v1/endpoints/{name}/tokens": OWNER,
    "GET /v1/endpoints/{name}/tokens": OWNER,
    "DELETE /v1/endpoints/{name}/tokens/{token_id}": OWNER,
    # pipelines (docs/pipelines.md): each user's own templates, triggers and webhooks
    # (someone else's are a 404 like a made-up name); hooks: the signature is the key
    "POST /v1/templates": USER,
    "GET /v1/templates": USER,
    "GET /v1/templates/{name}": USER,
    "DELETE /v1/templates/{name}": USER,
    "POST /v1/templates/{name}/run": USER,
    "POST /v1/triggers": USER,
    "GET /v1/triggers": USER,
    "GET /v1/triggers/{name}": USER,
    "DELETE /v1/triggers/{name}": USER,
    "GET /v1/triggers/{name}/deliveries": USER,
    "POST /v1/hooks/{trigger_id}": PUBLIC,
    "POST /v1/webhooks": USER,
    "GET /v1/webhooks": USER,
    "GET /v1/webhooks/{webhook_id}": USER,
    "DELETE /v1/webhooks/{webhook_id}": USER,
    "POST /v1/webhooks/{webhook_id}/rotate": USER,
    "GET /v1/webhooks/{webhook_id}/deliveries": USER,
    "POST /v1/webhooks/deliveries/{delivery_id}/redeliver": USER,
    # data folders: visible to their owners, those they are shared with, and admins
    "POST /v1/folders": USER,
    "GET /v1/folders": USER,
    "GET /v1/folders/{folder}": FOLDER,
    "DELETE /v1/folders/{folder}": FOLDER,
    "POST /v1/folders/{folder}/restore": FOLDER,
    "POST /v1/folders/{folder}/purge": FOLDER,
    "PUT /v1/folders/{folder}/shares/{user}": FOLDER,
    "DELETE /v1/folders/{folder}/shares/{user}": FOLDER,
    "GET /v1/folders/{folder}/files": FOLDER,
    "GET /v1/folders/{folder}/files/{path}": FOLDER,
    "DELETE /v1/folders/{folder}/files/{path}": FOLDER,
    "POST /v1/folders/{folder}/move": FOLDER,
    "POST /v1/folders/{folder}/mkdir": FOLDER,
    "POST /v1/folders/{folder}/uploads": FOLDER,
    "HEAD /v1/uploads/{upload_id}": USER,
    "PATCH /v1/uploads/{upload_id}": USER,
    "DELETE /v1/uploads/{upload_id}": USER,
}

KEYLESS = ("anonymous", "wrong key", "revoked key", "node credential", "join token")


@dataclass
class World:
    keys: dict[str, str]  # principal -> Authorization value ("" = none)
    values: dict[str, str]  # path parameter -> value


def app_routes(stack: Stack) -> set[str]:
    """Every operation the app publishes (its OpenAPI document: what clients can call;
    /docs and /openapi.json themselves are framework pages, public by design)."""
    paths: dict[str, dict[str, Any]] = create_app(stack.settings).openapi()["paths"]
    return {f"{method.upper()} {path}" for path, ops in paths.items() for method in ops}


async def world(stack: Stack) -> World:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    carol = await stack.create_user("carol")
    async with stack.client() as admin:
        assert (await admin.post("/v1/projects", json={"name": "lab"})).status_code == 201
        for member in ("alice", "carol"):
            r = await admin.post("/v1/projects/lab/members", json={"user": member})
            assert r.status_code == 200, r.text
        doomed = (await admin.post("/v1/users/bob/keys", json={"name": "doomed"})).json()
        spare = (await admin.post("/v1/users/alice/keys", json={"name": "spare"})).json()
        joined = await admin.post(
            "/v1/internal/nodes/join",
            json={"node_id": "matrix-node"},
            headers={"Authorization": f"Bearer {NODE_TOKEN}"},
        )
        assert joined.status_code == 200, joined.text
        node_credential = joined.json()["credential"]
        r = await admin.delete(f"/v1/users/bob/keys/{doomed['id']}")
        assert r.status_code == 204, r.text
    session = await stack.submit(alice, command=["true"], project="lab")
    await _endpoint(stack, alice)
    async with stack.client(alice) as api:  # alice's own folder
        made = await api.post("/v1/folders", json={"name": "alices"})
        assert made.status_code == 201, made.text
    return World(
        keys={
            "anonymous": "",
            "wrong key": "jg_" + "x" * 43,
            "revoked key": doomed["key"],
            "node credential": node_credential,
            "join token": NODE_TOKEN,
            "other user": bob,
            "project member": carol,
            "owner": alice,
            "admin": stack.admin_key,
        },
        values={
            "session_id": session["id"],
            "app": "jupyter",
            "node_id": "no-such-node",
            "name": "nope",
            "scope": "user",
            "subject": "nobody",
            "user": "nobody",
            "kernel_id": "no-such-kernel",
            "key_id": spare["id"],
            "digest": "sha256:" + "0" * 64,
            "endpoint": "alices",
            "token_id": "no-such-token",
            "trigger_id": "no-such-trigger",
            "webhook_id": "no-such-webhook",
            "delivery_id": "no-such-delivery",
            "folder": "alices",
            "path": "no/such/file",
            "upload_id": "0" * 32,
            "binding": "nope",
        },
    )


async def _endpoint(stack: Stack, key: str) -> None:
    async with stack.client(key) as api:
        r = await api.post(
            "/v1/endpoints", json={"name": "alices", "port": 8000, "command": ["serve"]}
        )
        assert r.status_code == 201, r.text


def expected(rule: str, principal: str) -> set[int] | None:
    """The statuses *principal* must get, or None for "gets through"."""
    if rule == PUBLIC:
        return None
    if rule == NODE:
        return None if principal == "node credential" else {401}
    if rule == JOIN:
        return None if principal == "join token" else {401}
    if principal in KEYLESS:
        return {401}
    if principal == "admin" or rule == USER:
        return None
    if principal == "owner" and rule in (OWNER, SELF, FOLDER):
        return None
    return {ADMIN: {403}, SELF: {403}, OWNER: {404}, FOLDER: {404}}[rule]


def verdict(rule: str, principal: str, r: httpx.Response) -> bool:
    if r.status_code >= 500:
        return False
    want = expected(rule, principal)
    if rule == NODE and want is None:  # made-up kernels and blobs: not on this node
        return r.status_code not in (401,)
    body = r.json() if r.content else {}  # HEAD answers carry no body
    detail = body.get("detail", "") if isinstance(body, dict) else ""
    hidden = r.status_code == 404 and detail.startswith(("no session", "no endpoint"))
    if rule == FOLDER:
        if want is None:  # the owner may find it purged by an earlier row: a 404 is fine
            return r.status_code not in (401, 403)
        if principal in KEYLESS:
            return r.status_code in want
        # someone else's folder is answered exactly as one that does not exist
        return r.status_code == 404 and detail.startswith("no folder")
    if want is not None:
        # someone else's session is answered exactly as one that does not exist
        return r.status_code in want and (rule != OWNER or principal in KEYLESS or hidden)
    return r.status_code not in (401, 403) and not hidden


def client(stack: Stack, key: str) -> httpx.AsyncClient:
    """One principal's client (kept for the whole matrix: its connections are reused, so
    the ~1,500 calls cost requests, not TCP and TLS-context set-ups)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30)


async def call(api: httpx.AsyncClient, method: str, path: str) -> httpx.Response:
    body: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
    return await api.request(method, path, json=body)


async def test_every_route_has_a_rule(stack: Stack) -> None:
    routes = set(app_routes(stack))
    assert sorted(routes - MATRIX.keys()) == [], "routes without a row in MATRIX"
    assert sorted(MATRIX.keys() - routes) == [], "rows in MATRIX for routes that are gone"


async def test_every_route_answers_every_principal_by_its_rule(stack: Stack) -> None:
    w = await world(stack)
    # the principals that may change things go last, so the others see the world intact
    order = list(w.keys)
    wrong: list[str] = []
    async with contextlib.AsyncExitStack() as clients:
        apis = {p: await clients.enter_async_context(client(stack, w.keys[p])) for p in order}
        await _walk(stack, w, order, apis, wrong)
    assert wrong == [], "\n".join(wrong)


async def _walk(
    stack: Stack, w: World, order: list[str], apis: dict[str, httpx.AsyncClient], wrong: list[str]
) -> None:
    # deleting the endpoint goes last: the rows after it need it to exist
    for entry in sorted(sorted(MATRIX), key=lambda e: e == "DELETE /v1/endpoints/{name}"):
        method, template = entry.split(" ", 1)
        name_values = dict(w.values)
        if template.startswith("/v1/users/{name}"):
            name_values["name"] = "alice"  # the owner's own keys
        if template.startswith("/v1/budgets/{scope}"):
            name_values["subject"] = "alice"  # the owner's own budget (she has none: 404)
        if template.startswith("/v1/endpoints/{name}"):
            name_values["name"] = name_values["endpoint"]  # alice's endpoint
        path = template.format(**name_values)
        rule = MATRIX[entry]
        for principal in order:
            r = await call(apis[principal], method, path)
            if entry == "DELETE /v1/endpoints/{name}" and r.status_code == 202:
                await _endpoint(stack, w.keys["owner"])  # the next principal needs it
            if not verdict(rule, principal, r):
                wrong.append(f"{entry} as {principal}: {r.status_code} {r.text[:120]}")
            if r.status_code in (401, 403, 404):
                # refusals are problems, and never say more than they must
                assert r.headers["content-type"].startswith("application/problem+json"), entry


async def test_a_revoked_key_stops_working_at_once_and_listings_never_show_keys(
    stack: Stack,
) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        made = (await api.post("/v1/users/alice/keys", json={"name": "ci"})).json()
        listed = (await api.get("/v1/users/alice/keys")).json()
        assert {k["name"] for k in listed} == {"test", "ci"}
        assert all("key" not in k and "key_hash" not in k for k in listed)
        assert [k["prefix"] for k in listed if k["id"] == made["id"]] == [made["prefix"]]
    async with stack.client(made["key"]) as ci:
        assert (await ci.get("/v1/users/me")).status_code == 200
        assert (await ci.delete(f"/v1/users/alice/keys/{made['id']}")).status_code == 204
        r = await ci.get("/v1/users/me")
        assert r.status_code == 401
        assert "revoked" in r.json()["detail"]
    async with stack.client(alice) as api:
        listed = (await api.get("/v1/users/alice/keys")).json()
        revoked = [k for k in listed if k["id"] == made["id"]]
        assert revoked[0]["revoked_at"] is not None
        # someone else's key id under one's own name is not found, not revoked
        other = await stack.create_user("bob")
        async with stack.client(other) as bob:
            bobs = (await bob.get("/v1/users/bob/keys")).json()
        r = await api.delete(f"/v1/users/alice/keys/{bobs[0]['id']}")
        assert r.status_code == 404
    async with stack.client(other) as bob:
        assert (await bob.get("/v1/users/me")).status_code == 200
