"""What a worker killed with SIGKILL finds when it starts again (tests/e2e/test_chaos.py
kills them under load): kernels it was preparing, ends Redis may never have had."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sim_agent import sim_agent

from contract.messages import KernelEvent, NodeInfo, StartKernel
from workers.reporter import EventReporter
from workers.state import KernelState


def _job(kernel: str = "k1") -> StartKernel:
    return StartKernel(
        kernel_id=kernel,
        session_id="s1",
        node_id="n1",
        session_type="batch",
        command=["true"],
        env={"JOBGATE_SIM_DURATION": "3600"},
    )


async def _settle(agent: Any) -> None:
    for task in list(agent.tasks):
        task.cancel()
    await asyncio.gather(*agent.tasks, return_exceptions=True)


async def test_a_kernel_killed_while_preparing_is_started_again_not_failed(
    tmp_path: Path,
) -> None:
    agent, recorder = sim_agent(tmp_path)
    job = _job()
    agent.services.store.save(
        KernelState("k1", "s1", "n1", phase="preparing", job=job.model_dump(mode="json"))
    )
    await agent.recover()
    assert list(agent.kernels) == ["k1"]  # started from its saved job: it never ran
    assert not agent.services.store.is_done("k1")
    for _ in range(200):
        if any(e.kind == "running" for e in recorder.events):
            break
        await asyncio.sleep(0.01)
    assert [e.kind for e in recorder.events] == ["preparing", "running"]
    await _settle(agent)


async def test_one_killed_while_preparing_without_its_job_or_after_a_stop_ends(
    tmp_path: Path,
) -> None:
    agent, recorder = sim_agent(tmp_path)
    store = agent.services.store
    store.save(KernelState("k1", "s1", "n1", phase="preparing"))  # an older worker's file
    stopped = KernelState("k2", "s1", "n1", phase="preparing", requested_stop=True)
    stopped.job = _job("k2").model_dump(mode="json")
    store.save(stopped)
    await agent.recover()
    assert agent.kernels == {}
    kinds = sorted((e.kernel_id, e.kind) for e in recorder.events)
    assert kinds == [("k1", "start_failed"), ("k2", "not_started")]
    assert store.is_done("k1")
    assert store.is_done("k2")


async def test_a_running_kernel_whose_container_disappeared_is_reported_lost(
    tmp_path: Path,
) -> None:
    """The worker comes back and the runtime no longer knows a kernel's container: the
    worker reports it ``lost``, with the reason its session's owner reads (the gateway
    makes it the session's status reason, gateway/loops/events.py), and keeps the end for the
    registration. A kernel whose container is still there is re-attached instead."""
    agent, recorder = sim_agent(tmp_path)
    store = agent.services.store
    kept = _job("k2")
    await agent.runtime.start(agent.spec(kept))  # still there after the restart
    store.save(KernelState("k1", "s1", "n1", phase="running", attempt=2))
    store.save(KernelState("k2", "s1", "n1", phase="running"))
    await agent.recover()
    assert list(agent.kernels) == ["k2"]
    [lost] = recorder.events
    assert (lost.kind, lost.kernel_id, lost.session_id, lost.node_id, lost.attempt) == (
        "lost",
        "k1",
        "s1",
        "n1",
        2,
    )
    assert lost.message == "its container disappeared while the worker was down"
    assert store.is_done("k1.a2")
    info, endings = await agent.registration()
    assert [k.kernel_id for k in info.kernels] == ["k2"]
    assert endings == [lost]
    await _settle(agent)


async def test_the_ends_in_tombstones_come_back_for_the_registration(tmp_path: Path) -> None:
    agent, _ = sim_agent(tmp_path)
    ended = KernelEvent(kind="exited", kernel_id="k9", session_id="s9", node_id="n1", ts=1.0,
                        exit_code=3, attempt=2)  # fmt: skip
    agent.services.store.delete("k9.a2", ended.model_dump_json())
    agent.services.store.delete("k8")  # an older tombstone: no event in it
    await agent.recover()
    info, endings = await agent.registration()
    assert (info.kernels, endings) == ([], [ended])
    assert agent.services.store.is_done("k9.a2")


async def test_a_kernel_that_ends_before_the_registration_is_in_its_ends(
    tmp_path: Path,
) -> None:
    """A kernel the worker was killed preparing is started again by recover() and may end
    while the registration is being put together (the runtime is asked for its info):
    the registration lists it, or carries its end - never neither, which the gateway
    would take for a lost kernel (ERROR, "not on n1 any more")."""
    agent, recorder = sim_agent(tmp_path)
    job = _job().model_copy(update={"env": {"JOBGATE_SIM_START_ERROR": "no such image"}})
    agent.services.store.save(
        KernelState("k1", "s1", "n1", phase="preparing", job=job.model_dump(mode="json"))
    )
    await agent.recover()
    for _ in range(200):  # what awaiting the runtime's info lets run
        if agent.kernels == {}:
            break
        await asyncio.sleep(0.01)
    assert [e.kind for e in recorder.events] == ["preparing", "start_failed"]
    info, endings = await agent.registration()
    assert info.kernels == []
    assert [(e.kernel_id, e.kind, e.message) for e in endings] == [
        ("k1", "start_failed", "no such image")
    ]
    await _settle(agent)


class _Pool:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    async def enqueue_job(self, name: str, batch: dict[str, Any], **_: Any) -> None:
        self.jobs.append(batch)


async def test_the_reporter_sends_each_attempt_s_latest_event_again() -> None:
    pool = _Pool()
    reporter = EventReporter(pool)  # type: ignore[arg-type]
    reporter.start()

    def event(kind: str, kernel: str, attempt: int = 1) -> KernelEvent:
        return KernelEvent(kind=kind, kernel_id=kernel, session_id="s", node_id="n1", ts=1.0,
                           attempt=attempt)  # fmt: skip

    for e in (event("preparing", "a"), event("running", "a"), event("exited", "a")):
        reporter.report(e)
    reporter.report(event("running", "b"))
    reporter.report(event("running", "a", attempt=2))
    assert await reporter.flush(5)
    sent = len(pool.jobs)
    assert reporter.replay() == 3
    assert await reporter.flush(5)
    again = [
        (e["kernel_id"], e["attempt"], e["kind"]) for b in pool.jobs[sent:] for e in b["events"]
    ]
    assert again == [("a", 1, "exited"), ("b", 1, "running"), ("a", 2, "running")]
    await reporter.close()


async def test_a_registration_redis_loses_is_sent_again_with_its_ends() -> None:
    pool = _Pool()
    reporter = EventReporter(pool)  # type: ignore[arg-type]
    reporter.start()
    ended = KernelEvent(kind="exited", kernel_id="k9", session_id="s9", node_id="n1", ts=1.0,
                        exit_code=3)  # fmt: skip
    info = NodeInfo(node_id="n1", hostname="n1", address="", queue="q", runtime="sim",
                    capacity={})  # fmt: skip
    reporter.register(info, [ended])
    assert await reporter.flush(5)
    assert [b["node"]["node_id"] for b in pool.jobs] == ["n1"]
    pool.jobs.clear()  # FLUSHALL: the registration's batch is gone
    assert reporter.replay() == 1  # the registration, sent again whole with its ends
    assert await reporter.flush(5)
    assert [b["node"]["node_id"] for b in pool.jobs] == ["n1"]
    assert [(e["kernel_id"], e["exit_code"]) for b in pool.jobs for e in b["events"]] == [("k9", 3)]
    await reporter.close()
