"""SlurmRuntime on a real Slurm cluster (scripts/setup-slurm.sh): one node, node1."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from waiting import until

from plugins.resources import ResourceSlots
from plugins.runtimes.base import (
    KernelHandle,
    KernelSpec,
    RuntimeContext,
    RuntimeFailure,
    StartDeferred,
)
from plugins.runtimes.slurm.runtime import SlurmRuntime, SlurmSettings


@pytest.fixture
async def runtime(
    slurm_conf: Path, jobcomp_file: Path, tmp_path: Path
) -> AsyncIterator[SlurmRuntime]:
    settings = SlurmSettings(
        partitions=["debug"], poll_interval_s=0.2, start_timeout_s=20, jobcomp_file=jobcomp_file
    )
    rt = SlurmRuntime(settings, RuntimeContext("node1", tmp_path, instance="inst-test"))
    info = await rt.info()
    assert info.available, info.detail
    started: list[KernelHandle] = []
    rt_start = rt.start

    async def start(spec: KernelSpec) -> KernelHandle:
        handle = await rt_start(spec)
        started.append(handle)
        return handle

    rt.start = start  # type: ignore[method-assign]
    yield rt
    for handle in started:  # nothing outlives the test
        await rt.cli.scancel(handle.ref)


def spec(kernel: str, *command: str, **fields: object) -> KernelSpec:
    values: dict[str, object] = {
        "resources": ResourceSlots.parse({"cpu": "0.5", "mem": "64m"}),
        "env": {},
    } | fields
    return KernelSpec(kernel, f"s-{kernel}", "node1", list(command), **values)  # type: ignore[arg-type]


async def output(rt: SlurmRuntime, handle: KernelHandle) -> dict[str, bytes]:
    out = {"stdout": b"", "stderr": b""}
    async for chunk in rt.logs(handle, {}):
        assert chunk.offset == len(out[chunk.stream])
        out[chunk.stream] += chunk.data
    return out


def scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout


async def test_a_job_runs_on_its_node_and_its_exit_code_comes_back(runtime: SlurmRuntime) -> None:
    handle = await runtime.start(
        spec(
            "k-exit",
            "sh",
            "-c",
            'echo "on $(hostname) as $JOBGATE_X"; echo oops >&2; exit 3',
            env={"JOBGATE_X": "x y"},
        )
    )
    logs = output(runtime, handle)
    status = await runtime.wait(handle)
    out = await logs
    assert (status.exit_code, status.reason) == (3, None)
    assert out == {"stdout": b"on node1 as x y\n", "stderr": b"oops\n"}
    assert status.ended_at is not None


async def test_the_environment_never_reaches_scontrol(runtime: SlurmRuntime) -> None:
    secret = "s3cr3t-value-4711"
    handle = await runtime.start(
        spec("k-secret", "sh", "-c", 'echo "$TOKEN" | wc -c; sleep 30', env={"TOKEN": secret})
    )

    stdout = runtime.root / "k-secret" / "stdout"

    def printed() -> bool:
        return stdout.exists() and stdout.read_bytes() == b"18\n"

    await until(printed, timeout=30, what="the job printed")  # its script runs: TERM reaches it
    shown = scontrol_job(handle.ref)
    assert "k-secret" in shown
    assert secret not in shown
    assert "TOKEN" not in shown
    await runtime.stop(handle, 5)
    status = await runtime.wait(handle)
    assert (status.exit_code, status.reason) == (143, "killed by signal 15 (SIGTERM)")


async def test_a_stopped_job_is_cancelled_after_its_grace(runtime: SlurmRuntime) -> None:
    handle = await runtime.start(
        spec("k-stubborn", "sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done")
    )
    stdout = runtime.root / "k-stubborn" / "stdout"
    await until(
        lambda: stdout.exists() and stdout.read_bytes() == b"ready\n",
        timeout=30,
        what="the job ignores SIGTERM",
    )
    await runtime.stop(handle, 1)
    status = await runtime.wait(handle)  # SIGKILL once Slurm's KillWait after scancel passed
    assert (status.exit_code, status.reason) == (137, "killed by signal 9 (SIGKILL)")


async def test_sbatch_refusal_is_slurm_s_message(runtime: SlurmRuntime) -> None:
    big = ResourceSlots.parse({"cpu": "1", "mem": "5g"})
    with pytest.raises(
        RuntimeFailure, match="Slurm refused the job: Memory specification can not be satisfied"
    ) as refused:
        await runtime.start(spec("k-big", "true", resources=big))
    assert not isinstance(refused.value, StartDeferred)  # final: the session ends ERROR


async def test_a_job_slurm_does_not_start_is_cancelled_and_deferred(
    runtime: SlurmRuntime, tmp_path: Path
) -> None:
    whole = ResourceSlots.parse({"cpu": "2", "mem": "64m"})
    holder = await runtime.start(spec("k-holder", "sleep", "60", resources=whole))
    runtime.settings.start_timeout_s = 1.0
    with pytest.raises(
        StartDeferred,
        match=r"Slurm did not start job \d+ within 1s \(PENDING, [^)]*\); it was cancelled",
    ):
        await runtime.start(spec("k-waiter", "true", resources=whole))
    await runtime.stop(holder, 0)
    await runtime.wait(holder)


async def test_a_new_runtime_re_attaches_to_its_jobs(runtime: SlurmRuntime, tmp_path: Path) -> None:
    handle = await runtime.start(spec("k-again", "sh", "-c", "echo one; sleep 2; echo two"))
    other_instance = SlurmRuntime(
        runtime.settings, RuntimeContext("node1", tmp_path, instance="other")
    )
    assert [h.kernel_id for h in await other_instance.list_kernels()] == []
    again = SlurmRuntime(runtime.settings, RuntimeContext("node1", tmp_path, instance="inst-test"))
    (found,) = await again.list_kernels()
    assert (found.kernel_id, found.session_id, found.ref, found.started) == (
        "k-again",
        "s-k-again",
        handle.ref,
        True,
    )
    logs = output(again, found)
    status = await again.wait(found)
    assert status.exit_code == 0
    assert (await logs)["stdout"] == b"one\ntwo\n"
    await again.remove(found)
    assert await again.list_kernels() == []
