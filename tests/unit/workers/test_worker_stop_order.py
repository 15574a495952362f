"""Stop and start jobs of one kernel arriving out of order on a node (queues deliver at
least once, and a stop can overtake its start)."""

from __future__ import annotations

from pathlib import Path

from sim_agent import sim_agent

from contract.messages import StartKernel, StopKernel


def _stop(kernel_id: str) -> StopKernel:
    return StopKernel(kernel_id=kernel_id, session_id="s1", node_id="n1", grace=0.0)


async def test_a_start_that_arrives_after_its_stop_never_runs(tmp_path: Path) -> None:
    agent, recorder = sim_agent(tmp_path)
    await agent.stop(_stop("k1"))
    agent.start(
        StartKernel(
            kernel_id="k1", session_id="s1", node_id="n1", session_type="batch", command=["true"]
        )
    )
    assert agent.kernels == {}
    assert [e.kind for e in recorder.events] == ["not_started"]
    # and a worker restarted from the same state directory remembers it
    again, _ = sim_agent(tmp_path)
    assert again.services.store.is_done("k1")


async def test_a_stop_for_a_kernel_that_already_ended_here_reports_nothing(
    tmp_path: Path,
) -> None:
    agent, recorder = sim_agent(tmp_path)
    agent.services.store.mark_done("k2")  # it ran here and its exit was reported
    await agent.stop(_stop("k2"))
    assert recorder.events == []
