"""Attempts of one kernel on a node: each placement is its own container, state and
tombstone, and a stop names the attempt it means (docs/node-loss.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sim_agent import sim_agent

from contract.messages import StartKernel, StopKernel
from plugins.runtimes.base import KernelHandle, KernelSpec, RuntimeFailure, StartDeferred
from workers.state import attempt_ref, parse_ref


def _start(attempt: int) -> StartKernel:
    return StartKernel(
        kernel_id="k1",
        session_id="s1",
        node_id="n1",
        session_type="batch",
        command=["sleep", "600"],
        env={"JOBGATE_SIM_DURATION": "3600"},
        attempt=attempt,
    )


def test_attempt_1_keeps_the_bare_kernel_id() -> None:
    assert attempt_ref("k1", 1) == "k1"
    assert attempt_ref("k1", 2) == "k1.a2"
    assert parse_ref("k1.a2") == ("k1", 2)
    assert parse_ref("k1") == ("k1", 1)
    assert parse_ref("3f0c.a-b") == ("3f0c.a-b", 1)


async def test_a_later_attempt_runs_here_despite_the_first_one_s_tombstone(
    tmp_path: Path,
) -> None:
    agent, recorder = sim_agent(tmp_path)
    await agent.stop(StopKernel(kernel_id="k1", session_id="s1", node_id="n1", attempt=1))
    agent.start(_start(1))  # attempt 1 was stopped before it started: never runs
    assert agent.kernels == {}
    agent.start(_start(2))
    assert list(agent.kernels) == ["k1.a2"]
    assert agent.spec(_start(2)).kernel_id == "k1.a2"  # the container's name and label
    assert agent.spec(_start(2)).env["JOBGATE_ATTEMPT"] == "2"
    for _ in range(200):
        if any(e.kind == "running" for e in recorder.events):
            break
        await asyncio.sleep(0.01)
    assert [(e.kind, e.attempt) for e in recorder.events] == [
        ("not_started", 1),
        ("preparing", 2),
        ("running", 2),
    ]
    described = await agent.describe()
    assert [(k.kernel_id, k.attempt) for k in described.kernels] == [("k1", 2)]
    # a stop for attempt 1 (the gateway fencing a stale one) leaves attempt 2 alone
    await agent.stop(StopKernel(kernel_id="k1", session_id="s1", node_id="n1", attempt=1))
    assert list(agent.kernels) == ["k1.a2"]
    assert not agent.kernels["k1.a2"].state.requested_stop
    await agent.stop(StopKernel(kernel_id="k1", session_id="s1", node_id="n1", attempt=2))
    for _ in range(500):
        if recorder.events[-1].kind == "exited":
            break
        await asyncio.sleep(0.01)
    last = recorder.events[-1]
    assert (last.kind, last.attempt, last.requested_stop) == ("exited", 2, True)
    assert agent.services.store.is_done("k1.a2")
    for task in list(agent.tasks):
        task.cancel()
    await asyncio.gather(*agent.tasks, return_exceptions=True)


@pytest.mark.parametrize(
    ("failure", "deferred"),
    [
        pytest.param(StartDeferred("Slurm did not start job 7 within 30s"), True, id="deferred"),
        pytest.param(RuntimeFailure("Slurm refused the job: no"), False, id="refused"),
    ],
)
async def test_a_start_the_runtime_defers_is_reported_deferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: RuntimeFailure, deferred: bool
) -> None:
    """StartDeferred ("not now") is a ``start_failed`` marked ``deferred``, which the
    gateway places again; any other RuntimeFailure is not. The end is kept in the
    attempt's tombstone either way (sent again with the next registration)."""
    agent, recorder = sim_agent(tmp_path)

    async def refuse(spec: KernelSpec) -> KernelHandle:
        raise failure

    monkeypatch.setattr(agent.runtime, "start", refuse)
    agent.start(_start(3))
    for _ in range(200):
        if agent.services.store.is_done("k1.a3"):
            break
        await asyncio.sleep(0.01)
    last = recorder.events[-1]
    assert (last.kind, last.attempt, last.message, last.deferred) == (
        "start_failed",
        3,
        str(failure),
        deferred,
    )
    _, endings = await agent.registration()
    assert endings == [last]
