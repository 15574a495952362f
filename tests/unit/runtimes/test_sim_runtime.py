"""The sim runtime: durations and exit codes from the session's environment."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from plugins.runtimes.base import CommitUnsupported, KernelSpec, RuntimeContext, RuntimeFailure
from plugins.runtimes.sim import SimRuntime, SimSettings


def make(tmp_path: Path) -> SimRuntime:
    return SimRuntime(SimSettings(), RuntimeContext(node_id="n1", state_dir=tmp_path))


def spec(env: dict[str, str], command: list[str] | None = None) -> KernelSpec:
    return KernelSpec(
        kernel_id="k",
        session_id="s",
        node_id="n1",
        command=["x"] if command is None else command,
        env=env,
    )


async def test_runs_for_its_duration_and_exits_with_its_code(tmp_path: Path) -> None:
    rt = make(tmp_path)
    handle = await rt.start(
        spec(
            {
                "JOBGATE_SIM_DURATION": "0.3",
                "JOBGATE_SIM_EXIT_CODE": "5",
                "JOBGATE_SIM_OUTPUT": "hello\n",
            }
        )
    )
    started = time.monotonic()
    chunks = [c async for c in rt.logs(handle, {})]
    status = await rt.wait(handle)
    assert time.monotonic() - started >= 0.25
    assert status.exit_code == 5
    assert [c.data for c in chunks] == [b"hello\n"]


async def test_interactive_without_duration_runs_until_stopped(tmp_path: Path) -> None:
    rt = make(tmp_path)
    handle = await rt.start(spec({}, command=[]))
    waiter = asyncio.create_task(rt.wait(handle))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await rt.stop(handle, grace=1)
    assert (await waiter).exit_code == 143


async def test_start_error_is_a_runtime_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="disk full"):
        await make(tmp_path).prepare(spec({"JOBGATE_SIM_START_ERROR": "disk full"}), _progress)


async def _progress(message: str) -> None:
    pass


async def test_a_commit_is_refused_with_the_reason(tmp_path: Path) -> None:
    rt = make(tmp_path)
    handle = await rt.start(spec({}, command=[]))
    with pytest.raises(CommitUnsupported, match="no container image to commit"):
        await rt.commit(handle, "127.0.0.1:5000/me/env:1")
    await rt.stop(handle, grace=1)
