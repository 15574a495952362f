"""Budgets through the real gateway and scheduler: a spent project budget keeps its new
sessions PENDING with the reason (in the API and ``jobgate sessions show``) while
another project's session runs, and lets them run once raised; a spent gpu budget holds
no cpu-only session; nonsense is a 422 naming the field; only admins set budgets and
users read only their own and their projects'; the 80 % and 100 % webhooks go out once
per crossing (docs/fair-share.md, Budgets).

Past use is written as the accounting writes it (a ``usage`` row, gateway/db/usage.py),
with whole-minute times, so the expected "until" follows from them exactly.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from harness import Stack, started_stack
from waiting import until

from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import Usage
from jobgate.localnet import free_port

LONG = {"JOBGATE_SIM_DURATION": "600"}
CPU1 = {"cpu": "1", "mem": "64m"}


async def _admin(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    async with stack.client() as api:
        r = await api.request(method, path, json=body)
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


async def _member(stack: Stack, user: str, project: str) -> tuple[str, str, str]:
    """A user (created) in a project (created if new): its key, its id, the project's id."""
    key = await stack.create_user(user)
    async with stack.client() as api:
        r = await api.post("/v1/projects", json={"name": project})
        assert r.status_code in (201, 409), r.text
        project_id = next(
            p["id"] for p in (await api.get("/v1/projects")).json() if p["name"] == project
        )
        r = await api.post(f"/v1/projects/{project}/members", json={"user": user})
        assert r.status_code < 300, r.text
    async with stack.client(key) as api:
        user_id = (await api.get("/v1/users/me")).json()["id"]
    return key, user_id, project_id


async def _past_usage(
    stack: Stack,
    owner_id: str,
    project_id: str,
    slots: dict[str, str],
    start: datetime,
    end: datetime,
) -> None:
    """An accounting record of *slots* held from *start* to *end*."""
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with create_session_factory(engine)() as db, db.begin():
            db.add(
                Usage(
                    kernel_id=str(uuid.uuid4()),
                    attempt=1,
                    session_id=str(uuid.uuid4()),
                    owner_id=owner_id,
                    project_id=project_id,
                    resource_group="default",
                    node_id="n0",
                    slots=slots,
                    started_at=start,
                    ended_at=end,
                )
            )
    finally:
        await engine.dispose()


def _minute(ago: timedelta) -> datetime:
    return (datetime.now(UTC) - ago).replace(second=0, microsecond=0)


async def test_a_spent_project_budget_holds_its_sessions_while_another_project_runs(
    any_stack: Stack,
) -> None:
    stack = any_stack
    alice, alice_id, ml_a = await _member(stack, "alice", "ml-a")
    bob, _, _ = await _member(stack, "bob", "ml-b")
    end = _minute(timedelta(minutes=2))
    start = end - timedelta(hours=3)
    await _past_usage(stack, alice_id, ml_a, {"cpu": "4"}, start, end)  # 12 cpu-hours
    budget = await _admin(
        stack,
        "PUT",
        "/v1/budgets/project/ml-a",
        {"period": "day", "window": "rolling", "limits": {"cpu": 10}},
    )
    # 12 of 10 spent; back under 10 once 2 of those hours (30 minutes at 4 cpus) left the
    # last 24 hours: 24 h 30 min after the record started
    free = start + timedelta(hours=24, minutes=30)
    assert budget["used"] == {"cpu": 12.0}
    assert budget["percent"] == 120.0
    assert datetime.fromisoformat(budget["exhausted_until"]) == free

    await stack.start_worker(worker_runtime="sim", worker_cpu="4")
    held = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    other = await stack.submit(bob, command=["x"], env=LONG, resources=CPU1, project="ml-b")
    reason = f"budget of project ml-a exhausted until {free:%Y-%m-%d %H:%M} UTC (cpu)"
    seen = await stack.wait_pending(held["id"], reason)
    assert seen["pending_reason"] == reason
    await stack.wait_status(other["id"], {"RUNNING"})
    shown = await stack.cli("sessions", "show", held["id"], key=alice)
    assert reason in shown
    assert (await stack.get(held["id"]))["status"] == "PENDING"

    # alice reads her project's budget; the CLI lists it
    listed = json.loads(await stack.cli("usage", "budgets", "-o", "json", key=alice))
    assert [(b["scope"], b["subject"], b["percent"]) for b in listed] == [
        ("project", "ml-a", 120.0)
    ]

    # an admin raises it (PATCH: the rest stays): the session runs
    raised = await stack.cli(
        "admin", "budgets", "set", "project", "ml-a", "--limit", "cpu=20", "-o", "json"
    )
    assert json.loads(raised)["window"] == "rolling"
    await stack.wait_status(held["id"], {"RUNNING"})


async def test_a_spent_gpu_budget_lets_cpu_only_sessions_run(stack: Stack) -> None:
    alice, alice_id, ml_a = await _member(stack, "alice", "ml-a")
    end = _minute(timedelta(minutes=2))
    start = end - timedelta(hours=3)
    await _past_usage(stack, alice_id, ml_a, {"cuda.shares": "1"}, start, end)  # 3 gpu-hours
    budget = await _admin(
        stack,
        "PUT",
        "/v1/budgets/project/ml-a",
        {"period": "day", "window": "rolling", "limits": {"gpu": 2, "cpu": 100}},
    )
    assert budget["used"] == {"gpu": 3.0, "cpu": 0.0}
    assert budget["exhausted_until"] is not None
    await stack.start_worker(worker_runtime="sim", worker_cpu="4")
    cpu_only = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    await stack.wait_status(cpu_only["id"], {"RUNNING"})


async def test_a_member_sub_limit_holds_that_member_only(stack: Stack) -> None:
    alice, alice_id, ml_a = await _member(stack, "alice", "ml-a")
    bob, _, _ = await _member(stack, "bob", "ml-a")
    end = _minute(timedelta(minutes=2))
    await _past_usage(stack, alice_id, ml_a, {"cpu": "2"}, end - timedelta(hours=2), end)
    said = await stack.cli(
        "admin",
        "budgets",
        "set",
        "project",
        "ml-a",
        "--period",
        "week",
        # the last 7 days: a calendar week begun in the last two hours (Monday 00:00-02:00
        # UTC) would hold only part of the usage below, and alice would not be spent
        "--window",
        "rolling",
        "--limit",
        "cpu=100",
        "--member",
        "alice:cpu=4",
        "--member",
        "bob:cpu=50",
    )
    assert "ml-a/alice" in said
    await stack.start_worker(worker_runtime="sim", worker_cpu="4")
    held = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    runs = await stack.submit(bob, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    await stack.wait_pending(held["id"], "budget of user alice in project ml-a exhausted until ")
    await stack.wait_status(runs["id"], {"RUNNING"})
    # removing the budget lets alice run
    assert "removed" in await stack.cli("admin", "budgets", "rm", "project", "ml-a")
    await stack.wait_status(held["id"], {"RUNNING"})


async def test_budget_nonsense_is_a_422_naming_the_field(stack: Stack) -> None:
    alice, _, _ = await _member(stack, "alice", "ml-a")
    await _member(stack, "bob", "ml-a")
    await stack.create_user("carol")  # no member of ml-a
    good = {"period": "day", "limits": {"gpu": 10}}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("PUT", {**good, "limits": {"gpu": -1}}, "limits.gpu"),
        ("PUT", {**good, "limits": {"gpu": 0}}, "limits.gpu"),
        ("PUT", {**good, "limits": {"gpus": 1}}, "limits.gpus"),
        ("PUT", {**good, "period": "year"}, "period"),
        ("PUT", {**good, "window": "sliding"}, "window"),
        ("PUT", {**good, "members": {"alice": {"gpu": 11}}}, "members"),
        ("PUT", {**good, "members": {"alice": {"cpu": 1}}}, "members.alice.cpu"),
        ("PUT", {**good, "members": {"alice": {"gpu": 6}, "bob": {"gpu": 5}}}, "members"),
    ]
    async with stack.client() as admin:
        for method, body, where in cases:
            r = await admin.request(method, "/v1/budgets/project/ml-a", json=body)
            assert r.status_code == 422, (body, r.text)
            problem = r.json()
            assert problem["field"] == where, (body, problem)
            assert r.headers["content-type"].startswith("application/problem+json")
        # a member who is no user, or not in the project: the state, not the input
        for name, status in (("carol", 409), ("nobody", 404)):
            r = await admin.put(
                "/v1/budgets/project/ml-a", json={**good, "members": {name: {"gpu": 1}}}
            )
            assert r.status_code == status, r.text
            assert r.json()["field"] == f"members.{name}"
        # a patch that would make a budget without a period: 409, there is none to patch
        r = await admin.patch("/v1/budgets/project/ml-a", json={"limits": {"gpu": 5}})
        assert r.status_code == 409, r.text
        assert r.json()["field"] == "period"
        assert (await admin.get("/v1/budgets")).json() == []  # nothing half-written
        r = await admin.put(
            "/v1/budgets/project/ml-a", json={**good, "members": {"alice": {"gpu": 6}}}
        )
        assert r.status_code == 200, r.text
        # a patch that pushes the members over the project's budget is refused whole
        r = await admin.patch("/v1/budgets/project/ml-a", json={"limits": {"gpu": 5}})
        assert r.status_code == 422
        assert r.json()["field"] == "members"
        assert (await admin.get("/v1/budgets/project/ml-a")).json()["limits"] == {"gpu": 10.0}
        r = await admin.patch("/v1/budgets/project/ml-a", json={"limits": {"gpu": None}})
        assert r.status_code == 409, r.text  # no limit left: remove the budget instead
        assert r.json()["field"] == "limits"
        r = await admin.put("/v1/budgets/user/nobody", json=good)
        assert r.status_code == 404
        assert (await admin.delete("/v1/budgets/user/alice")).status_code == 404
        r = await admin.put("/v1/budgets/user/alice", json={"period": "day", "limits": {"cpu": 2}})
        assert r.status_code == 200, r.text

    # a session that would spend a whole budget within its first hour: 422 at submit
    await stack.start_worker(worker_runtime="sim", worker_cpu="8")
    async with stack.client(alice) as api:
        r = await api.post(
            "/v1/sessions", json={"command": ["x"], "resources": {"cpu": "4", "mem": "64m"}}
        )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "resources.cpu"
    assert "budget: user alice may spend 2 cpu-hours per day" in r.json()["detail"]


async def test_only_admins_set_budgets_and_users_read_only_theirs(stack: Stack) -> None:
    alice, _, _ = await _member(stack, "alice", "ml-a")
    await _member(stack, "bob", "ml-b")
    body = {"period": "month", "limits": {"gpu": 100}}
    for path in (
        "/v1/budgets/project/ml-a",
        "/v1/budgets/project/ml-b",
        "/v1/budgets/user/alice",
        "/v1/budgets/user/bob",
    ):
        await _admin(stack, "PUT", path, body)
    async with stack.client(alice) as api:
        # alice cannot raise her own budget, nor her project's, nor remove them
        for method in ("PUT", "PATCH"):
            for path in ("/v1/budgets/user/alice", "/v1/budgets/project/ml-a"):
                r = await api.request(
                    method, path, json={"limits": {"gpu": 1000}, "period": "month"}
                )
                assert r.status_code == 403, (method, path, r.text)
        assert (await api.delete("/v1/budgets/user/alice")).status_code == 403
        # she reads hers and her project's; not bob's, not ml-b's, not whether one exists
        assert (await api.get("/v1/budgets/user/alice")).status_code == 200
        assert (await api.get("/v1/budgets/project/ml-a")).status_code == 200
        for path in (
            "/v1/budgets/user/bob",
            "/v1/budgets/project/ml-b",
            "/v1/budgets/project/nope",
        ):
            r = await api.get(path)
            assert r.status_code == 403, (path, r.text)
        mine = {(b["scope"], b["subject"]) for b in (await api.get("/v1/budgets")).json()}
        assert mine == {("user", "alice"), ("project", "ml-a")}
    async with stack.client() as admin:
        assert len((await admin.get("/v1/budgets")).json()) == 4
        assert (await admin.get("/v1/budgets/user/alice")).json()["limits"] == {"gpu": 100.0}


@dataclass
class Receiver:
    """A webhook receiver on loopback: every event it got, by type."""

    port: int = field(default_factory=free_port)
    got: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.got.append(json.loads(await request.read()))
        return web.Response(text="ok")

    def events(self) -> list[tuple[str, int]]:
        return [(e["type"], e["data"]["percent"]) for e in self.got]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", r.port).start()
    try:
        yield r
    finally:
        await runner.cleanup()


@pytest.fixture
async def quick_stack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with started_stack(
        pg_url,
        redis_url,
        tmp_path,
        webhook_allow_cidrs=["127.0.0.0/8"],
        webhook_poll_s=0.05,
        budget_check_s=0.5,
    ) as s:
        yield s


async def test_a_group_that_stops_at_budget_stops_the_spent_projects_sessions(
    quick_stack: Stack,
) -> None:
    stack = quick_stack
    await _admin(
        stack, "PUT", "/v1/resource-groups/default", {"scheduler": {"stop_at_budget": True}}
    )
    alice, alice_id, ml_a = await _member(stack, "alice", "ml-a")
    bob, _, _ = await _member(stack, "bob", "ml-b")
    await stack.start_worker(worker_runtime="sim", worker_cpu="4")
    spends = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    other = await stack.submit(bob, command=["x"], env=LONG, resources=CPU1, project="ml-b")
    await stack.wait_status(spends["id"], {"RUNNING"})
    await stack.wait_status(other["id"], {"RUNNING"})
    end = _minute(timedelta(minutes=2))
    await _past_usage(stack, alice_id, ml_a, {"cpu": "4"}, end - timedelta(hours=3), end)
    await _admin(
        stack,
        "PUT",
        "/v1/budgets/project/ml-a",
        {"period": "day", "window": "rolling", "limits": {"cpu": 10}},
    )
    stopped = await stack.wait_status(spends["id"], {"TERMINATED"})
    assert stopped["status_reason"].startswith("budget of project ml-a exhausted until ")
    assert (await stack.get(other["id"]))["status"] == "RUNNING"


async def test_soft_limits_alert_once_per_crossing(quick_stack: Stack, receiver: Receiver) -> None:
    stack = quick_stack
    alice, alice_id, ml_a = await _member(stack, "alice", "ml-a")
    async with stack.client(alice) as api:
        r = await api.post(
            "/v1/webhooks",
            json={
                "url": f"http://127.0.0.1:{receiver.port}/budgets",
                "events": ["budget.warning", "budget.exhausted"],
                "project": "ml-a",
            },
        )
        assert r.status_code == 201, r.text
    end = _minute(timedelta(minutes=2))
    await _past_usage(stack, alice_id, ml_a, {"cpu": "1"}, end - timedelta(hours=8.5), end)
    # 8.5 of 10 cpu-hours: past 80 % as soon as it is set
    await _admin(
        stack,
        "PUT",
        "/v1/budgets/project/ml-a",
        {"period": "day", "window": "rolling", "limits": {"cpu": 10}},
    )
    await until(lambda: receiver.got or None, timeout=20, what="the 80 % webhook")
    warning = receiver.got[0]
    assert warning["type"] == "budget.warning"
    assert warning["data"]["subject"] == "ml-a"
    assert warning["data"]["percent"] == 80
    assert warning["data"]["used"] == {"cpu": 8.5}
    assert warning["data"]["exhausted_until"] is None

    # two more hours are accounted: the scheduler's next check finds 100 %
    await _past_usage(stack, alice_id, ml_a, {"cpu": "2"}, end - timedelta(hours=1), end)
    await until(lambda: len(receiver.got) >= 2 or None, timeout=20, what="the 100 % webhook")
    exhausted = receiver.got[1]
    assert exhausted["type"] == "budget.exhausted"
    assert exhausted["data"]["percent"] == 100
    assert exhausted["data"]["exhausted_until"] is not None

    # later checks find the same level: nothing more goes out
    async def checked_again() -> bool | None:
        b = await _admin(stack, "GET", "/v1/budgets/project/ml-a")
        seen = datetime.fromisoformat(b["checked_at"])
        return (
            True
            if seen > datetime.fromisoformat(exhausted["timestamp"]) + timedelta(seconds=2)
            else None
        )

    await until(checked_again, timeout=20, what="two more checks")
    assert receiver.events() == [("budget.warning", 80), ("budget.exhausted", 100)]


async def test_writes_that_create_one_budget_at_once_all_succeed(stack: Stack) -> None:
    """No row to lock yet: the writes that lose the race run again as changes."""
    await _member(stack, "carol", "race")
    async with stack.client() as admin:
        answers = await asyncio.gather(
            *(
                admin.put("/v1/budgets/project/race", json={"period": "day", "limits": {"gpu": n}})
                for n in range(1, 7)
            )
        )
        assert [r.status_code for r in answers] == [200] * 6, [r.text for r in answers]
        final = (await admin.get("/v1/budgets/project/race")).json()
    assert final["limits"]["gpu"] in range(1, 7)
