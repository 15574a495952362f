"""A ``jobgate worker run --runtime slurm --partition debug`` in front of the real Slurm
cluster of scripts/setup-slurm.sh: jobgate queues and decides, Slurm runs."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, WorkerProcess
from waiting import until

NODES = {"node1", "node2"}
#: a job jobgate does not know, holding all of a node's CPUs
SBATCH_FOREIGN = ("sbatch", "--parsable", "-c", "2", "--mem=64M", "-o", "/dev/null")


@pytest.fixture
async def slurm_stack(stack: Stack, slurm_conf: Path, jobcomp_file: Path) -> AsyncIterator[Stack]:
    """The stack with one slurm worker process attached to partition debug."""
    await start_slurm_worker(stack, slurm_conf, jobcomp_file)
    yield stack
    for job in await jobgate_jobs():  # none outlives the test
        await asyncio.to_thread(subprocess.run, ["scancel", job], check=False)


async def start_slurm_worker(
    stack: Stack, slurm_conf: Path, jobcomp_file: Path, **more: str
) -> WorkerProcess:
    return await stack.start_worker_process(
        "slurmhost",
        args=("--runtime", "slurm", "--partition", "debug"),
        nodes=NODES,
        JOBGATE_SLURM_POLL_INTERVAL_S="0.3",
        JOBGATE_SLURM_JOBCOMP_FILE=str(jobcomp_file),
        SLURM_CONF=str(slurm_conf),
        **more,
    )


async def jobgate_jobs(kernel_id: str | None = None) -> list[str]:
    """Ids of the jobgate jobs Slurm has not ended (of *kernel_id*'s job, if given)."""
    name = ["--name", f"jobgate-{kernel_id}"] if kernel_id else []
    out = await asyncio.to_thread(
        subprocess.run,
        ["squeue", "--noheader", "-o", "%i|%j", *name],
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        line.split("|")[0]
        for line in out.stdout.splitlines()
        if line.split("|")[-1].startswith("jobgate-")
    ]


async def running_job(stack: Stack, session: dict[str, Any]) -> str:
    (kernel,) = session["kernels"]
    (job,) = await until(
        lambda: jobgate_jobs(kernel["id"]), timeout=30, what=f"{kernel['id']} in squeue"
    )
    return job


async def test_the_partition_s_nodes_register_with_slurm_s_capacity(slurm_stack: Stack) -> None:
    async with slurm_stack.client() as api:
        nodes = {n["id"]: n for n in (await api.get("/v1/nodes")).json()["items"]}
    assert set(nodes) == NODES
    for name, address in (("node1", "10.250.0.11"), ("node2", "10.250.0.12")):
        node = nodes[name]
        assert node["capacity"] == {"cpu": "2", "mem": str(1024**3), "cuda.device": "2"}
        assert [(d["model"], d["slot"]) for d in node["devices"]] == [("tesla", "cuda.device")] * 2
        assert (node["runtime"], node["resource_group"], node["address"]) == (
            "slurm",
            "debug",
            address,
        )
        assert (node["hostname"], node["labels"]) == (name, {"slurm.partition": "debug"})
        assert node["images"] == "ignored"


async def test_a_batch_session_runs_on_the_chosen_node_with_live_output(
    slurm_stack: Stack, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    script = (
        'echo "on $(hostname) with CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
        f"while [ ! -e {release} ]; do sleep 0.2; done; echo bye >&2; exit 3"
    )
    session = await slurm_stack.submit(
        command=["sh", "-c", script],
        resource_group="debug",
        resources={"cpu": "1", "mem": "64m", "cuda.device": "1"},
    )
    running = await slurm_stack.wait_status(session["id"], {"RUNNING"})
    node = running["node"]
    assert node in NODES
    await slurm_stack.wait_output(session["id"], f"on {node} with CUDA_VISIBLE_DEVICES=0\n")
    assert (await slurm_stack.get(session["id"]))["status"] == "RUNNING"  # output while it runs
    shown = await slurm_stack.cli("sessions", "logs", session["id"])
    assert shown == f"on {node} with CUDA_VISIBLE_DEVICES=0\n"
    release.touch()
    ended = await slurm_stack.wait_status(session["id"], {"FAILED"})
    assert ended["exit_code"] == 3
    assert ended["kernels"][0]["exit_code"] == 3
    assert "exited with code 3" in ended["status_reason"]
    assert "bye" in await slurm_stack.logs(session["id"])


async def test_removing_a_running_session_cancels_its_slurm_job(slurm_stack: Stack) -> None:
    session = await slurm_stack.submit(
        command=["sh", "-c", "echo started; while :; do sleep 1; done"],
        resource_group="debug",
        resources={"cpu": "1", "mem": "64m"},
    )
    await slurm_stack.wait_status(session["id"], {"RUNNING"})
    await slurm_stack.wait_output(session["id"], "started")
    running = await slurm_stack.get(session["id"])
    kernel_id = running["kernels"][0]["id"]
    assert await jobgate_jobs(kernel_id)
    await slurm_stack.cli("sessions", "rm", session["id"])
    ended = await slurm_stack.wait_status(session["id"], {"TERMINATED", "CANCELLED"})
    assert ended["status"] == "TERMINATED"

    async def gone() -> bool:
        return not await jobgate_jobs(kernel_id)

    await until(gone, timeout=30, what=f"the Slurm job of {kernel_id} gone from squeue")


async def test_an_env_value_never_shows_in_scontrol(slurm_stack: Stack) -> None:
    secret = "tok-5f1c9e0d2b7a"
    session = await slurm_stack.submit(
        command=["sh", "-c", 'echo "length ${#API_TOKEN}"; while :; do sleep 1; done'],
        env={"API_TOKEN": secret},
        resource_group="debug",
        resources={"cpu": "1", "mem": "64m"},
    )
    running = await slurm_stack.wait_status(session["id"], {"RUNNING"})
    await slurm_stack.wait_output(session["id"], f"length {len(secret)}\n")
    job = await running_job(slurm_stack, running)
    shown = (
        await asyncio.to_thread(
            subprocess.run,
            ["scontrol", "show", "job", "-dd", job],
            capture_output=True,
            text=True,
            check=True,
        )
    ).stdout
    assert f"jobgate-{running['kernels'][0]['id']}" in shown
    assert secret not in shown
    assert "API_TOKEN" not in shown


async def test_a_job_slurm_does_not_start_in_time_waits_again_and_runs_later(
    stack: Stack, slurm_conf: Path, jobcomp_file: Path
) -> None:
    """Jobs jobgate does not know (foreign ones) hold every CPU: Slurm keeps the session's
    job PENDING, the worker cancels it after JOBGATE_SLURM_START_TIMEOUT_S and defers the
    start, and the session waits again (PENDING, in Slurm's words) as a new attempt. Once
    the foreign jobs are gone, an attempt runs, and the session succeeds."""
    await start_slurm_worker(stack, slurm_conf, jobcomp_file, JOBGATE_SLURM_START_TIMEOUT_S="2")
    foreign = []
    try:
        for node in sorted(NODES):
            out = await asyncio.to_thread(
                subprocess.run,
                [*SBATCH_FOREIGN, "-w", node, "--wrap", "sleep 300"],
                capture_output=True,
                text=True,
                check=True,
            )
            foreign.append(out.stdout.strip())
        session = await stack.submit(
            command=["echo", "ran"], resource_group="debug", resources={"cpu": "1", "mem": "64m"}
        )
        (kernel,) = session["kernels"]
        reasons = await until(
            lambda: deferrals(stack, session["id"]), timeout=60, what="a deferred start"
        )
        assert re.fullmatch(
            r"Slurm did not start job \d+ within 2s \(PENDING, [^)]*\); it was cancelled "
            r"\(on node[12]\); placed again from \d\d:\d\d:\d\dZ",
            reasons[0],
        ), reasons[0]
        assert await jobgate_jobs(kernel["id"]) == []  # attempt 1's job: cancelled
    finally:
        for job in foreign:
            await asyncio.to_thread(subprocess.run, ["scancel", job], check=False)
    ended = await stack.wait_status(session["id"], {"SUCCEEDED"}, timeout=120)
    assert (ended["exit_code"], ended["retries"]) == (0, 0)  # a deferral is no retry
    assert await stack.logs(session["id"]) == "ran\n"


async def deferrals(stack: Stack, session_id: str) -> list[str]:
    """The reasons of the session's moves back to PENDING after a deferred start."""
    view = await stack.get(session_id)
    assert view["status"] not in {"ERROR", "FAILED", "CANCELLED"}, view["status_reason"]
    return [
        h["reason"]
        for h in view["history"]
        if h["to_status"] == "PENDING" and h["reason"].startswith("Slurm did not start")
    ]


async def test_a_restarted_worker_re_attaches_to_its_running_job(
    stack: Stack, slurm_conf: Path, jobcomp_file: Path, tmp_path: Path
) -> None:
    """The worker is killed -9 while Slurm runs a session's job; the next worker (same data
    directory) finds the job by its name and comment, resumes its output and reports its
    end: the session runs once and succeeds."""
    first = await start_slurm_worker(stack, slurm_conf, jobcomp_file)
    release = tmp_path / "release"
    script = f"echo one; while [ ! -e {release} ]; do sleep 0.2; done; echo two"
    session = await stack.submit(
        command=["sh", "-c", script], resource_group="debug", resources={"cpu": "1", "mem": "64m"}
    )
    await stack.wait_status(session["id"], {"RUNNING"})
    await stack.wait_output(session["id"], "one\n")
    await first.kill9()
    second = await start_slurm_worker(stack, slurm_conf, jobcomp_file)
    await until(lambda: "re-attached to kernel" in second.log(), timeout=30, what="the re-attach")
    release.touch()
    ended = await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert (ended["exit_code"], ended["retries"]) == (0, 0)
    assert await stack.logs(session["id"]) == "one\ntwo\n"
