"""EventHandler: worker events become statuses, freed allocations and after-commit effects.

Each case starts from rows in a real (SQLite) database, hands the handler batches of
events one transaction at a time, and checks the rows and the outbox: what Redis would
get. Events arrive late, twice and out of order; the handler must keep statuses moving
forward, free an allocation once, and stop containers of sessions that are over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from gateway_rows import NO_REDIS, Rows

from contract.messages import EventBatch, KernelEvent, KernelReport, NodeInfo, WireApp
from gateway.db.engine import SessionFactory
from gateway.db.models import Endpoint, Kernel, Node, Session
from gateway.domain.retry import Backoff
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.loops.events import EventHandler, only_from
from plugins.resources import ResourceSlots

S = SessionStatus
K = KernelStatus


def ev(kind: str, ts: float, kernel: str = "s1-k0", **more: Any) -> KernelEvent:
    return KernelEvent.model_validate(
        {"kind": kind, "kernel_id": kernel, "session_id": "s1", "node_id": "n1", "ts": ts, **more}
    )


@dataclass
class Case:
    session: S
    kernels: list[K]
    batches: list[list[KernelEvent]]
    status: S  # the session's status afterwards
    kernel_status: list[K]
    history: list[str]  # statuses written to its history, in order
    cpus_taken: str = "0"  # on n1 afterwards
    stops: list[str] = field(default_factory=list)  # kernels that get a stop job
    exit_code: int | None = None
    stop_when: str = "main-done"


CASES = [
    pytest.param(
        Case(
            S.SCHEDULED,
            [K.SCHEDULED],
            [[ev("preparing", 1)], [ev("running", 2)], [ev("exited", 3, exit_code=0)]],
            S.SUCCEEDED,
            [K.EXITED],
            ["PREPARING", "RUNNING", "SUCCEEDED"],
            exit_code=0,
        ),
        id="in-order-batch-succeeds",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [K.SCHEDULED],
            [[ev("running", 2), ev("preparing", 1)]],
            S.RUNNING,
            [K.RUNNING],
            ["PREPARING", "RUNNING"],
            cpus_taken="1",
        ),
        id="one-batch-out-of-order-is-sorted-by-worker-time",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [K.SCHEDULED],
            [[ev("running", 2)], [ev("preparing", 1)]],
            S.RUNNING,
            [K.RUNNING],
            ["PREPARING", "RUNNING"],
            cpus_taken="1",
        ),
        id="late-preparing-changes-nothing",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING],
            [[ev("exited", 3, exit_code=2)], [ev("running", 2)]],
            S.FAILED,
            [K.EXITED],
            ["FAILED"],
            stops=["s1-k0"],
            exit_code=2,
        ),
        id="late-running-after-exit-stops-the-container",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING],
            [[ev("exited", 3, exit_code=0)], [ev("exited", 3, exit_code=0)]],
            S.SUCCEEDED,
            [K.EXITED],
            ["SUCCEEDED"],
            exit_code=0,
        ),
        id="duplicate-exit-frees-once",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [K.SCHEDULED],
            [[ev("start_failed", 1, message="no such image")]],
            S.ERROR,
            [K.FAILED],
            ["ERROR"],
        ),
        id="start-failed-is-error",
    ),
    pytest.param(
        Case(S.RUNNING, [K.RUNNING], [[ev("lost", 5)]], S.ERROR, [K.FAILED], ["ERROR"]),
        id="lost-is-error",
    ),
    pytest.param(
        Case(
            S.TERMINATING, [K.STOPPING], [[ev("lost", 5)]], S.TERMINATED, [K.FAILED], ["TERMINATED"]
        ),
        id="lost-while-stopping-is-terminated",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [K.STOPPING, K.STOPPING],
            [[ev("lost", 3, kernel="s1-k1")], [ev("exited", 4, exit_code=143)]],
            S.TERMINATED,
            [K.EXITED, K.FAILED],
            ["TERMINATED"],
            exit_code=143,
        ),
        id="cluster-kernel-lost-while-stopping-ends-with-the-last",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING],
            [[ev("exited", 4, exit_code=143, requested_stop=True, message="n1 shut down")]],
            S.TERMINATED,
            [K.EXITED],
            ["TERMINATING", "TERMINATED"],
            exit_code=143,
        ),
        id="node-stopped-it-on-its-own",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [K.STOPPING],
            [[ev("exited", 4, exit_code=143, requested_stop=True)], [ev("running", 2)]],
            S.TERMINATED,
            [K.EXITED],
            ["TERMINATED"],
            stops=["s1-k0"],
            exit_code=143,
        ),
        id="stopped-on-request-then-a-late-running",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [K.STOPPING],
            [[ev("running", 2)]],
            S.TERMINATING,
            [K.STOPPING],
            [],
            cpus_taken="1",
            stops=["s1-k0"],
        ),
        id="running-never-undoes-stopping",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [K.SCHEDULED],
            [[ev("not_started", 2)], [ev("not_started", 3)]],
            S.CANCELLED,
            [K.CANCELLED],
            ["CANCELLED"],
        ),
        id="stopped-before-it-started-twice",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING, K.RUNNING],
            [[ev("lost", 3, kernel="s1-k1")]],
            S.ERROR,
            [K.STOPPING, K.FAILED],
            ["ERROR"],
            cpus_taken="1",
            stops=["s1-k0"],
        ),
        id="cluster-kernel-lost-the-other-is-stopped",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING, K.RUNNING],
            [[ev("exited", 3, exit_code=1, kernel="s1-k1")], [ev("exited", 4, exit_code=143)]],
            S.FAILED,
            [K.EXITED, K.EXITED],
            ["FAILED"],
            stops=["s1-k0"],
            exit_code=1,
        ),
        id="cluster-a-failing-sub-ends-it-naming-the-sub-and-main1-is-stopped",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING, K.RUNNING],
            [[ev("exited", 3, exit_code=0)], [ev("exited", 4, exit_code=143, kernel="s1-k1")]],
            S.SUCCEEDED,
            [K.EXITED, K.EXITED],
            ["SUCCEEDED"],
            stops=["s1-k1"],
            exit_code=0,
        ),
        id="cluster-main-done-main1-ending-ends-it-and-stops-the-subs",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING, K.RUNNING],
            [[ev("exited", 3, exit_code=0)]],
            S.RUNNING,
            [K.EXITED, K.RUNNING],
            [],
            cpus_taken="1",
            stop_when="all-done",
        ),
        id="cluster-all-done-runs-on-after-main1",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [K.SCHEDULED, K.SCHEDULED],
            [[ev("running", 2)], [ev("running", 3, kernel="s1-k1")]],
            S.RUNNING,
            [K.RUNNING, K.RUNNING],
            ["PREPARING", "RUNNING"],
            cpus_taken="2",
        ),
        id="cluster-runs-when-its-last-kernel-does",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [K.RUNNING],
            [[ev("exited", 3, kernel="nobody")]],
            S.RUNNING,
            [K.RUNNING],
            [],
            cpus_taken="1",
        ),
        id="unknown-kernel-is-ignored",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_kernel_events(db: SessionFactory, rows: Rows, case: Case) -> None:
    placed = [k for k in case.kernels if k != K.PENDING]
    await rows.node("n1", kernels=len(placed))
    ids = await rows.session(
        case.session, [(k, "n1") for k in case.kernels], stop_when=case.stop_when
    )
    handler = EventHandler(db, NO_REDIS)
    stops: list[str] = []
    for batch in case.batches:
        outbox = await handler.commit(EventBatch(events=batch))
        stops += [job.kernel_id for _, job in outbox.stops]
    session = await rows.one(Session, "s1")
    assert session.status == case.status
    assert [(await rows.one(Kernel, k)).status for k in ids] == case.kernel_status
    assert await rows.history() == case.history
    assert await rows.cpus_taken() == case.cpus_taken
    assert stops == case.stops
    assert session.exit_code == case.exit_code


async def test_effects_wait_for_the_commit_and_name_what_changed(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.RUNNING, [(K.RUNNING, "n1")], resource_group="default")
    outbox = await EventHandler(db, NO_REDIS).commit(
        EventBatch(events=[ev("exited", 3, exit_code=0)])
    )
    assert outbox.live == [
        (
            "s1",
            {
                "type": "status",
                "status": "SUCCEEDED",
                "reason": "exited with code 0",
                "exit_code": 0,
            },
        )
    ]
    assert outbox.schedule == {"default"}  # its place is free
    assert (outbox.stops, outbox.starts, outbox.routes) == ([], [], [])


async def test_progress_is_a_live_event_and_the_reason(db: SessionFactory, rows: Rows) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.PREPARING, [(K.PREPARING, "n1")])
    outbox = await EventHandler(db, NO_REDIS).commit(
        EventBatch(events=[ev("progress", 1, message="pulling 40%")])
    )
    assert outbox.live == [("s1", {"type": "progress", "message": "pulling 40%"})]
    assert (await rows.one(Session, "s1")).status_reason == "pulling 40%"


async def test_an_interactive_session_gets_its_route_and_loses_it(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.PREPARING, [(K.PREPARING, "n1")], type="interactive")
    handler = EventHandler(db, NO_REDIS)
    apps = [WireApp(name="jupyter", port=8888), WireApp(name="board", port=6006)]
    ports = {"jupyter": 40001, "board": 40002}
    running = await handler.commit(EventBatch(events=[ev("running", 2, ports=ports, apps=apps)]))
    (route,) = running.routes
    assert (route.session_id, route.apps["jupyter"].upstream) == ("s1", "http://127.0.0.1:40001")
    # the proxy presents the app secret as each app checks it (the secret is not in Redis)
    assert [(n, a.credential) for n, a in route.apps.items()] == [
        ("jupyter", "token"),
        ("board", "header"),
    ]
    assert "credential" in route.to_json()
    assert "secret" not in route.to_json()
    ended = await handler.commit(EventBatch(events=[ev("exited", 3, exit_code=0)]))
    assert ended.ended_routes == [("s1", "u1")]
    assert ended.routes == []


async def test_a_replica_that_changes_status_pokes_its_endpoints_controller(
    db: SessionFactory, rows: Rows
) -> None:
    """RUNNING (or an end) of an endpoint's replica wakes the controller at once: it
    writes the route with the replica's address without waiting for its next tick."""
    await rows.node("n1", kernels=2)
    await rows.session(S.PREPARING, [(K.PREPARING, "n1")])  # the owner's user row
    await rows.add(Endpoint(id="e1", name="chat", owner_id=rows.user))
    await rows.session(
        S.PREPARING, [(K.PREPARING, "n1")], session_id="r1", type="inference", endpoint_id="e1"
    )
    handler = EventHandler(db, NO_REDIS)
    running = await handler.commit(EventBatch(events=[ev("running", 2, kernel="r1-k0")]))
    assert running.endpoints == {"e1"}
    progress = await handler.commit(
        EventBatch(events=[ev("progress", 3, kernel="r1-k0", message="warming up")])
    )
    assert progress.endpoints == set()  # no new status: nothing to react to
    plain = await handler.commit(EventBatch(events=[ev("running", 2)]))
    assert plain.endpoints == set()  # not a replica
    ended = await handler.commit(EventBatch(events=[ev("exited", 4, kernel="r1-k0", exit_code=1)]))
    assert ended.endpoints == {"e1"}


def registration(*kernels: str, node_id: str = "n1", ts: float | None = None) -> NodeInfo:
    return NodeInfo(
        node_id=node_id,
        hostname=node_id,
        address="127.0.0.1",
        queue=f"jobgate:node:{node_id}",
        runtime="sim",
        capacity=ResourceSlots.parse({"cpu": "8", "mem": "16g"}).to_json(),
        kernels=[KernelReport(kernel_id=k, session_id=k.split("-")[0]) for k in kernels],
        ts=ts,
    )


async def test_registration_adds_the_node_and_asks_for_a_pass(
    db: SessionFactory, rows: Rows
) -> None:
    outbox = await EventHandler(db, NO_REDIS).commit(EventBatch(node=registration(node_id="n9")))
    node = await rows.one(Node, "n9")
    assert (node.queue, node.runtime) == ("jobgate:node:n9", "sim")
    assert outbox.schedule == {"default"}


REGISTRATIONS = [
    pytest.param(S.RUNNING, K.RUNNING, ("s1-k0",), S.RUNNING, K.RUNNING, [], id="still-there"),
    pytest.param(S.RUNNING, K.RUNNING, (), S.ERROR, K.FAILED, [], id="vanished-is-lost"),
    pytest.param(
        S.TERMINATING, K.STOPPING, (), S.TERMINATED, K.EXITED, [], id="vanished-while-stopping"
    ),
    pytest.param(
        S.SUCCEEDED, K.EXITED, ("s1-k0",), S.SUCCEEDED, K.EXITED, ["s1-k0"], id="orphan-stopped"
    ),
]


@pytest.mark.parametrize(
    ("status", "kernel", "reported", "status_after", "kernel_after", "stops"), REGISTRATIONS
)
async def test_a_worker_registering_again_settles_its_kernels(
    db: SessionFactory,
    rows: Rows,
    status: S,
    kernel: K,
    reported: tuple[str, ...],
    status_after: S,
    kernel_after: K,
    stops: list[str],
) -> None:
    await rows.node("n1", kernels=0 if kernel == K.EXITED else 1)
    await rows.session(status, [(kernel, "n1")])
    outbox = await EventHandler(db, NO_REDIS).commit(EventBatch(node=registration(*reported)))
    assert (await rows.one(Session, "s1")).status == status_after
    assert (await rows.one(Kernel, "s1-k0")).status == kernel_after
    assert [job.kernel_id for _, job in outbox.stops] == stops
    assert await rows.cpus_taken() == ("1" if kernel_after in (K.RUNNING,) else "0")


async def test_a_kernel_started_after_the_worker_registered_is_not_taken_for_lost(
    db: SessionFactory, rows: Rows
) -> None:
    """The worker restarted and registered (holding nothing), then took the start job
    waiting in its queue: the kernel's "preparing" and "running" are handled before its
    registration (batches run concurrently; or the registration is handled again after
    a gateway crash). The kernel was never in that list: it runs on, and ends as its
    command did (the chaos test's "not on c1 any more" ERROR for a command that ran)."""
    await rows.node("n1", kernels=1)
    await rows.session(S.SCHEDULED, [(K.SCHEDULED, "n1")])
    listed = registration(ts=time.time() - 1.0)  # its worker listed its kernels: none
    handler = EventHandler(db, NO_REDIS)
    await handler.commit(EventBatch(events=[ev("preparing", time.time())]))
    await handler.commit(EventBatch(events=[ev("running", time.time())]))
    outbox = await handler.commit(EventBatch(node=listed))
    assert (await rows.one(Session, "s1")).status == S.RUNNING
    assert (await rows.one(Kernel, "s1-k0")).status == K.RUNNING
    assert outbox.stops == []
    await handler.commit(EventBatch(events=[ev("exited", time.time(), exit_code=2)]))
    session = await rows.one(Session, "s1")
    assert (session.status, session.exit_code) == (S.FAILED, 2)


async def test_a_registration_still_ends_a_kernel_that_vanished_before_it(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.RUNNING, [(K.RUNNING, "n1")])
    await EventHandler(db, NO_REDIS).commit(EventBatch(node=registration(ts=time.time() + 1.0)))
    session = await rows.one(Session, "s1")
    assert (session.status, session.status_reason) == (
        S.ERROR,
        "not on n1 any more when its worker registered again",
    )
    assert await rows.cpus_taken() == "0"


@pytest.mark.parametrize("attempt", [1, None], ids=["same-attempt", "older-worker"])
async def test_an_end_the_registration_carries_wins_whatever_its_clock_says(
    db: SessionFactory, rows: Rows, attempt: int | None
) -> None:
    """The kernel ended while no worker ran; its end comes back with the registration,
    stamped by a worker clock ahead of the database's: it ends as its command did, not
    lost."""
    await rows.node("n1", kernels=1)
    await rows.session(S.RUNNING, [(K.RUNNING, "n1")])
    ended = ev("exited", time.time() + 60.0, exit_code=2, attempt=attempt)
    batch = EventBatch(node=registration(ts=time.time() + 61.0), events=[ended])
    await EventHandler(db, NO_REDIS).commit(batch)
    session = await rows.one(Session, "s1")
    assert (session.status, session.exit_code) == (S.FAILED, 2)
    assert (await rows.one(Kernel, "s1-k0")).status == K.EXITED


LATE_END = "attempt 1 on n1 ended 0 after the node returned"
FENCED = [
    pytest.param(
        [ev("exited", 5, exit_code=0, attempt=1)], [], [LATE_END], id="late-exit-of-attempt-1"
    ),
    pytest.param(
        [ev("exited", 5, exit_code=0, attempt=1), ev("exited", 5, exit_code=0, attempt=1)],
        [],
        [LATE_END],
        id="late-exit-twice-noted-once",
    ),
    pytest.param(
        [ev("exited", 5, exit_code=143, requested_stop=True, attempt=1)],
        [],
        ["attempt 1 on n1 ended 143 (stopped) after the node returned"],
        id="stopped-attempt-1-ends",
    ),
    pytest.param([ev("lost", 5, attempt=1)], [], [], id="late-lost-of-attempt-1"),
    pytest.param([ev("running", 5, attempt=1)], [("n1", 1)], [], id="attempt-1-still-runs"),
    pytest.param([ev("preparing", 5, attempt=1)], [("n1", 1)], [], id="attempt-1-late-start"),
    pytest.param(
        [ev("start_failed", 5, message="Slurm did not start it", deferred=True, attempt=1)],
        [],
        [],
        id="late-deferral-of-attempt-1",
    ),
]


@pytest.mark.parametrize(("events", "stops", "notes"), FENCED)
async def test_events_of_a_superseded_attempt_are_fenced_off(
    db: SessionFactory,
    rows: Rows,
    events: list[KernelEvent],
    stops: list[tuple[str, int]],
    notes: list[str],
) -> None:
    """Attempt 2 runs on n2 after n1 was lost: n1's late events for attempt 1 change
    nothing, an attempt 1 that still runs there is stopped (that attempt only), and the
    end of attempt 1 is noted in the history, once, without moving the session."""
    await rows.node("n1")
    await rows.node("n2", kernels=1)
    await rows.session(S.RUNNING, [(K.RUNNING, "n2")])
    async with db() as s, s.begin():
        kernel = await s.get(Kernel, "s1-k0")
        assert kernel is not None
        kernel.attempt = 2
    outbox = await EventHandler(db, NO_REDIS).commit(EventBatch(events=events))
    await EventHandler(db, NO_REDIS).commit(EventBatch(events=events))  # a repeat: the same
    session, kernel = await rows.one(Session, "s1"), await rows.one(Kernel, "s1-k0")
    assert (session.status, kernel.status, kernel.attempt, kernel.node_id) == (
        S.RUNNING,
        K.RUNNING,
        2,
        "n2",
    )
    assert await rows.history_entries() == [("RUNNING", "RUNNING", note) for note in notes]
    assert await rows.cpus_taken("n2") == "1"
    assert [(job.node_id, job.attempt) for _, job in outbox.stops] == stops
    assert [q for q, _ in outbox.stops] == [f"jobgate:node:{n}" for n, _ in stops]
    # the current attempt's events still count
    done = ev("exited", 6, exit_code=0, attempt=2, node_id="n2")
    await EventHandler(db, NO_REDIS).commit(EventBatch(events=[done]))
    assert (await rows.one(Session, "s1")).status == S.SUCCEEDED


async def test_a_returning_node_with_a_superseded_attempt_stops_it(
    db: SessionFactory, rows: Rows
) -> None:
    """n1 comes back still running attempt 1, which the gateway moved to n2 as attempt 2:
    a stop job for attempt 1 on n1; the session on n2 is untouched."""
    await rows.node("n1")
    await rows.node("n2", kernels=1)
    await rows.session(S.RUNNING, [(K.RUNNING, "n2")])
    async with db() as s, s.begin():
        kernel = await s.get(Kernel, "s1-k0")
        assert kernel is not None
        kernel.attempt = 2
    info = registration().model_copy(
        update={"kernels": [KernelReport(kernel_id="s1-k0", session_id="s1", attempt=1)]}
    )
    outbox = await EventHandler(db, NO_REDIS).commit(EventBatch(node=info))
    assert [(q, j.kernel_id, j.attempt) for q, j in outbox.stops] == [
        ("jobgate:node:n1", "s1-k0", 1)
    ]
    assert (await rows.one(Session, "s1")).status == S.RUNNING
    assert (await rows.one(Kernel, "s1-k0")).status == K.RUNNING


PREEMPTED_ENDS = [
    pytest.param(1, [[ev("exited", 4, exit_code=0)]], id="exits-0-after-a-checkpoint"),
    pytest.param(
        1, [[ev("exited", 4, exit_code=143, requested_stop=True)]], id="exits-on-the-stop"
    ),
    pytest.param(1, [[ev("start_failed", 4, message="no such image")]], id="start-failed"),
    pytest.param(1, [[ev("not_started", 4)]], id="not-started"),
    pytest.param(1, [[ev("lost", 4)]], id="lost"),
    pytest.param(
        2,
        [[ev("lost", 3, kernel="s1-k1")], [ev("exited", 4, exit_code=1)]],
        id="cluster-one-lost-then-main1-fails",
    ),
]


@pytest.mark.parametrize(("size", "batches"), PREEMPTED_ENDS)
async def test_a_preempted_session_queues_again_however_its_kernels_end(
    db: SessionFactory, rows: Rows, size: int, batches: list[list[KernelEvent]]
) -> None:
    """However a preempted session's kernels end (an exit with any code, a failed or
    cancelled start, a lost container), each ends with its own status and the session
    waits again, as its next attempt, once the last has: never ERROR, FAILED or CANCELLED.
    A repeat of the last end changes nothing."""
    await rows.node("n1", kernels=size)
    ids = await rows.session(
        S.PREEMPTED, [(K.STOPPING, "n1")] * size, status_reason="preempted by urgent"
    )
    handler = EventHandler(db, NO_REDIS)
    for batch in batches[:-1]:
        await handler.commit(EventBatch(events=batch))
        assert (await rows.one(Session, "s1")).status == S.PREEMPTED
        assert (await rows.one(Kernel, batch[0].kernel_id)).status == K.FAILED
    for _ in range(2):
        await handler.commit(EventBatch(events=batches[-1]))
    session = await rows.one(Session, "s1")
    why = "queued again after preemption 1 (preempted by urgent)"
    assert (session.status, session.preemptions, session.exit_code) == (S.PENDING, 1, None)
    assert session.pending_reason == why
    kernels = [await rows.one(Kernel, k) for k in ids]
    assert [(k.status, k.attempt, k.node_id, k.ended_at) for k in kernels] == [
        (K.PENDING, 2, None, None)
    ] * size
    assert await rows.history() == ["PENDING"]
    assert await rows.cpus_taken() == "0"


SLURM_SAID = "Slurm did not start job 7 within 30s (PENDING, Resources); it was cancelled"


def deferred(ts: float, kernel: str = "s1-k0", **more: Any) -> KernelEvent:
    fields: dict[str, Any] = {"message": SLURM_SAID, "deferred": True, "attempt": 1} | more
    return ev("start_failed", ts, kernel, **fields)


@pytest.mark.parametrize("status", [S.SCHEDULED, S.PREPARING])
async def test_a_deferred_start_places_the_session_again_after_a_backoff(
    db: SessionFactory, rows: Rows, status: S
) -> None:
    """The runtime could not start it now (Slurm kept its job waiting): the session waits
    again, as attempt 2, with the runtime's words as its reason and in its history, its
    allocation back on n1, not before the backoff (``starts_at``); it is no retry."""
    await rows.node("n1", kernels=1)
    await rows.session(status, [(K(status.lower()), "n1")], resource_group="default")
    handler = EventHandler(db, NO_REDIS, Backoff(base_s=5.0, max_s=60.0))
    before = time.time()
    outbox = await handler.commit(EventBatch(events=[deferred(before)]))
    after = time.time()
    session, kernel = await rows.one(Session, "s1"), await rows.one(Kernel, "s1-k0")
    assert (session.status, session.retries, session.exit_code) == (S.PENDING, 0, None)
    assert session.pending_reason.startswith(f"{SLURM_SAID} (on n1); placed again from ")
    assert session.lost_node is None  # not a node loss: the placement says "placed on"
    assert await rows.history_entries() == [(status.value, "PENDING", session.pending_reason)]
    assert (kernel.status, kernel.attempt, kernel.node_id) == (K.PENDING, 2, None)
    assert (kernel.ended_at, kernel.slots, kernel.released) == (None, {}, True)
    assert await rows.cpus_taken() == "0"
    assert session.starts_at is not None  # base_s * 2**(attempt 1 - 1) from now
    assert before + 5.0 - 1.0 <= _utc(session.starts_at).timestamp() <= after + 5.0 + 1.0
    assert outbox.stops == []  # nothing of it runs on n1
    assert outbox.schedule == {"default"}
    assert [e["status"] for _, e in outbox.live] == ["PENDING"]
    # its repeat (a tombstone sent again) is of attempt 1: fenced off, changes nothing
    await handler.commit(EventBatch(events=[deferred(time.time())]))
    kernel = await rows.one(Kernel, "s1-k0")
    assert (kernel.status, kernel.attempt) == (K.PENDING, 2)
    assert await rows.history() == ["PENDING"]


async def test_another_node_cannot_defer_a_session_placed_elsewhere(
    db: SessionFactory, rows: Rows
) -> None:
    """A deferral is a node's word on its own kernels only: n2 (its credential stolen,
    say) cannot send a session placed on n1 back to the queue."""
    await rows.node("n1", kernels=1)
    await rows.node("n2")
    await rows.session(S.PREPARING, [(K.PREPARING, "n1")])
    batch = only_from(EventBatch(events=[deferred(time.time(), node_id="n2")]), "n2")
    await EventHandler(db, NO_REDIS).commit(batch)
    session, kernel = await rows.one(Session, "s1"), await rows.one(Kernel, "s1-k0")
    assert (session.status, kernel.status, kernel.attempt, kernel.node_id) == (
        S.PREPARING,
        K.PREPARING,
        1,
        "n1",
    )
    assert await rows.history() == []
    assert await rows.cpus_taken("n1") == "1"


async def test_the_wait_doubles_with_each_attempt_up_to_the_ceiling(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.SCHEDULED, [(K.SCHEDULED, "n1")])
    async with db() as s, s.begin():
        kernel = await s.get(Kernel, "s1-k0")
        assert kernel is not None
        kernel.attempt = 4
    handler = EventHandler(db, NO_REDIS, Backoff(base_s=5.0, max_s=30.0))
    before = time.time()
    await handler.commit(EventBatch(events=[deferred(before, attempt=4)]))
    after = time.time()
    session = await rows.one(Session, "s1")
    assert session.starts_at is not None  # 5 * 2**3 = 40s, capped at 30s
    assert before + 30.0 - 1.0 <= _utc(session.starts_at).timestamp() <= after + 30.0 + 1.0
    assert (await rows.one(Kernel, "s1-k0")).attempt == 5


async def test_a_deferred_start_of_a_session_asked_to_stop_is_cancelled(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.TERMINATING, [(K.PREPARING, "n1")], status_reason="cancelled by alice")
    outbox = await EventHandler(db, NO_REDIS).commit(EventBatch(events=[deferred(time.time())]))
    session, kernel = await rows.one(Session, "s1"), await rows.one(Kernel, "s1-k0")
    assert (session.status, session.status_reason) == (
        S.CANCELLED,
        f"cancelled by alice; {SLURM_SAID}",
    )
    assert (kernel.status, kernel.attempt) == (K.CANCELLED, 1)
    assert await rows.history() == ["CANCELLED"]
    assert await rows.cpus_taken() == "0"
    assert (session.starts_at, outbox.stops) == (None, [])


async def test_a_deferred_start_places_a_whole_cluster_session_again(
    db: SessionFactory, rows: Rows
) -> None:
    """main1 on n1 could not start now; sub1 runs on n2: both wait again as attempt 2,
    sub1's attempt 1 is stopped on n2 (that attempt only), both allocations are back, and
    n2's late "exited" of attempt 1 changes nothing."""
    await rows.node("n1", kernels=1)
    await rows.node("n2", kernels=1)
    await rows.session(S.PREPARING, [(K.PREPARING, "n1"), (K.RUNNING, "n2")])
    handler = EventHandler(db, NO_REDIS)
    outbox = await handler.commit(EventBatch(events=[deferred(time.time())]))
    session = await rows.one(Session, "s1")
    assert session.status == S.PENDING
    kernels = [await rows.one(Kernel, k) for k in ("s1-k0", "s1-k1")]
    assert [(k.status, k.attempt, k.node_id) for k in kernels] == [(K.PENDING, 2, None)] * 2
    assert (await rows.cpus_taken("n1"), await rows.cpus_taken("n2")) == ("0", "0")
    assert [(q, j.kernel_id, j.attempt) for q, j in outbox.stops] == [
        ("jobgate:node:n2", "s1-k1", 1)
    ]
    stopped = ev("exited", time.time(), "s1-k1", node_id="n2", exit_code=143, attempt=1)
    await handler.commit(EventBatch(events=[stopped]))
    assert (await rows.one(Session, "s1")).status == S.PENDING
    assert (await rows.one(Kernel, "s1-k1")).status == K.PENDING


async def test_a_start_failure_that_is_not_deferred_still_ends_the_session_error(
    db: SessionFactory, rows: Rows
) -> None:
    """sbatch refused the job: final, in Slurm's words."""
    await rows.node("n1", kernels=1)
    await rows.session(S.PREPARING, [(K.PREPARING, "n1")])
    refused = "Slurm refused the job: Memory specification can not be satisfied"
    batch = [ev("start_failed", time.time(), message=refused, attempt=1)]
    await EventHandler(db, NO_REDIS).commit(EventBatch(events=batch))
    session = await rows.one(Session, "s1")
    assert (session.status, session.status_reason, session.starts_at) == (S.ERROR, refused, None)
    assert (await rows.one(Kernel, "s1-k0")).attempt == 1


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)
