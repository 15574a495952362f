"""Bad input: a 4xx RFC 7807 problem naming the field, and nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Stack

GOOD: dict[str, Any] = {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}}

CASES = [
    pytest.param({**GOOD, "comand": ["true"]}, 422, "comand", id="unknown-field"),
    pytest.param({**GOOD, "command": []}, 422, "command", id="empty-command"),
    pytest.param({**GOOD, "command": [""]}, 422, "command", id="blank-command"),
    pytest.param({**GOOD, "resources": {"cpu": "-1"}}, 422, "resources.cpu", id="negative-cpu"),
    pytest.param({**GOOD, "resources": {"mem": "lots"}}, 422, "resources.mem", id="bad-size"),
    # well-formed, but no node has it / nothing by that name exists: 409 / 404
    pytest.param({**GOOD, "resources": {"gpu": "1"}}, 409, "resources.gpu", id="unknown-slot"),
    pytest.param({**GOOD, "resources": {"cpu": "NaN"}}, 422, "resources.cpu", id="nan"),
    pytest.param({**GOOD, "image": "Not A/Valid::Image"}, 422, "image", id="bad-image"),
    pytest.param({**GOOD, "env": {"X": "y" * 70_000}}, 422, "env", id="oversized-env"),
    pytest.param({**GOOD, "env": {"1BAD": "x"}}, 422, "env", id="bad-env-name"),
    pytest.param({**GOOD, "priority": 101}, 422, "priority", id="priority-range"),
    pytest.param({**GOOD, "type": "daemon"}, 422, "type", id="unknown-type"),
    pytest.param({**GOOD, "starts_at": "next tuesday"}, 422, "starts_at", id="bad-start"),
    pytest.param(
        {**GOOD, "mounts": [{"source": "/etc", "target": "/mnt/etc"}]},
        403,  # well-formed; the operator's roots do not allow it
        "mounts.0.source",
        id="mount-outside-roots",
    ),
    pytest.param(
        {**GOOD, "mounts": [{"source": "relative", "target": "/mnt"}]},
        422,
        "mounts.0.source",
        id="relative-mount",
    ),
    pytest.param({**GOOD, "resource_group": "nope"}, 404, "resource_group", id="unknown-group"),
    pytest.param({**GOOD, "depends_on": ["0" * 36]}, 404, "depends_on", id="unknown-dependency"),
    pytest.param({**GOOD, "project": "ghost"}, 404, "project", id="unknown-project"),
]


async def _count(stack: Stack) -> int:
    async with stack.client() as api:
        return len((await api.get("/v1/sessions", params={"all": True})).json()["items"])


@pytest.mark.parametrize(("body", "status", "field"), CASES)
async def test_bad_input_is_refused_with_a_problem(
    stack: Stack, body: dict[str, Any], status: int, field: str
) -> None:
    async with stack.client() as api:
        r = await api.post("/v1/sessions", json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status
    assert problem["field"] == field
    assert problem["detail"]
    assert await _count(stack) == 0


async def test_malformed_json_is_a_problem(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert r.status_code == 422
    assert "JSON" in r.json()["detail"]
    assert await _count(stack) == 0


async def test_oversized_body_is_413(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions",
            content=b"x" * (9 * 1024 * 1024),
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"


async def test_unknown_route_and_bad_query_are_problems(stack: Stack) -> None:
    async with stack.client() as api:
        missing = await api.get("/v1/nothing-here")
        bad = await api.get("/v1/sessions", params={"status": "SLEEPING"})
    assert missing.status_code == 404
    assert missing.json()["title"] == "Not found"
    assert bad.status_code == 422
    assert bad.json()["field"] == "status.0"


async def test_good_input_is_accepted(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions",
            json={
                **GOOD,
                "image": "localhost/jobgate-python:3.11",
                "starts_at": "+5m",
                "priority": 80,
            },
        )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "PENDING"
    assert body["resources"] == {"cpu": "0.1", "mem": str(64 * 1024 * 1024)}
    assert body["starts_at"] > body["created_at"]
    assert r.headers["location"] == f"/v1/sessions/{body['id']}"


async def test_oversized_streamed_body_is_413(stack: Stack) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b"x" * (1024 * 1024)

    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions", content=chunks(), headers={"content-type": "application/json"}
        )
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"
    assert await _count(stack) == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "rule"),
    [
        pytest.param(
            "POST",
            "/v1/endpoints",
            {"name": "My_Model", "image": "localhost/app:1", "port": 8000},
            "name",
            "lower-case letters, digits and '-', 1-40 characters, starting and ending with "
            "a letter or digit",
            id="endpoint",
        ),
        pytest.param(
            "POST",
            "/v1/sessions",
            {**GOOD, "name": "-x"},
            "name",
            "letters, digits, '_', '.' and '-', 1-128 characters, starting with a letter or digit",
            id="session",
        ),
        pytest.param(
            "POST",
            "/v1/folders",
            {"name": "a b"},
            "name",
            "letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter or "
            "digit (or with one '.' before it, for a dot-folder)",
            id="folder",
        ),
        pytest.param(
            "POST",
            "/v1/projects",
            {"name": "vision!"},
            "name",
            "letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter or digit",
            id="project",
        ),
        pytest.param(
            "POST",
            "/v1/users",
            {"name": "Bob"},
            "name",
            "lower-case letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter",
            id="user",
        ),
        pytest.param(
            "POST",
            "/v1/projects/default/members",
            {"user": ""},
            "user",
            "lower-case letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter",
            id="member",
        ),
        pytest.param(
            "PUT",
            "/v1/resource-groups/-gpu",
            {},
            "name",
            "letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter or digit",
            id="group",
        ),
    ],
)
async def test_a_name_rule_is_said_in_words_not_as_a_regex(
    stack: Stack, method: str, path: str, body: dict[str, Any], field: str, rule: str
) -> None:
    async with stack.client() as api:
        r = await api.request(method, path, json=body)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == field
    assert problem["detail"] == f"{field}: must be {rule}"
    assert problem["errors"][0]["message"] == f"must be {rule}"
    assert "pattern" not in r.text


@pytest.mark.parametrize(
    ("attempt", "status"),
    [("0", 422), ("-1", 422), ("one", 422), ("2", 404)],
    ids=["zero", "negative", "not-a-number", "never-had"],
)
async def test_a_log_attempt_out_of_range_is_a_problem(
    stack: Stack, attempt: str, status: int
) -> None:
    """``attempt`` is 1 or more (422 naming it); one the session never had is 404."""
    async with stack.client() as api:
        created = await api.post("/v1/sessions", json={**GOOD, "starts_at": "+5m"})
        path = f"/v1/sessions/{created.json()['id']}/logs"
        for follow in ("false", "true"):
            r = await api.get(path, params={"attempt": attempt, "follow": follow})
            assert r.status_code == status, r.text
            assert r.headers["content-type"] == "application/problem+json"
            if status == 422:
                assert r.json()["field"] == "attempt"
            else:
                assert "has no attempt 2: its latest is 1" in r.json()["detail"]
        assert (await api.get(path, params={"attempt": "1"})).text == ""
