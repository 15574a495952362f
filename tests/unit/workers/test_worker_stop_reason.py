"""A worker that stops its node's sessions on exit (``jobgate up``) reports why, in
place of the runtime's "stopped on request" (docs/operations.md, "Stopping jobgate up")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sim_agent import sim_agent

from contract.messages import StartKernel


async def test_stop_all_reports_the_reason_it_is_given(tmp_path: Path) -> None:
    agent, recorder = sim_agent(tmp_path)
    agent.start(
        StartKernel(
            kernel_id="k1",
            session_id="s1",
            node_id="n1",
            session_type="batch",
            command=["sleep", "600"],
            env={"JOBGATE_SIM_DURATION": "3600"},
        )
    )
    for _ in range(200):
        if any(e.kind == "running" for e in recorder.events):
            break
        await asyncio.sleep(0.01)
    await agent.stop_all(5.0, "jobgate up stopped")
    last = recorder.events[-1]
    assert (last.kind, last.requested_stop, last.message) == (
        "exited",
        True,
        "jobgate up stopped",
    )
