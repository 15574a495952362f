"""Each node holds only its own credential: two real workers join with the join token,
and node 1's credential, stolen, reaches nothing of node 2 (the NodeRestriction test)."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import stat
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from harness import NODE_TOKEN, Stack
from waiting import until

from contract.keys import EVENTS_QUEUE
from contract.messages import EventBatch, KernelEvent
from jobgate.workdir import pack
from plumbing.arq import connect
from workers.credential import credential_path


def _credential(stack: Stack, node_id: str) -> str:
    path = credential_path(stack.tmp, node_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # saved for the worker alone
    return path.read_text().strip()


async def test_a_stolen_node_credential_reaches_only_its_own_node(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "run.sh").write_text("echo started; sleep 60\n")
    packed = pack(proj)
    data = packed.path.read_bytes()
    packed.close()
    async with stack.client() as api:
        assert (await api.put(f"/v1/blobs/{packed.digest}", content=data)).status_code == 201

    # two nodes join with the join token (here the deprecated JOBGATE_NODE_TOKEN alias)
    await stack.start_worker("n1")
    await stack.start_worker("n2")
    # a sim host joins each of its nodes, each with a credential of its own (in a group of
    # their own, made first: the session below must run on n1 or n2)
    async with stack.client() as api:
        assert (await api.put("/v1/resource-groups/sim", json={})).status_code == 200
    await stack.start_worker("sim", sim_nodes=3, resource_group="sim")
    sims = {_credential(stack, f"sim-{i:04d}") for i in range(3)}
    assert len(sims) == 3
    session = await stack.submit(command=["sh", "run.sh"], working_dir=packed.digest)
    running = await stack.wait_status(session["id"], {"RUNNING"})
    kernel = running["kernels"][0]
    victim = kernel["node"]  # the node the session runs on (it fetched the blob itself)
    thief = "n1" if victim == "n2" else "n2"
    stolen, own = _credential(stack, thief), _credential(stack, victim)
    assert stolen.startswith("jgnc_")
    assert stolen != own
    assert NODE_TOKEN not in (stolen, own)

    upload = {
        "session_id": session["id"],
        "attempt": kernel["attempt"],
        "chunks": [
            {"stream": "stdout", "offset": 0, "data": base64.b64encode(b"forged\n").decode()}
        ],
    }
    async with httpx.AsyncClient(
        base_url=stack.url, headers={"Authorization": f"Bearer {stolen}"}, timeout=30
    ) as node:
        refused = [
            await node.post(f"/v1/internal/kernels/{kernel['id']}/logs", json=upload),
            await node.get(f"/v1/blobs/{packed.digest}"),
        ]
        for r in refused:
            assert r.status_code == 403, r.text
            assert r.headers["content-type"] == "application/problem+json"
            assert f"node {thief} may not" in r.json()["detail"]
        # the shared join token no longer opens the internal routes by itself
        r = await node.get(
            f"/v1/blobs/{packed.digest}", headers={"Authorization": f"Bearer {NODE_TOKEN}"}
        )
        assert r.status_code == 401
    # the victim's own credential still fetches it
    async with httpx.AsyncClient(
        base_url=stack.url, headers={"Authorization": f"Bearer {own}"}, timeout=30
    ) as node:
        assert (await node.get(f"/v1/blobs/{packed.digest}")).content == data
    assert "forged" not in await stack.logs(session["id"])

    # an event about the victim's kernel, sent by the thief over the events queue
    pool = await connect(stack.redis_url)
    try:
        forged = KernelEvent(
            kind="exited",
            kernel_id=kernel["id"],
            session_id=session["id"],
            node_id=thief,
            ts=time.time(),
            exit_code=0,
            attempt=kernel["attempt"],
        )
        await pool.enqueue_job(
            "handle_events",
            EventBatch(events=[forged]).model_dump(mode="json"),
            _job_id=f"events:{uuid.uuid4().hex}",
            _queue_name=EVENTS_QUEUE,
        )
    finally:
        await pool.aclose()

    def dropped() -> bool:
        return any(f"from node {thief} dropped" in r.getMessage() for r in caplog.records)

    await until(dropped, timeout=30, what="the forged event dropped")
    assert (await stack.get(session["id"]))["status"] == "RUNNING"

    # each refusal is logged, naming the node and what it tried, never the credential
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"node {thief} refused: tried to upload logs of kernel" in m for m in lines)
    assert any(f"node {thief} refused: tried to fetch blob" in m for m in lines)
    assert not any(stolen in m or own in m for m in caplog.messages)

    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as anyone:
        join = {"Authorization": f"Bearer {NODE_TOKEN}"}
        # the join token cannot take over a node that holds a valid credential
        again = await anyone.post("/v1/internal/nodes/join", json={"node_id": victim}, headers=join)
        assert again.status_code == 409, again.text
        assert f"jobgate nodes revoke {victim}" in again.json()["detail"]
        bad = await anyone.post(
            "/v1/internal/nodes/join",
            json={"node_id": "x"},
            headers={"Authorization": "Bearer jg_nope"},
        )
        assert bad.status_code == 401

        # nor can a worker elsewhere (another data dir) that names itself after it
        impostor = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jobgate",
            "worker",
            "run",
            env=os.environ
            | {
                "JOBGATE_REDIS_URL": stack.redis_url,
                "JOBGATE_GATEWAY_URL": stack.url,
                "JOBGATE_JOIN_TOKEN": NODE_TOKEN,
                "JOBGATE_DATA_DIR": str(tmp_path / "impostor"),
                "JOBGATE_NODE_ID": victim,
                "JOBGATE_WORKER_RUNTIME": "process",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(impostor.communicate(), 60)
        finally:
            if impostor.returncode is None:
                impostor.kill()  # the pid this test started
                await impostor.wait()
        assert impostor.returncode == 2
        assert err.decode().startswith(
            f"jobgate worker: node {victim} could not join: HTTP 409 node {victim} has joined"
        )
        # revoked: refused at once, saying so; then it may join again
        out = await stack.cli("nodes", "revoke", thief)
        assert f"{thief}: credential revoked" in out
        r = await anyone.get(
            f"/v1/blobs/{packed.digest}", headers={"Authorization": f"Bearer {stolen}"}
        )
        assert r.status_code == 401
        assert f"the credential of node {thief} was revoked at" in r.json()["detail"]
        rejoined = await anyone.post(
            "/v1/internal/nodes/join", json={"node_id": thief}, headers=join
        )
        assert rejoined.status_code == 200, rejoined.text
        assert rejoined.json()["credential"] not in (stolen, own)
    async with stack.client() as api:  # an unknown node is a 404
        assert (await api.post("/v1/nodes/nowhere/revoke")).status_code == 404
        assert (await api.delete(f"/v1/sessions/{session['id']}")).status_code == 202
    # the victim's worker still reports with its own credential: the session ends
    await stack.wait_status(session["id"], {"TERMINATED"})
