"""Inference endpoints' control plane against real PostgreSQL, Redis and HTTP.

The data plane (the app proxy) is not here: where a proxy would probe a replica or
report load, the test writes the same contract records to Redis itself, and replicas
"run" by having their rows moved as a worker's events would (no runtime publishes a
port without Podman; the Podman path is tests/e2e/test_endpoints_podman.py's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Stack, started_stack
from redis.asyncio import Redis
from sqlalchemy import select, update
from waiting import until

from contract.endpoints import EndpointRoute, LoadReport, ReplicaHealth
from contract.keys import (
    ENDPOINT_WAKE_CHANNEL,
    endpoint_load_key,
    endpoint_ready_key,
    endpoint_route_key,
    endpoint_wake_key,
)
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import Endpoint, Kernel, Node, Session, WebhookEvent
from gateway.loops.endpoint_leader import Leader

BODY = {"name": "demo", "port": 8000, "command": ["serve"], "resources": {"cpu": "0.1"}}


async def test_bad_requests_are_clear_problems_and_create_nothing(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bad = [
        ({**BODY, "name": "Bad_Name"}, "name"),
        ({**BODY, "name": "a--b"}, "name"),
        ({**BODY, "name": "x" * 41}, "name"),
        ({**BODY, "port": 0}, "port"),
        ({**BODY, "port": 70000}, "port"),
        ({**BODY, "autoscale": {"min_replicas": 3, "max_replicas": 2}}, "min_replicas"),
        ({**BODY, "replicas": 2}, "replicas"),
        ({**BODY, "probe": {"path": "ping"}}, "probe"),
        ({**BODY, "image": "NOT AN IMAGE"}, "image"),
        ({**BODY, "resources": {"cpu": "lots"}}, "resources"),
        ({**BODY, "rollout": {"max_surge": 0, "max_unavailable": 0}}, "rollout"),
        ({**BODY, "command": []}, "command"),  # no image either: nothing would serve
    ]
    async with stack.client(alice) as api:
        for body, field in bad:
            r = await api.post("/v1/endpoints", json=body)
            assert r.status_code == 422, (body, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert field in r.text, (field, r.text)
        for path in ("ping", "/a b", "/ping\r\nHost: evil"):  # contract.PROBE_PATH_PATTERN
            r = await api.post("/v1/endpoints", json={**BODY, "probe": {"path": path}})
            assert (r.status_code, r.json()["field"]) == (422, "probe.path"), r.text
        # well-formed, but the working directory was never uploaded: 404 naming it
        r = await api.post("/v1/endpoints", json={**BODY, "working_dir": "sha256:" + "0" * 64})
        assert (r.status_code, r.json()["field"]) == (404, "working_dir"), r.text
        assert (await api.get("/v1/endpoints")).json() == []
        r = await api.post("/v1/endpoints/nope/scale", json={"min_replicas": 3, "max_replicas": 1})
        assert (r.status_code, r.json()["field"]) == (422, "min_replicas"), r.text
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with create_session_factory(engine)() as db:
            assert (await db.execute(select(Endpoint))).first() is None
    finally:
        await engine.dispose()


async def test_owner_tokens_idempotency_and_another_user(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client(alice) as api:
        r = await api.post("/v1/endpoints", json=BODY, headers={"Idempotency-Key": "k1"})
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["url"] == "http://127.0.0.1:8421/e/demo/"
        assert (made["revision"], made["current"]["port"]) == (1, 8000)
        again = await api.post("/v1/endpoints", json=BODY, headers={"Idempotency-Key": "k1"})
        assert again.status_code == 200
        assert again.json()["id"] == made["id"]
        taken = await api.post("/v1/endpoints", json=BODY)
        assert taken.status_code == 409
        assert "taken" in taken.json()["detail"]

        r = await api.post("/v1/endpoints/demo/tokens", json={"name": "ci", "expires": "1h"})
        assert r.status_code == 201, r.text
        token = r.json()
        assert token["token"].startswith("jge_")
        assert token["expires_at"] is not None
        listed = (await api.get("/v1/endpoints/demo/tokens")).json()
        assert [t["id"] for t in listed] == [token["id"]]
        assert "token" not in listed[0]
        bad = await api.post("/v1/endpoints/demo/tokens", json={"expires": "soon"})
        assert bad.status_code == 422

        # scale: a range upside down is a 422; one that crosses the endpoint's own
        # settings (max_replicas 1 now) a 409; both name min_replicas and change nothing
        r = await api.post("/v1/endpoints/demo/scale", json={"min_replicas": 3, "max_replicas": 2})
        assert (r.status_code, r.json()["field"]) == (422, "min_replicas"), r.text
        assert r.json()["detail"] == "min_replicas (3) is above max_replicas (2)"
        r = await api.post("/v1/endpoints/demo/scale", json={"min_replicas": 3})
        assert (r.status_code, r.json()["field"]) == (409, "min_replicas"), r.text
        assert "min_replicas (3) is above max_replicas (1)" in r.json()["detail"]
        both = {"target_concurrency": 4, "target_rps": 10}
        r = await api.post("/v1/endpoints/demo/scale", json=both)
        assert r.status_code == 422, r.text
        assert "give target_concurrency or target_rps, not both" in r.json()["detail"]
        shown = (await api.get("/v1/endpoints/demo")).json()
        assert (shown["autoscale"]["min_replicas"], shown["autoscale"]["max_replicas"]) == (1, 1)
        assert shown["autoscale"]["target_rps"] is None

        # a new revision's probe path: the same rule as on create
        for path in ("ping", "/a b", "/ping\n"):
            r = await api.post("/v1/endpoints/demo/revisions", json={"probe": {"path": path}})
            assert (r.status_code, r.json()["field"]) == (422, "probe.path"), r.text
        odd = "/v1/models/m:predict?verbose=1"
        r = await api.post("/v1/endpoints/demo/revisions", json={"probe": {"path": odd}})
        assert r.status_code == 200, r.text
        assert r.json()["current"]["probe"]["path"] == odd

        # the route the proxies read carries the token's digest only, then not at all
        redis = Redis.from_url(stack.redis_url)
        try:

            async def route() -> EndpointRoute | None:
                raw = await redis.get(endpoint_route_key("demo"))
                return EndpointRoute.from_json(raw) if raw else None

            with_token = await until(
                lambda: _has(route, lambda x: [t.id for t in x.tokens] == [token["id"]]),
                timeout=20,
                interval=0.2,
                what="the route carries the new token",
            )
            assert token["token"] not in with_token.to_json()
            r = await api.delete(f"/v1/endpoints/demo/tokens/{token['id']}")
            assert r.status_code == 204
            await until(
                lambda: _has(route, lambda x: x.tokens == ()),
                timeout=20,
                interval=0.2,
                what="the route carries no token",
            )
        finally:
            await redis.aclose()
        listed = (await api.get("/v1/endpoints/demo/tokens")).json()
        assert listed[0]["revoked_at"] is not None

    async with stack.client(bob) as other:
        for method, path in [
            ("GET", "/v1/endpoints/demo"),
            ("POST", "/v1/endpoints/demo/scale"),
            ("GET", "/v1/endpoints/demo/tokens"),
            ("DELETE", "/v1/endpoints/demo"),
        ]:
            body = {"replicas": 2} if method == "POST" else None
            r = await other.request(method, path, json=body)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["detail"] == "no endpoint demo"
        assert (await other.get("/v1/endpoints")).json() == []


async def _has(
    get: Callable[[], Awaitable[EndpointRoute | None]], ok: Callable[[EndpointRoute], bool]
) -> EndpointRoute | None:
    route = await get()
    return route if route is not None and ok(route) else None


class Cluster:
    """Moves replica rows as a worker's events would, and answers for the proxy."""

    def __init__(self, stack: Stack, redis: Redis) -> None:
        self.engine = create_engine(stack.settings.effective_database_url)
        self.db = create_session_factory(self.engine)
        self.redis = redis

    async def start_node(self) -> None:
        async with self.db() as db, db.begin():
            db.add(
                Node(
                    id="fake-node",
                    address="127.0.0.1",
                    queue="q",
                    runtime="sim",
                    capacity={"cpu": "16", "mem": str(64 * 2**30)},
                )
            )

    async def run(self, session_id: str, port: int) -> None:
        async with self.db() as db, db.begin():
            await db.execute(
                update(Session)
                .where(Session.id == session_id)
                .values(status="RUNNING", status_reason="running", pending_reason="")
            )
            await db.execute(
                update(Kernel)
                .where(Kernel.session_id == session_id)
                .values(status="running", node_id="fake-node", ports={"inference": port})
            )

    async def end(self, session_id: str, status: str, reason: str) -> None:
        async with self.db() as db, db.begin():
            await db.execute(
                update(Session)
                .where(Session.id == session_id)
                .values(status=status, status_reason=reason)
            )

    async def probe(self, endpoint_id: str, session_id: str, ready: bool, why: str = "") -> None:
        health = ReplicaHealth(ready=ready, at=time.time(), reason=why, proxy_id="test")
        await self.redis.hset(endpoint_ready_key(endpoint_id), session_id, health.model_dump_json())  # type: ignore[misc]

    async def close(self) -> None:
        await self.engine.dispose()


async def _report_load(
    redis: Redis, endpoint_id: str, proxy: str, replicas: dict[str, tuple[int, float]]
) -> None:
    """One proxy's load report: per replica session id, (in flight, requests/s)."""
    report = LoadReport(
        at=time.time(),
        in_flight=sum(n for n, _ in replicas.values()),
        queued=0,
        requests_total=100,
        rps=sum(r for _, r in replicas.values()),
        per_replica_in_flight={sid: n for sid, (n, _) in replicas.items()},
        per_replica_rps={sid: r for sid, (_, r) in replicas.items()},
    )
    await redis.hset(endpoint_load_key(endpoint_id), proxy, report.model_dump_json())  # type: ignore[misc]


def _table_rows(text: str) -> list[list[str]]:
    """The words of each line of a table that starts with a replica's number."""
    return [line.split() for line in text.splitlines() if line[:1].isdigit()]


async def _show(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await api.get(f"/v1/endpoints/{name}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
async def undelivered_stack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack whose gateway runs no webhook deliverer, so an outbox row nobody
    subscribes to stays for the test to read (a deliverer drops it within a second)."""
    async with started_stack(pg_url, redis_url, tmp_path, webhook_deliverer=False) as s:
        yield s


async def test_controller_reconciles_replicas_status_updates_and_zero(
    undelivered_stack: Stack,
) -> None:
    stack = undelivered_stack
    alice = await stack.create_user("alice")
    redis = Redis.from_url(stack.redis_url)
    cluster = Cluster(stack, redis)
    try:
        await cluster.start_node()
        async with stack.client(alice) as api:
            body = {**BODY, "autoscale": {"min_replicas": 2, "max_replicas": 2}}
            body["probe"] = {"path": "/ping", "interval_s": 1}
            r = await api.post("/v1/endpoints", json=body)
            assert r.status_code == 201, r.text
            eid = r.json()["id"]

            # two replica sessions appear; nothing places them (no live node): DEPLOYING
            async def two_pending() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                return e if len(e["replicas"]) == 2 and "pending" in e["status_reason"] else None

            e = await until(two_pending, timeout=20, interval=0.2, what="two pending")
            assert e["status"] == "DEPLOYING"
            assert "pending" in e["status_reason"]
            assert {r["index"] for r in e["replicas"]} == {0, 1}
            assert [ev["kind"] for ev in e["events"]].count("start") == 1
            first = {r["index"]: r["session_id"] for r in e["replicas"]}
            # replicas are sessions of type inference, and `sessions ls --type` takes it
            listed = await api.get("/v1/sessions", params={"type": "inference"})
            assert listed.status_code == 200, listed.text
            assert {s["id"] for s in listed.json()["items"]} == set(first.values())
            batch = (await api.get("/v1/sessions", params={"type": "batch"})).json()
            assert batch["items"] == []
            shown = await stack.cli("sessions", "ls", "--type", "inference", key=alice)
            assert all(sid[:8] in shown for sid in first.values()), shown

            # they run and the proxy finds them ready: serving, HEALTHY, in the route
            for index, sid in first.items():
                await cluster.run(sid, 9000 + index)
                await cluster.probe(eid, sid, ready=True)

            async def healthy() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                return e if e["status"] == "HEALTHY" else None

            e = await until(healthy, timeout=20, interval=0.2, what="healthy")
            assert e["ready_replicas"] == 2
            assert e["stable_revision"] == 1
            assert {r["state"] for r in e["replicas"]} == {"serving"}
            route = EndpointRoute.from_json(await redis.get(endpoint_route_key("demo")))
            assert sorted(r.upstream or "" for r in route.replicas) == [
                "http://127.0.0.1:9000",
                "http://127.0.0.1:9001",
            ]
            assert route.probe.path == "/ping"

            # each replica's load, summed over the proxies' reports: in flight and req/s
            await _report_load(redis, eid, "proxy-1", {first[0]: (1, 3.5), first[1]: (0, 1.0)})
            await _report_load(redis, eid, "proxy-2", {first[0]: (2, 0.5), first[1]: (1, 2.25)})
            e = await _show(api, "demo")
            load = {r["index"]: (r["in_flight"], r["rps"]) for r in e["replicas"]}
            assert load == {0: (3, 4.0), 1: (1, 3.25)}
            assert (e["in_flight"], e["rps"]) == (4, 7.25)
            shown = await stack.cli("endpoints", "show", "demo", key=alice)
            rows = {r[0]: r[6:8] for r in _table_rows(shown) if r[2] == "serving"}
            assert rows == {"0": ["3", "4"], "1": ["1", "3.25"]}, shown
            assert "REQ/S" in shown
            assert "revision 1 is ready" in shown
            assert "None" not in shown  # no Python None in any decision's inputs
            await redis.delete(endpoint_load_key(eid))  # nothing in flight: drains end early

            # one stops answering its probe: DEGRADED, naming it and why
            await cluster.probe(eid, first[1], ready=False, why="HTTP 500 from /ping")

            async def degraded() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                return e if e["status"] == "DEGRADED" else None

            e = await until(degraded, timeout=20, interval=0.2, what="degraded")
            assert "replica 1" in e["status_reason"]
            assert "HTTP 500 from /ping" in e["status_reason"]
            # ... and says so once to the owner's webhooks (the outbox row the deliverer sends)
            async with cluster.db() as db:
                told = (
                    (
                        await db.execute(
                            select(WebhookEvent).where(WebhookEvent.type == "endpoint.degraded")
                        )
                    )
                    .scalars()
                    .all()
                )
            assert [(w.data["endpoint"], w.data["status"]) for w in told] == [("demo", "DEGRADED")]

            # it dies: the controller notes why and starts a replacement (after backoff)
            await cluster.end(first[1], "FAILED", "exited with 137")

            async def replaced() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                ids = {r["index"]: r["session_id"] for r in e["replicas"]}
                return e if ids.get(1) not in (None, first[1]) else None

            e = await until(replaced, timeout=20, interval=0.2, what="replaced")
            failed = [ev for ev in e["events"] if ev["kind"] == "replica-failed"]
            assert "exited with 137" in failed[0]["message"]
            assert failed[0]["inputs"]["backoff_s"] == 1.0

            # a new revision: one surge replica of revision 2, the old ones keep serving
            update_body = {"env": {"V": "2"}, "rollout": {"ready_timeout_s": 2}}
            r = await api.post("/v1/endpoints/demo/revisions", json=update_body)
            assert r.status_code == 200, r.text
            assert r.json()["revision"] == 2

            async def surging() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                return e if any(r["revision"] == 2 for r in e["replicas"]) else None

            e = await until(surging, timeout=20, interval=0.2, what="surging")
            assert e["status"] in ("DEPLOYING", "DEGRADED")
            assert [r["state"] for r in e["replicas"] if r["index"] == 0] == ["serving"]

            # revision 2 never gets ready (nothing places it): rolled back, with why
            async def rolled_back() -> dict[str, Any] | None:
                e = await _show(api, "demo")
                done = e["revision"] == 1 and all(r["revision"] == 1 for r in e["replicas"])
                return e if done else None

            e = await until(rolled_back, timeout=20, interval=0.2, what="rolled back")
            rev2 = next(x for x in e["revisions"] if x["number"] == 2)
            assert rev2["state"] == "rolled-back"
            assert "not ready after 2s" in rev2["reason"]
            assert "pending" in rev2["reason"]
            assert any(ev["kind"] == "rollback" for ev in e["events"])
            # by hand: to the current revision is a conflict, to one that is not there 404
            r = await api.post("/v1/endpoints/demo/rollback", json={"to": 1})
            assert r.status_code == 409
            r = await api.post("/v1/endpoints/demo/rollback", json={"to": 7})
            assert (r.status_code, r.json()["field"]) == (404, "to")
            r = await api.post("/v1/endpoints/demo/rollback", json={})
            assert (r.status_code, r.json()["revision"]) == (200, 2)
            r = await api.post("/v1/endpoints/demo/rollback", json={"to": 1})
            assert (r.status_code, r.json()["revision"]) == (200, 1)

            # delete: the route goes, the replicas stop, the name is free again
            r = await api.delete("/v1/endpoints/demo")
            assert r.status_code == 202
            assert await redis.get(endpoint_route_key("demo")) is None
            assert (await api.get("/v1/endpoints/demo")).status_code == 404
            for sid in first.values():
                s = await stack.get(sid, alice)
                assert s["status"] in ("TERMINATING", "TERMINATED", "CANCELLED", "FAILED")

            # min 0: scaled to zero, the route has no replicas; a wake asks for one
            zero = {
                **BODY,
                "name": "zero",
                "autoscale": {
                    "min_replicas": 0,
                    "max_replicas": 3,
                    "target_concurrency": 1,
                    "scale_down_delay_s": 0,
                    "idle_to_zero_s": 0,
                },
            }
            made = (await api.post("/v1/endpoints", json=zero)).json()
            zid = made["id"]
            assert made["status_reason"] == (
                "created; no replica starts until a request comes (min 0)"
            )
            assert made["to_zero_after_s"] == 60.0  # the 60 s stable window, no delay

            async def at_zero() -> dict[str, Any] | None:
                e = await _show(api, "zero")
                # its route is published after the commit that shows the status
                routed = await redis.get(endpoint_route_key("zero")) is not None
                return e if e["status"] == "SCALED_TO_ZERO" and routed else None

            await until(at_zero, timeout=20, interval=0.2, what="at zero, and routed")
            raw = await redis.get(endpoint_route_key("zero"))
            assert EndpointRoute.from_json(raw).replicas == ()
            # a burst of held requests: one wake key (SET NX), many messages
            for _ in range(5):
                await redis.set(endpoint_wake_key(zid), str(time.time()), nx=True, ex=60)
                await redis.publish(ENDPOINT_WAKE_CHANNEL, zid)

            async def woken() -> dict[str, Any] | None:
                e = await _show(api, "zero")
                return e if e["replicas"] else None

            e = await until(woken, timeout=10, interval=0.2, what="woken")
            await asyncio.sleep(1.5)  # more ticks with the key still set
            e = await _show(api, "zero")
            assert len(e["replicas"]) == 1
            assert e["desired_replicas"] == 1
            scale = [ev for ev in e["events"] if ev["kind"] == "scale"]
            assert "woken" in scale[0]["message"]
            assert scale[0]["inputs"]["woken"] is True
            # the replica becomes ready: the wake key is cleared
            sid = e["replicas"][0]["session_id"]
            await cluster.run(sid, 9100)
            await cluster.probe(zid, sid, ready=True)
            await until(
                lambda: _missing(redis, endpoint_wake_key(zid)),
                timeout=20,
                interval=0.2,
                what="the wake key cleared",
            )
    finally:
        await cluster.close()
        await redis.aclose()


async def _missing(redis: Redis, key: str) -> bool:
    return not await redis.exists(key)


@pytest.mark.usefixtures("redis_url")
async def test_one_leader_at_a_time(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        key = f"test-leader-{time.monotonic_ns()}"
        a, b = Leader(redis, ttl_s=5, key=key), Leader(redis, ttl_s=5, key=key)
        assert await a.acquire()
        assert not await b.acquire()
        assert await a.still_mine()
        await b.release()  # not the holder: changes nothing
        assert await a.still_mine()
        await a.release()
        assert not await a.still_mine()
        assert await b.acquire()
        assert not await a.acquire()
    finally:
        await redis.aclose()


async def test_model_folders_are_resolved_once_mounted_by_replicas_and_kept(stack: Stack) -> None:
    """A model folder: the revision holds it by id, each replica session mounts it (and
    none of the owner's automount folders), and it cannot be removed while replicas live."""
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client(alice) as api, stack.client(bob) as other:
        made = await api.post("/v1/folders", json={"name": "model", "usage": "model"})
        assert made.status_code == 201, made.text
        fid = made.json()["id"]
        assert (await api.post("/v1/folders", json={"name": ".cache"})).status_code == 201
        assert (await other.post("/v1/folders", json={"name": "secret"})).status_code == 201

        for folders, status, field in [
            ([{"name": "secret"}], 404, "folders.0.name"),  # bob's, not shared: not there
            ([{"name": "nope"}], 404, "folders.0.name"),
            ([{"name": "model", "target": "relative"}], 422, "folders"),
            ([{"name": "model"}, {"name": "model"}], 422, "folders.1.target"),
        ]:
            r = await api.post("/v1/endpoints", json={**BODY, "folders": folders})
            assert r.status_code == status, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert field in r.text, (field, r.text)
        assert (await api.get("/v1/endpoints")).json() == []

        body = {**BODY, "folders": [{"name": "model", "target": "/models", "read_only": True}]}
        r = await api.post("/v1/endpoints", json=body)
        assert r.status_code == 201, r.text
        assert [(f["id"], f["target"], f["read_only"]) for f in r.json()["current"]["folders"]] == [
            (fid, "/models", True)
        ]

        async def replica() -> str | None:
            e = await _show(api, "demo")
            return e["replicas"][0]["session_id"] if e["replicas"] else None

        sid = await until(replica, timeout=20, interval=0.2, what="replica")
        session = (await api.get(f"/v1/sessions/{sid}")).json()
        assert [(f["id"], f["name"], f["target"], f["read_only"]) for f in session["folders"]] == [
            (fid, "model", "/models", True)
        ]  # and not alice's .cache: replicas do not automount

        busy = await api.delete("/v1/folders/model")
        assert busy.status_code == 409, busy.text
        assert sid in busy.text

        # a new revision keeps the folder it resolved (by id), unless told otherwise
        r = await api.post("/v1/endpoints/demo/revisions", json={"env": {"V": "2"}})
        assert r.status_code == 200, r.text
        assert [f["id"] for f in r.json()["current"]["folders"]] == [fid]
        r = await api.post("/v1/endpoints/demo/revisions", json={"folders": [{"name": "secret"}]})
        assert r.status_code == 404, r.text
        assert "folders.0.name" in r.text
        # one in the trash: 409 naming it, on a new revision as on create
        assert (await api.post("/v1/folders", json={"name": "old"})).status_code == 201
        assert (await api.delete("/v1/folders/old")).status_code == 200
        trashed = {"folders": [{"name": "old"}]}
        for path, body in [
            ("/v1/endpoints/demo/revisions", trashed),
            ("/v1/endpoints", {**BODY, "name": "other", **trashed}),
        ]:
            r = await api.post(path, json=body)
            assert (r.status_code, r.json()["field"]) == (409, "folders.0.name"), r.text
            assert "trash" in r.json()["detail"]
        assert (await api.get("/v1/endpoints/demo")).json()["revision"] == 2

        # an endpoint at zero holds nothing: the folder can go to the trash once demo's
        # replica ended; the next replica then fails with the reason (no crash loop)
        cold = {**BODY, "name": "cold", "folders": [{"name": "model"}]}
        cold["autoscale"] = {"min_replicas": 0, "max_replicas": 1}
        r = await api.post("/v1/endpoints", json=cold)
        assert r.status_code == 201, r.text
        assert (await api.delete("/v1/endpoints/demo")).status_code == 202
        await until(
            lambda: _status_is(api, "/v1/folders/model", 200, method="DELETE"),
            timeout=30,
            interval=0.2,
            what="the folder deletable",
        )
        redis = Redis.from_url(stack.redis_url)
        try:
            await redis.set(endpoint_wake_key(r.json()["id"]), str(time.time()), nx=True, ex=60)
            await redis.publish(ENDPOINT_WAKE_CHANNEL, r.json()["id"])
        finally:
            await redis.aclose()

        async def unavailable() -> dict[str, Any] | None:
            e = await _show(api, "cold")
            return e if e["status"] == "UNAVAILABLE" else None

        e = await until(unavailable, timeout=20, interval=0.2, what="unavailable")
        assert "data folder(s) 'model' in the trash or purged" in e["status_reason"]
        assert [ev["kind"] for ev in e["events"]].count("replica-failed") == 1


async def _status_is(api: httpx.AsyncClient, path: str, code: int, *, method: str) -> bool:
    return (await api.request(method, path)).status_code == code


async def test_rollback_waits_for_its_rollout_and_never_says_healthy_before(
    stack: Stack,
) -> None:
    alice = await stack.create_user("alice")
    redis = Redis.from_url(stack.redis_url)
    cluster = Cluster(stack, redis)
    try:
        await cluster.start_node()
        async with stack.client(alice) as api:
            r = await api.post("/v1/endpoints", json=BODY)
            assert r.status_code == 201, r.text
            eid = r.json()["id"]
            assert r.json()["status_reason"] == "created; 1 replica(s) start shortly"

            async def serve(revision: int, port: int) -> str:
                async def new() -> str | None:
                    e = await _show(api, "demo")
                    found = [x for x in e["replicas"] if x["revision"] == revision]
                    return found[0]["session_id"] if found else None

                sid: str = await until(new, timeout=20, interval=0.2, what="new")
                await cluster.run(sid, port)
                await cluster.probe(eid, sid, ready=True)
                return sid

            async def healthy_on(revision: int) -> dict[str, Any] | None:
                e = await _show(api, "demo")
                for x in e["replicas"]:  # a worker ends what it was told to stop
                    if x["session_status"] == "TERMINATING":
                        await cluster.end(x["session_id"], "TERMINATED", "stopped")
                settled = e["status"] == "HEALTHY" and e["revision"] == revision
                return (
                    e if settled and all(x["revision"] == revision for x in e["replicas"]) else None
                )

            await serve(1, 9000)
            await until(
                lambda: healthy_on(1), timeout=20, interval=0.2, what="healthy on revision 1"
            )
            # a revision with neither command nor image would serve nothing
            r = await api.post("/v1/endpoints/demo/revisions", json={"command": []})
            assert (r.status_code, r.json()["field"]) == (409, "command"), r.text
            assert "nothing to serve" in r.json()["detail"]
            r = await api.post("/v1/endpoints/demo/revisions", json={"env": {"V": "2"}})
            assert (r.json()["revision"], r.json()["status"]) == (2, "DEPLOYING"), r.text
            await serve(2, 9001)
            await until(
                lambda: healthy_on(2), timeout=20, interval=0.2, what="healthy on revision 2"
            )

            # --wait: the answer comes once revision 1 serves again
            waiting = asyncio.create_task(
                stack.cli("endpoints", "rollback", "demo", "--wait", "--timeout", "60", key=alice)
            )
            await serve(1, 9002)
            await until(
                lambda: healthy_on(1), timeout=20, interval=0.2, what="healthy on revision 1"
            )
            assert (await waiting).splitlines()[0] == "endpoint demo: revision 1, HEALTHY"
            # without it: at once, and DEPLOYING (not the HEALTHY of the revision it leaves)
            said = await stack.cli("endpoints", "rollback", "demo", "--to", "2", key=alice)
            assert said.splitlines()[0] == "endpoint demo: revision 2, DEPLOYING", said
            assert (await _show(api, "demo"))["status"] == "DEPLOYING"

            # a range that scales to zero: show says how long the delays add up to
            r = await api.post(
                "/v1/endpoints/demo/scale", json={"min_replicas": 0, "max_replicas": 2}
            )
            assert r.status_code == 200, r.text
            shown = await stack.cli("endpoints", "show", "demo", key=alice)
            assert (
                "zero about 330s after the last request (300s idle, then the 30s scale-down delay)"
                in " ".join(shown.split())
            ), shown
    finally:
        await cluster.close()
        await redis.aclose()
