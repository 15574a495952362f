"""Outbound webhooks against a real HTTP receiver on loopback: Standard Webhooks
signatures checked by the receiver with the spec's algorithm, retries after a 500,
Retry-After honoured, 3xx not followed, 410 disabling the hook, rotation sending two
signatures, a session's callback_url, and a gateway restart losing nothing. The retry
schedule runs 1000x faster here (JOBGATE_WEBHOOK_RETRY_SCALE); loopback is allowed
(JOBGATE_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8) and every other private address refused.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from harness import Stack
from redis.asyncio import Redis
from sqlalchemy import select, text, update
from waiting import until

from contract.endpoints import ReplicaHealth
from contract.keys import endpoint_ready_key
from gateway.config import GatewaySettings
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import Session, Webhook, WebhookDelivery, WebhookEvent
from gateway.loops.deliverer import Deliverer, Refused, resolve
from jobgate.localnet import free_port


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does (the Standard Webhooks spec, written out here on its own)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    if abs(time.time() - int(headers["webhook-timestamp"])) > 300:
        return False
    return any(
        hmac.compare_digest(sig.split(",", 1)[1], expected)
        for sig in headers["webhook-signature"].split()
    )


@dataclass
class Receiver:
    """Scripted answers per path (the last one repeats); every request kept."""

    port: int = field(default_factory=free_port)
    script: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    got: dict[str, list[tuple[dict[str, str], bytes]]] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        path = request.path
        self.got.setdefault(path, []).append(
            ({k.lower(): v for k, v in request.headers.items()}, body)
        )
        answers = self.script.get(path, [(200, {})])
        status, extra = answers[min(len(self.got[path]) - 1, len(answers) - 1)]
        return web.Response(status=status, headers=extra, text="ok")

    async def wait(self, path: str, count: int, timeout: float = 30.0) -> list[Any]:
        return await until(
            lambda: self.got[path] if len(self.got.get(path, [])) >= count else None,
            timeout=timeout,
            interval=0.02,
            what=lambda: f"{path}: {len(self.got.get(path, []))} requests, wanted {count}",
        )


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", r.port)
    await site.start()
    try:
        yield r
    finally:
        await runner.cleanup()


async def _hooks_stack(
    pg_url: str, redis_url: str, tmp_path: Path, **extra: Any
) -> AsyncIterator[Stack]:
    s = Stack(pg_url, redis_url, tmp_path)
    s.settings = GatewaySettings(
        **s.settings.model_dump()
        | {
            "webhook_allow_cidrs": ["127.0.0.0/8"],
            "webhook_retry_scale": 0.001,
            "webhook_poll_s": 0.05,
            "webhook_timeout_s": 5.0,
        }
        | extra
    )
    await s.bootstrap()
    await s.start_gateway()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def hooks_stack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async for s in _hooks_stack(pg_url, redis_url, tmp_path):
        yield s


@pytest.fixture
async def quiet_stack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A gateway that delivers nothing itself: the test drives a Deliverer round by round."""
    async for s in _hooks_stack(pg_url, redis_url, tmp_path, webhook_deliverer=False):
        yield s


async def _cancelled(stack: Stack, **extra: Any) -> dict[str, Any]:
    """A session ended at once (cancelled while pending: no worker needed)."""
    session = await stack.submit(command=["true"], **extra)
    async with stack.client() as api:
        assert (await api.delete(f"/v1/sessions/{session['id']}")).status_code == 202
    return session


async def test_deliveries_are_signed_retried_and_honour_the_receiver(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    stack = hooks_stack
    receiver.script = {
        "/flaky": [(500, {}), (503, {"Retry-After": "1"}), (204, {})],
        "/gone": [(410, {})],
        "/moved": [(302, {"Location": "http://10.0.0.1/inside"}), (200, {})],
    }
    async with stack.client() as api:
        made = {}
        for path in ("/ok", "/flaky", "/gone", "/moved"):
            r = await api.post(
                "/v1/webhooks",
                json={
                    "url": receiver.base + path,
                    "events": ["session.cancelled", "session.failed"],
                },
            )
            assert r.status_code == 201, r.text
            made[path] = r.json()
            assert made[path]["secret"].startswith("whsec_")
        other = await api.post(
            "/v1/webhooks", json={"url": receiver.base + "/never", "events": ["session.succeeded"]}
        )
        assert other.status_code == 201

    session = await _cancelled(stack, name="announced")
    ok = await receiver.wait("/ok", 1)
    headers, body = ok[0]
    assert verify(made["/ok"]["secret"], headers, body)
    assert not verify(made["/flaky"]["secret"], headers, body)  # each hook its own secret
    payload = json.loads(body)
    assert payload["type"] == "session.cancelled"
    datetime.fromisoformat(payload["timestamp"])
    assert payload["data"]["session_id"] == session["id"]
    assert payload["data"]["name"] == "announced"
    assert payload["data"]["status"] == "CANCELLED"
    assert payload["data"]["owner"] == "admin"
    assert headers["content-type"] == "application/json"

    flaky = await receiver.wait("/flaky", 3)
    ids = {h["webhook-id"] for h, _ in flaky}
    assert ids == {headers["webhook-id"]}  # one event, one id, on every attempt
    assert all(verify(made["/flaky"]["secret"], h, b) for h, b in flaky)
    assert {b for _, b in flaky} == {body}
    await receiver.wait("/gone", 1)
    await receiver.wait("/moved", 2)
    assert "/inside" not in receiver.got
    assert "/never" not in receiver.got

    async with stack.client() as api:
        (delivery,) = await _deliveries(api, made["/flaky"]["id"], 1)
        assert [a["status_code"] for a in delivery["log"]] == [500, 503, 204]
        assert delivery["event_id"] == headers["webhook-id"]
        after_503 = datetime.fromisoformat(delivery["log"][2]["at"]) - datetime.fromisoformat(
            delivery["log"][1]["at"]
        )
        assert after_503.total_seconds() >= 1.0  # Retry-After: 1 beat the 0.3 s schedule
        moved = (await api.get(f"/v1/webhooks/{made['/moved']['id']}/deliveries")).json()
        assert [a["status_code"] for a in moved[0]["log"]][:2] == [302, 200]
        assert "not followed" in moved[0]["log"][0]["error"]
        gone = (await api.get(f"/v1/webhooks/{made['/gone']['id']}")).json()
        assert "410" in (gone["disabled_reason"] or "")
        gone_d = (await api.get(f"/v1/webhooks/{made['/gone']['id']}/deliveries")).json()
        assert [(x["status"], x["last_status_code"]) for x in gone_d] == [("failed", 410)]
        r = await api.post(f"/v1/webhooks/deliveries/{gone_d[0]['id']}/redeliver")
        assert r.status_code == 409  # a disabled hook gets nothing, even by hand

        # redeliver: again, with the same webhook-id
        listed = await api.get(f"/v1/webhooks/{made['/ok']['id']}/deliveries")
        r = await api.post(f"/v1/webhooks/deliveries/{ok_delivery_id(listed)}/redeliver")
        assert r.status_code == 200, r.text
        again = await receiver.wait("/ok", 2)
        assert again[1][0]["webhook-id"] == headers["webhook-id"]
        # the attempts go on counting: two of them, two codes in the log
        (redone,) = await _deliveries(api, made["/ok"]["id"], 1)
        assert (redone["attempts"], [a["status_code"] for a in redone["log"]]) == (2, [200, 200])

        # rotation: both signatures for a while, each verifies with its own secret
        rotated = (await api.post(f"/v1/webhooks/{made['/ok']['id']}/rotate")).json()
        assert rotated["secret"] != made["/ok"]["secret"]
    second = await _cancelled(stack)
    got = await receiver.wait("/ok", 3)
    h3, b3 = got[2]
    assert json.loads(b3)["data"]["session_id"] == second["id"]
    assert len(h3["webhook-signature"].split()) == 2
    assert verify(rotated["secret"], h3, b3)
    assert verify(made["/ok"]["secret"], h3, b3)
    assert len(receiver.got["/gone"]) == 1  # disabled: nothing more


def ok_delivery_id(response: Any) -> str:
    items = response.json()
    assert items, response.text
    return str(items[-1]["id"])


async def test_callback_url_and_a_restart_lose_nothing(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    stack = hooks_stack
    receiver.script = {"/cb": [(503, {"Retry-After": "2"}), (200, {})]}
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789").decode()
    session = await _cancelled(stack, callback_url=receiver.base + "/cb", callback_secret=secret)
    first = await receiver.wait("/cb", 1)
    assert verify(secret, *first[0])
    # the gateway (and its deliverer) goes away with the retry still to come
    await stack.stop_gateway()
    await asyncio.sleep(0.5)
    assert len(receiver.got["/cb"]) == 1
    await stack.start_gateway()
    second = await receiver.wait("/cb", 2)
    assert second[1][0]["webhook-id"] == first[0][0]["webhook-id"]
    assert json.loads(second[1][1])["data"]["session_id"] == session["id"]
    assert json.loads(second[1][1])["type"] == "session.cancelled"
    async with stack.client() as api:
        shown = (await api.get(f"/v1/sessions/{session['id']}")).json()
        assert shown["callback_url"] == receiver.base + "/cb"
        assert shown["callback_secret"] is None  # never shown again


async def test_targets_that_are_not_public_are_refused(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    async with hooks_stack.client() as api:
        for url in (
            "http://10.0.0.1/hook",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8080/hook",
            "http://[::ffff:10.0.0.1]/hook",
            "file:///etc/passwd",
        ):
            r = await api.post("/v1/webhooks", json={"url": url, "events": ["session.failed"]})
            assert r.status_code == 422, (url, r.text)
            assert r.json()["field"] == "url"
            r = await api.post("/v1/sessions", json={"command": ["true"], "callback_url": url})
            assert r.status_code == 422, (url, r.text)
            assert r.json()["field"] == "callback_url"
        r = await api.post("/v1/webhooks", json={"url": "http://x.example/", "events": ["nope"]})
        assert r.status_code == 422
        assert r.json()["field"] == "events"
    # host names are checked when a delivery resolves them: every address must pass
    with pytest.raises(Refused, match="loopback"):
        await resolve(f"http://localhost:{receiver.port}/x", [])
    with pytest.raises(Refused, match="resolve"):
        await resolve("http://no-such-host.invalid/x", [])
    allowed = hooks_stack.settings.webhook_networks
    local = await resolve(f"http://localhost:{receiver.port}/x", allowed)
    assert local == ("127.0.0.1", receiver.port)


async def test_two_deliverers_share_the_work_and_send_each_delivery_once(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    stack = hooks_stack  # its gateway runs one deliverer; a second one joins here
    engine = create_engine(stack.settings.effective_database_url)
    second = Deliverer(create_session_factory(engine), stack.settings)
    stop = asyncio.Event()
    task = asyncio.create_task(second.run(stop))
    try:
        async with stack.client() as api:
            r = await api.post(
                "/v1/webhooks",
                json={"url": receiver.base + "/both", "events": ["session.cancelled"]},
            )
            assert r.status_code == 201, r.text
        sessions = [await _cancelled(stack) for _ in range(12)]
        got = await receiver.wait("/both", len(sessions))
        await asyncio.sleep(1.0)  # time enough for a second copy to arrive, were there one
        ids = [h["webhook-id"] for h, _ in receiver.got["/both"]]
        assert len(ids) == len(set(ids)) == len(sessions), ids
        delivered = {json.loads(b)["data"]["session_id"] for _, b in got}
        assert delivered == {s["id"] for s in sessions}
    finally:
        stop.set()
        await task
        await second.close()
        await engine.dispose()


async def test_finished_deliveries_and_then_their_events_go_after_the_retention(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    """JOBGATE_WEBHOOK_RETENTION_DAYS (30): a finished delivery older than that is deleted,
    then its event once no delivery of it is left; a delivery still to be sent stays."""
    stack = hooks_stack
    async with stack.client() as api:
        r = await api.post(
            "/v1/webhooks", json={"url": receiver.base + "/kept", "events": ["session.cancelled"]}
        )
        assert r.status_code == 201, r.text
        hook = r.json()["id"]
    sessions = [await _cancelled(stack) for _ in range(3)]
    await receiver.wait("/kept", 3)
    async with stack.client() as api:
        listed = await _deliveries(api, hook, 3)
    by_session = {
        json.loads(b)["data"]["session_id"]: h["webhook-id"] for h, b in receiver.got["/kept"]
    }
    old_done, old_pending, recent = (by_session[s["id"]] for s in sessions)

    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with engine.begin() as conn:
            # two events of 31 days ago; one delivery finished then, one a crashed
            # deliverer still holds (pending: never pruned, however old)
            await conn.execute(
                text(
                    "UPDATE webhook_events SET created_at = created_at - interval '31 days'"
                    " WHERE id IN (:a, :b)"
                ),
                {"a": old_done, "b": old_pending},
            )
            await conn.execute(
                text(
                    "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at"
                    " - interval '31 days' WHERE event_id IN (:a, :b)"
                ),
                {"a": old_done, "b": old_pending},
            )
            await conn.execute(
                text(
                    "UPDATE webhook_deliveries SET status = 'pending',"
                    " locked_until = now() + interval '1 day' WHERE event_id = :b"
                ),
                {"b": old_pending},
            )
        forever = GatewaySettings(**stack.settings.model_dump() | {"webhook_retention_days": 0})
        keeper = Deliverer(create_session_factory(engine), forever)
        pruner = Deliverer(create_session_factory(engine), stack.settings)
        try:
            assert await keeper.prune() == 0
            await pruner.prune(batch=1)  # one row per transaction: the batches loop
        finally:
            await keeper.close()
            await pruner.close()
        async with engine.connect() as conn:
            events = set((await conn.execute(text("SELECT id FROM webhook_events"))).scalars())
    finally:
        await engine.dispose()
    assert events == {old_pending, recent}
    async with stack.client() as api:
        listed = (await api.get(f"/v1/webhooks/{hook}/deliveries")).json()
    assert {(d["event_id"], d["status"]) for d in listed} == {
        (old_pending, "pending"),
        (recent, "succeeded"),
    }


POISON = ("http://a\x91b.example/hook", "http://\U0010e02b/hook")


async def test_a_host_no_name_can_have_is_refused_and_one_bad_delivery_fails_alone(
    quiet_stack: Stack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = quiet_stack
    async with stack.client() as api:
        for url in POISON:  # no IDNA encoding: no lookup could ever find it
            r = await api.post("/v1/webhooks", json={"url": url, "events": ["session.cancelled"]})
            assert (r.status_code, r.json()["field"]) == (422, "url"), r.text
            assert "is not a valid host name" in r.json()["detail"]
        r = await api.post(
            "/v1/webhooks", json={"url": receiver.base + "/ok", "events": ["session.cancelled"]}
        )
        assert r.status_code == 201, r.text
        good = r.json()
        assert [w["url"] for w in (await api.get("/v1/webhooks")).json()] == [good["url"]]
    engine = create_engine(stack.settings.effective_database_url)
    db = create_session_factory(engine)
    deliverer = Deliverer(db, stack.settings)
    try:
        # hooks an older gateway took: rows written as they were, the check bypassed; and
        # one whose attempt breaks in a way nobody foresaw
        async with db() as s, s.begin():
            owner = (await s.get(Webhook, good["id"])).owner_id  # type: ignore[union-attr]
            for url in (*POISON, "http://boom.example/hook"):
                events = {"items": ["session.cancelled"]}
                s.add(Webhook(owner_id=owner, url=url, events=events, secret=good["secret"]))
        attempt = deliverer._attempt

        async def breaks_on_boom(job: Any) -> Any:
            if "boom" in job.url:
                raise RuntimeError("a bug in one attempt")
            return await attempt(job)

        monkeypatch.setattr(deliverer, "_attempt", breaks_on_boom)
        await _cancelled(stack)
        assert await deliverer.fan_out() == 1
        assert await deliverer.send_due() == 4  # the round ends; none of them raised out
        await receiver.wait("/ok", 1)
        async with db() as s:
            rows = {d.url: d for d in (await s.execute(select(WebhookDelivery))).scalars()}
        assert (rows[good["url"]].status, rows[good["url"]].attempts) == ("succeeded", 1)
        for url, why in (
            (POISON[0], "is not a valid host name"),
            (POISON[1], "is not a valid host name"),
            ("http://boom.example/hook", "RuntimeError: a bug in one attempt"),
        ):
            row = rows[url]
            # failed on its own: one attempt counted, why kept, the next one scheduled
            assert (row.status, row.attempts, row.locked_until) == ("pending", 1, None), url
            assert why in row.last_error, (url, row.last_error)
            assert row.next_attempt_at > row.created_at
    finally:
        await deliverer.close()
        await engine.dispose()


async def test_a_scale_up_is_no_outage_but_losing_a_serving_replica_is(
    hooks_stack: Stack, receiver: Receiver
) -> None:
    """endpoint.degraded goes out when fewer replicas serve than did, never while the
    replicas a scale-up asked for are still starting. Replicas "run" by having their rows
    moved as a worker's events would, and are "probed" by writing what a proxy writes."""
    stack = hooks_stack
    stack.start_scheduler()  # the endpoint controller
    engine = create_engine(stack.settings.effective_database_url)
    db = create_session_factory(engine)
    redis = Redis.from_url(stack.redis_url)
    try:
        async with stack.client() as api:
            r = await api.post(
                "/v1/webhooks", json={"url": receiver.base + "/ep", "events": ["endpoint.degraded"]}
            )
            assert r.status_code == 201, r.text
            body = {"name": "web2", "port": 8000, "command": ["serve"], "resources": {"cpu": "0.1"}}
            r = await api.post("/v1/endpoints", json=body)
            assert r.status_code == 201, r.text
            eid = r.json()["id"]

            async def show() -> dict[str, Any]:
                got: dict[str, Any] = (await api.get("/v1/endpoints/web2")).json()
                return got

            async def serve(count: int) -> list[str]:
                """The first *count* replicas run and answer their probe; their ids."""
                e = await until(
                    lambda: _with(show, lambda e: len(e["replicas"]) >= count),
                    timeout=30,
                    interval=0.1,
                    what=f"{count} replicas",
                )
                ids = [x["session_id"] for x in sorted(e["replicas"], key=lambda x: x["index"])]
                for sid in ids[:count]:
                    async with db() as s, s.begin():
                        await s.execute(
                            update(Session)
                            .where(Session.id == sid)
                            .values(status="RUNNING", status_reason="running", pending_reason="")
                        )
                    health = ReplicaHealth(ready=True, at=time.time(), reason="", proxy_id="t")
                    await redis.hset(endpoint_ready_key(eid), sid, health.model_dump_json())  # type: ignore[misc]
                return ids

            def healthy(ready: int) -> Any:  # as the controller saw it (a tick, not a read)
                return lambda e: (
                    e["status_reason"] == f"{ready}/{e['desired_replicas']} replicas ready"
                )

            await serve(1)
            await until(
                lambda: _with(show, healthy(1)),
                timeout=30,
                interval=0.1,
                what="healthy with 1 replica",
            )
            assert (await show())["status"] == "HEALTHY"

            # scale 1 -> 3: two replicas start (nothing places them yet), one serves
            r = await api.post("/v1/endpoints/web2/scale", json={"replicas": 3})
            assert r.status_code == 200, r.text
            e = await until(
                lambda: _with(show, lambda e: len(e["replicas"]) == 3),
                timeout=30,
                interval=0.1,
                what="3 replicas",
            )
            e = await until(
                lambda: _with(show, lambda e: "scaling up" in e["status_reason"]),
                timeout=30,
                interval=0.1,
                what="the reason says scaling up",
            )
            assert e["status"] == "HEALTHY", e["status_reason"]
            assert "1/3 replicas ready" in e["status_reason"]
            ids = await serve(3)
            await until(
                lambda: _with(show, healthy(3)),
                timeout=30,
                interval=0.1,
                what="healthy with 3 replicas",
            )
            assert (await show())["status"] == "HEALTHY"

            # a serving replica dies: fewer serve than did, DEGRADED while it is replaced
            async with db() as s, s.begin():
                await s.execute(
                    update(Session)
                    .where(Session.id == ids[1])
                    .values(status="FAILED", status_reason="exited with 137")
                )
            e = await until(
                lambda: _with(show, lambda e: e["status"] == "DEGRADED"),
                timeout=30,
                interval=0.1,
                what="DEGRADED",
            )
            assert "2/3 replicas ready (3 served)" in e["status_reason"], e["status_reason"]
            statuses = [ev["message"] for ev in e["events"] if ev["kind"] == "status"]
            assert not any("DEGRADED" in m for m in statuses[1:]), statuses  # only the loss

        # the receiver hears of the loss, and of nothing before it (events go in order)
        (got,) = await receiver.wait("/ep", 1)
        payload = json.loads(got[1])
        assert (payload["type"], payload["data"]["endpoint"]) == ("endpoint.degraded", "web2")
        assert payload["data"]["status"] == "DEGRADED"
        assert payload["data"]["was"] == "HEALTHY"
        assert "(3 served)" in payload["data"]["reason"]
        async with db() as s:
            told = (
                await s.execute(
                    select(WebhookEvent).where(WebhookEvent.type == "endpoint.degraded")
                )
            ).scalars()
            assert [w.data["reason"] for w in told] == [payload["data"]["reason"]]
    finally:
        await redis.aclose()
        await engine.dispose()


async def _with(get: Any, ok: Any) -> Any:
    value = await get()
    return value if ok(value) else None


async def _deliveries(api: httpx.AsyncClient, hook: str, count: int) -> list[dict[str, Any]]:
    """The hook's deliveries once there are *count* and every one succeeded."""

    async def done() -> list[dict[str, Any]] | None:
        listed: list[dict[str, Any]] = (await api.get(f"/v1/webhooks/{hook}/deliveries")).json()
        ok = len(listed) == count and all(d["status"] == "succeeded" for d in listed)
        return listed if ok else None

    return await until(done, timeout=20, what=f"{count} deliveries of {hook} succeeded")
