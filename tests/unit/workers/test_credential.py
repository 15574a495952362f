"""The worker's own node credential: joined for once, saved 0600, reused on restart."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest

from workers.credential import JoinFailed, credential_path, node_credential


def _gateway(answers: list[httpx.Response], seen: list[httpx.Request]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return httpx.AsyncClient(base_url="http://gw", transport=httpx.MockTransport(handle))


async def test_a_node_joins_once_and_keeps_its_credential(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    joined = httpx.Response(200, json={"node_id": "n1", "credential": "jgnc_own"})
    async with _gateway([joined], seen) as http:
        assert await node_credential(http, tmp_path, "n1", "join-secret") == "jgnc_own"
        # a restart reads it back: no second join (the gateway would answer 409)
        assert await node_credential(http, tmp_path, "n1", "join-secret") == "jgnc_own"
        assert await node_credential(http, tmp_path, "n1", "") == "jgnc_own"
    assert len(seen) == 1
    assert seen[0].url.path == "/v1/internal/nodes/join"
    assert seen[0].headers["authorization"] == "Bearer join-secret"
    assert json.loads(seen[0].content) == {"node_id": "n1"}
    path = credential_path(tmp_path, "n1")
    assert path == tmp_path / "worker" / "n1" / "node-credential"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["node-credential"]  # no temp left


async def test_a_node_that_cannot_join_says_why_and_saves_nothing(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    taken = httpx.Response(
        409,
        json={"detail": "node n1 has joined already; ... jobgate nodes revoke n1"},
        headers={"content-type": "application/problem+json"},
    )
    async with _gateway([taken], seen) as http:
        with pytest.raises(JoinFailed, match="HTTP 409 node n1 has joined already"):
            await node_credential(http, tmp_path, "n1", "join-secret")
        with pytest.raises(JoinFailed, match="set JOBGATE_JOIN_TOKEN"):
            await node_credential(http, tmp_path, "n2", "")
    assert len(seen) == 1
    assert not credential_path(tmp_path, "n1").exists()


async def test_a_node_waits_for_a_gateway_that_does_not_answer_yet(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    answers = [httpx.Response(503), httpx.Response(200, json={"node_id": "n1", "credential": "c"})]

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1 or json.loads(request.content)["node_id"] == "n2":
            raise httpx.ConnectError("refused", request=request)
        return answers.pop(0)

    transport = httpx.MockTransport(handle)
    async with httpx.AsyncClient(base_url="http://gw", transport=transport) as http:
        assert await node_credential(http, tmp_path, "n1", "join-secret") == "c"
        with pytest.raises(JoinFailed, match="could not join: ConnectError"):
            await node_credential(http, tmp_path, "n2", "join-secret", wait_s=0)
    assert len(seen) == 4
