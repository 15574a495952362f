"""Each node has a Redis user of its own (JOBGATE_REDIS_USERS): two real workers run
a session on the test run's Redis logged in as their own users, and node 1's Redis login,
stolen, cannot push to node 2's queue, read it, or speak in node 2's name."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from harness import NODE_TOKEN, started_stack
from redis.exceptions import AuthenticationError, ConnectionError, NoPermissionError
from waiting import until

from contract.acl import node_redis_password, node_redis_user
from contract.keys import EVENTS_QUEUE, event_job_id, node_queue, queued_job_id
from contract.messages import EventBatch, KernelEvent, StartKernel
from gateway.services.redis_users import RedisUsers
from plumbing.arq import connect
from plumbing.redis_login import with_login
from workers.credential import credential_path


async def test_each_node_reaches_only_its_own_queue_and_events(
    pg_url: str,
    redis_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(RedisUsers, "EVERY_S", 0.2)
    tag = uuid.uuid4().hex[:6]
    thief, victim = f"thief-{tag}", f"victim-{tag}"
    admin = aioredis.Redis.from_url(redis_url)
    async with started_stack(pg_url, redis_url, tmp_path, redis_users=True) as stack:
        try:
            await stack.start_worker(thief)
            await stack.start_worker(victim)
            users = {u.decode() for u in await admin.execute_command("ACL", "USERS")}
            assert {node_redis_user(thief), node_redis_user(victim)} <= users
            for node in (thief, victim):
                assert f"node {node}: Redis as its own user jobgate-node-{node}" in caplog.text
            # a job left from before node ids were in job ids (an upgrade): the node's user
            # may not touch its keys, so its worker removes it and goes on
            legacy = await connect(redis_url)
            try:
                await legacy.enqueue_job(
                    "stop_kernel", {}, _job_id="stop:legacy", _queue_name=node_queue(victim)
                )
            finally:
                await legacy.aclose()

            async def dropped_legacy() -> bool:
                return await admin.zscore(node_queue(victim), "stop:legacy") is None

            await until(dropped_legacy, timeout=30, what="the legacy job removed")
            assert "removed 1 job(s) not its own: stop:legacy" in caplog.text
            # the workers run sessions on their own logins: start jobs, events, heartbeats
            session = await stack.submit(command=["sh", "-c", "echo hi; sleep 60"])
            running = await stack.wait_status(session["id"], {"RUNNING"})
            kernel = running["kernels"][0]
            placed = kernel["node"]
            assert placed in (thief, victim)
            other = thief if placed == victim else victim

            # node `other`'s Redis login, as a stolen one would be used
            credential = credential_path(tmp_path, other).read_text().strip()
            login = with_login(
                redis_url, node_redis_user(other), node_redis_password(other, credential)
            )
            stolen = await connect(login)
            try:
                start = StartKernel(
                    kernel_id="k-forged",
                    session_id=session["id"],
                    node_id=placed,
                    session_type="batch",
                    command=["sh", "-c", "echo pwned"],
                )
                target = node_queue(placed)
                refused = {
                    "push to its queue": stolen.enqueue_job(
                        "start_kernel",
                        start.model_dump(mode="json"),
                        _job_id=queued_job_id(target, "start:k-forged"),
                        _queue_name=target,
                    ),
                    "push any job id to it": stolen.zadd(target, {"n:x:y": 1}),
                    "read its queue": stolen.zrange(target, 0, -1),
                    "read its jobs": stolen.get(f"arq:job:{queued_job_id(target, 'start:k')}"),
                    "read the events queue": stolen.zrange(EVENTS_QUEUE, 0, -1),
                    "drop events": stolen.zrem(EVENTS_QUEUE, "e:x:y"),
                    "an events job in its name": stolen.enqueue_job(
                        "handle_events",
                        {"events": []},
                        _job_id=event_job_id(placed, "x"),
                        _queue_name=EVENTS_QUEUE,
                    ),
                    "its heartbeat": stolen.set(f"jobgate:heartbeat:{placed}", "{}"),
                    "list keys": stolen.keys("*"),
                    "scan keys": stolen.scan(0),
                    "read a route": stolen.get("jobgate:route:anything"),
                    "publish": stolen.publish("jobgate:route-changes", "x"),
                    "flush": stolen.flushdb(),
                    # broadcast tracking would push the name of every key changed
                    "track every key": stolen.execute_command("CLIENT", "TRACKING", "ON", "BCAST"),
                    "select another database": stolen.execute_command("SELECT", "1"),
                }
                allowed = []
                for what, attempt in refused.items():
                    try:
                        await attempt
                    except NoPermissionError:
                        continue  # NOPERM from Redis itself
                    allowed.append(what)
                assert allowed == []
                # what it may: its own heartbeat, and events in its own name
                assert await stolen.set(f"jobgate:heartbeat:{other}", b"{}", ex=5)
                forged = KernelEvent(
                    kind="exited",
                    kernel_id=kernel["id"],
                    session_id=session["id"],
                    node_id=placed,  # the victim's name, in a job of its own
                    ts=time.time(),
                    exit_code=0,
                    attempt=kernel["attempt"],
                )
                await stolen.enqueue_job(
                    "handle_events",
                    EventBatch(events=[forged]).model_dump(mode="json"),
                    _job_id=event_job_id(other, uuid.uuid4().hex),
                    _queue_name=EVENTS_QUEUE,
                )

                def dropped() -> bool:
                    wanted = f"node {other} refused: tried to report events in the name of node"
                    return wanted in caplog.text

                await until(dropped, timeout=30, what="the forged event refused")
                assert (await stack.get(session["id"]))["status"] == "RUNNING"
                # a job of its own queue's form, added to the events queue: removed unread
                smuggled = f"n:{other}:{uuid.uuid4().hex}"
                await stolen.enqueue_job(
                    "handle_events",
                    EventBatch(events=[forged]).model_dump(mode="json"),
                    _job_id=smuggled,
                    _queue_name=EVENTS_QUEUE,
                )

                async def removed() -> bool:
                    return await admin.zscore(EVENTS_QUEUE, smuggled) is None

                await until(removed, timeout=30, what="the smuggled job removed")
                assert f"removed 1 job(s) not its own: {smuggled}" in caplog.text
                assert (await stack.get(session["id"]))["status"] == "RUNNING"
                # Redis logs each refusal with the user that tried
                entries = await admin.execute_command("ACL", "LOG", "50")
                tried = [dict(zip(e[::2], e[1::2], strict=True)) for e in entries]
                mine = [e for e in tried if e[b"username"] == node_redis_user(other).encode()]
                assert {e[b"object"] for e in mine} >= {
                    target.encode(),
                    EVENTS_QUEUE.encode(),
                    b"keys",
                    b"scan",
                    b"publish",
                    b"flushdb",
                }

                # Redis restarted without an ACL file: the gateway makes the users again
                await admin.execute_command("ACL", "DELUSER", node_redis_user(other))

                async def back() -> bool:
                    users = await admin.execute_command("ACL", "USERS")
                    return node_redis_user(other).encode() in users

                await until(back, timeout=30, what="the node's Redis user made again")
                assert await stolen.ping()  # the same password (its credential's) again

                # revoked: the user goes (and its connections with it); a check of the
                # users that read the row just before would make it again, and delete it
                # at its next round
                out = await stack.cli("nodes", "revoke", other)
                assert f"{other}: credential revoked" in out

                async def gone() -> bool:
                    users = await admin.execute_command("ACL", "USERS")
                    return node_redis_user(other).encode() not in users

                await until(gone, timeout=30, what="the revoked node's Redis user deleted")
                with pytest.raises((ConnectionError, AuthenticationError)):
                    await stolen.ping()
            finally:
                await stolen.aclose()
            # the session runs on, and ends, on the placed node's own login
            async with stack.client() as api:
                assert (await api.delete(f"/v1/sessions/{session['id']}")).status_code == 202
            await stack.wait_status(session["id"], {"TERMINATED"})
            assert "pwned" not in await stack.logs(session["id"])
            assert NODE_TOKEN not in caplog.text
            assert credential not in caplog.text
        finally:
            for node in (thief, victim):
                await admin.execute_command("ACL", "DELUSER", node_redis_user(node))
            await admin.aclose()
