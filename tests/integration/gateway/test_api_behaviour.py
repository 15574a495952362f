"""What the CLI relies on, at the API: empty 204s, PATCH that changes only what is given,
names unique among live sessions (also under concurrent creates), and list filters
that refuse values they do not know. Each on PostgreSQL and on SQLite.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harness import Stack

BODY: dict[str, Any] = {"command": ["sleep", "60"], "resources": {"cpu": "0.1", "mem": "64m"}}


async def test_deletes_answer_204_without_a_body_or_content_type(any_stack: Stack) -> None:
    async with any_stack.client() as api:
        r = await api.put("/v1/images/example/app:1", json={"service_ports": "web:http:8080"})
        assert r.status_code == 200, r.text
        r = await api.delete("/v1/images/example/app:1")
        assert r.status_code == 204
        assert r.content == b""
        assert "content-type" not in r.headers
        assert (await api.get("/v1/images")).json() == []
        r = await api.put("/v1/policies/user/*", json={"max_sessions": 3})
        assert r.status_code == 200, r.text
        r = await api.delete("/v1/policies/user/*")
        assert r.status_code == 204
        assert r.content == b""
        assert "content-type" not in r.headers
        assert (await api.get("/v1/policies")).json() == []


async def test_patch_changes_only_the_fields_given(any_stack: Stack) -> None:
    async with any_stack.client() as api:
        r = await api.patch(
            "/v1/policies/user/*", json={"max_sessions": 4, "max_slots": {"cpu": 8, "mem": "4g"}}
        )
        assert r.status_code == 200, r.text
        r = await api.patch("/v1/policies/user/*", json={"max_pending": 2})
        assert r.json() == {
            "scope": "user",
            "subject": "*",
            "max_sessions": 4,
            "max_pending": 2,
            "max_slots": {"cpu": "8", "mem": str(4 * 1024**3)},
            "max_folder_bytes": None,
            "allow_commit": None,
            "max_priority": None,
        }
        # slots merge one by one; null lifts a limit
        r = await api.patch(
            "/v1/policies/user/*", json={"max_slots": {"mem": None, "cpu": 2}, "max_sessions": None}
        )
        assert r.json()["max_slots"] == {"cpu": "2"}
        assert r.json()["max_sessions"] is None
        assert r.json()["max_pending"] == 2
        listed = (await api.get("/v1/policies")).json()
        assert listed == [r.json()]
        bad = await api.patch("/v1/policies/user/*", json={"max_slots": {"cpu": "lots"}})
        assert bad.status_code == 422
        assert bad.json()["field"].startswith("max_slots")
        assert (await api.get("/v1/policies")).json() == listed  # nothing half-written

        r = await api.patch(
            "/v1/resource-groups/gpu",
            json={"description": "the GPU boxes", "scheduler": {"sequencer": "drf"}},
        )
        assert r.status_code == 200, r.text
        r = await api.patch("/v1/resource-groups/gpu", json={"description": "GPU boxes"})
        assert r.json()["scheduler"] == {"sequencer": "drf"}
        r = await api.patch(
            "/v1/resource-groups/gpu", json={"scheduler": {"scorers": ["dispersed"]}}
        )
        group = r.json()
        effective = group.pop("effective")
        assert group == {
            "name": "gpu",
            "description": "GPU boxes",
            "scheduler": {"sequencer": "drf", "scorers": ["dispersed"]},
            "nodes": 0,
        }
        # what the scheduler runs: the patch merged, the rest the defaults
        assert effective["sequencer"]["name"] == "drf"
        assert [s["name"] for s in effective["scorers"]] == ["dispersed"]
        bad = await api.patch("/v1/resource-groups/gpu", json={"scheduler": {"sequencer": "nope"}})
        assert bad.status_code == 422
        assert bad.json()["field"] == "scheduler"
        (group,) = [g for g in (await api.get("/v1/resource-groups")).json() if g["name"] == "gpu"]
        assert group["scheduler"] == {"sequencer": "drf", "scorers": ["dispersed"]}
        # a plugin given replaces the stored one whole: drf does not get fifo's options
        fifo = {"name": "heuristic-fifo", "options": {"max_skips": 1}}
        r = await api.patch("/v1/resource-groups/gpu", json={"scheduler": {"sequencer": fifo}})
        assert r.status_code == 200, r.text
        drf = {"name": "drf", "options": {"level": "user"}}
        r = await api.patch(
            "/v1/resource-groups/gpu", json={"scheduler": {"sequencer": drf, "scorers": None}}
        )
        assert r.status_code == 200, r.text
        assert r.json()["scheduler"] == {"sequencer": drf}
        # JSON types as the document says them: "8" is not a sample size
        bad = await api.patch("/v1/resource-groups/gpu", json={"scheduler": {"sample_size": "8"}})
        assert bad.status_code == 422
        assert bad.json()["field"] == "scheduler"


async def test_a_name_is_unique_among_live_sessions(any_stack: Stack) -> None:
    other_key = await any_stack.create_user("other")
    async with any_stack.client() as api:
        first = await api.post("/v1/sessions", json={**BODY, "name": "train"})
        assert first.status_code == 201, first.text
        first_id = first.json()["id"]
        again = await api.post("/v1/sessions", json={**BODY, "name": "train"})
        assert again.status_code == 409
        problem = again.json()
        assert again.headers["content-type"] == "application/problem+json"
        assert problem["field"] == "name"
        assert problem["session"] == first_id
        assert first_id in problem["detail"]
        # another user's names are theirs
        async with any_stack.client(other_key) as theirs:
            r = await theirs.post("/v1/sessions", json={**BODY, "name": "train"})
            assert r.status_code == 201, r.text
        # once it ended, the name is free again; a lookup by name finds the live one first
        ended = await api.delete(f"/v1/sessions/{first_id}", params={"force": True})
        assert ended.status_code == 202
        await any_stack.wait_status(first_id, {"CANCELLED", "TERMINATED"})
        second = await api.post("/v1/sessions", json={**BODY, "name": "train"})
        assert second.status_code == 201, second.text
        found = (await api.get("/v1/sessions", params={"name": "train"})).json()["items"]
        assert [s["id"] for s in found] == [second.json()["id"], first_id]


async def test_concurrent_creates_with_one_name_make_one_session(any_stack: Stack) -> None:
    async with any_stack.client() as api:
        responses = await asyncio.gather(
            *(api.post("/v1/sessions", json={**BODY, "name": "burst"}) for _ in range(8))
        )
        codes = sorted(r.status_code for r in responses)
        assert codes == [201] + [409] * 7, [r.text for r in responses]
        (winner,) = [r.json()["id"] for r in responses if r.status_code == 201]
        assert {r.json()["session"] for r in responses if r.status_code == 409} == {winner}
        listed = (await api.get("/v1/sessions", params={"name": "burst"})).json()["items"]
        assert [s["id"] for s in listed] == [winner]


@pytest.mark.parametrize(
    ("params", "field", "allowed"),
    [
        ({"type": "foo"}, "type.0", "'batch', 'interactive' or 'inference'"),
        ({"status": "BOGUS"}, "status.0", "'PENDING'"),
        ({"status": ["RUNNING", "nope"]}, "status.1", "'SUCCEEDED'"),
    ],
)
async def test_unknown_filter_values_are_refused(
    stack: Stack, params: dict[str, Any], field: str, allowed: str
) -> None:
    await stack.submit(command=["true"])
    async with stack.client() as api:
        r = await api.get("/v1/sessions", params=params)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == field
    assert allowed in problem["detail"]
