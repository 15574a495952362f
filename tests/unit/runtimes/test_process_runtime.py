"""The process runtime with real processes: output with offsets, exits, stops, re-attach."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from waiting import until

from plugins.common import Mount
from plugins.runtimes.base import (
    InvalidSpec,
    KernelSpec,
    LogChunk,
    RuntimeContext,
    ServicePort,
)
from plugins.runtimes.process import ProcessRuntime, ProcessSettings
from plugins.runtimes.shim import FENCED, claim


def make(tmp_path: Path, node: str = "n1") -> ProcessRuntime:
    return ProcessRuntime(ProcessSettings(), RuntimeContext(node_id=node, state_dir=tmp_path))


def spec(command: list[str], kernel: str = "k1", **kw: object) -> KernelSpec:
    return KernelSpec(kernel_id=kernel, session_id="s1", node_id="n1", command=command, **kw)  # type: ignore[arg-type]


async def collect(rt: ProcessRuntime, handle: object, offsets: dict[str, int]) -> list[LogChunk]:
    return [c async for c in rt.logs(handle, offsets)]  # type: ignore[arg-type]


async def run_to_end(rt: ProcessRuntime, s: KernelSpec) -> tuple[int, dict[str, bytes]]:
    await rt.prepare(s, _no_progress)
    handle = await rt.start(s)
    chunks = await collect(rt, handle, {})
    status = await rt.wait(handle)
    out: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    for c in chunks:
        assert c.offset == len(out[c.stream])  # offsets are exact and contiguous
        out[c.stream] += c.data
    return status.exit_code, out


async def _no_progress(message: str) -> None:
    raise AssertionError("the process runtime has nothing to pull")


@pytest.mark.parametrize(
    ("command", "code", "stdout", "stderr"),
    [
        pytest.param(["sh", "-c", "echo hi"], 0, b"hi\n", b"", id="ok"),
        pytest.param(["sh", "-c", "echo oops >&2; exit 3"], 3, b"", b"oops\n", id="fail"),
        pytest.param(["sh", "-c", "kill -9 $$"], 137, b"", b"", id="killed-by-signal"),
    ],
)
async def test_exit_codes_and_streams(
    tmp_path: Path, command: list[str], code: int, stdout: bytes, stderr: bytes
) -> None:
    exit_code, out = await run_to_end(make(tmp_path), spec(command))
    assert exit_code == code
    assert out == {"stdout": stdout, "stderr": stderr}


async def test_missing_command_exits_127_with_a_message(tmp_path: Path) -> None:
    exit_code, out = await run_to_end(make(tmp_path), spec(["no-such-binary-xyz"]))
    assert exit_code == 127
    assert b"cannot run 'no-such-binary-xyz'" in out["stderr"]


async def test_env_is_the_sessions_own_not_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBGATE_NODE_TOKEN", "secret-of-the-worker")
    s = spec(["sh", "-c", 'echo "$A|${JOBGATE_NODE_TOKEN:-unset}|$HOME"'], env={"A": "1"})
    _, out = await run_to_end(make(tmp_path), s)
    a, token, home = out["stdout"].decode().strip().split("|")
    assert (a, token) == ("1", "unset")
    assert home.endswith("/k1/work")


async def test_stop_sends_sigterm_then_sigkill_after_grace(tmp_path: Path) -> None:
    rt = make(tmp_path)
    polite = await rt.start(spec(["sleep", "30"], kernel="polite"))
    trapped = tmp_path / "trapped"  # the shell ignores TERM from here on
    script = f"trap '' TERM; touch {trapped}; sleep 30"
    stubborn = await rt.start(spec(["sh", "-c", script], kernel="stubborn"))
    await until(trapped.exists, timeout=10, what="the stubborn shell's trap set")
    await asyncio.gather(rt.stop(polite, grace=5), rt.stop(stubborn, grace=0.5))
    assert (await rt.wait(polite)).exit_code == 143
    assert (await rt.wait(stubborn)).exit_code == 137


async def test_a_new_runtime_reattaches_and_resumes_output(tmp_path: Path) -> None:
    first = make(tmp_path)
    handle = await first.start(spec(["sh", "-c", "echo one; sleep 0.5; echo two; exit 4"]))
    got = b""
    async for chunk in first.logs(handle, {}):
        got += chunk.data
        break  # the worker dies after shipping the first chunk
    # a restarted worker: a new runtime object on the same state dir
    second = make(tmp_path)
    (found,) = await second.list_kernels()
    assert found.kernel_id == "k1"
    assert found.session_id == "s1"
    rest = await collect(second, found, {"stdout": len(got)})
    assert got + b"".join(c.data for c in rest) == b"one\ntwo\n"
    assert (await second.wait(found)).exit_code == 4
    await second.remove(found)
    assert await second.list_kernels() == []


async def test_other_nodes_kernels_are_not_listed(tmp_path: Path) -> None:
    mine = make(tmp_path, "n1")
    await mine.start(spec(["true"]))
    theirs = make(tmp_path, "n2")
    assert await theirs.list_kernels() == []


async def test_missing_workdir_is_refused(tmp_path: Path) -> None:
    rt = make(tmp_path)
    with pytest.raises(InvalidSpec, match="does not exist"):
        await rt.start(spec(["true"], workdir=str(tmp_path / "nope")))


async def test_workdir_is_used(tmp_path: Path) -> None:
    where = tmp_path / "project"
    where.mkdir()
    _, out = await run_to_end(make(tmp_path), spec(["pwd"], workdir=str(where)))
    assert out["stdout"].decode().strip() == str(where.resolve())


async def test_a_bind_mount_is_refused_not_ignored(tmp_path: Path) -> None:
    rt = make(tmp_path)
    with pytest.raises(InvalidSpec, match="bind mounts need a container runtime"):
        await rt.start(spec(["true"], mounts=[Mount(str(tmp_path), "/data", True)]))


async def test_service_ports_are_the_host_ports(tmp_path: Path) -> None:
    """A process listens on the host: an app's (or inference replica's) port is reported
    as given, at start and on re-attach."""
    rt = make(tmp_path)
    s = spec(["sh", "-c", "sleep 30"], ports=[ServicePort("inference", "http", 18555)])
    handle = await rt.start(s)
    try:
        assert handle.ports == {"inference": 18555}
        again = make(tmp_path)  # a restarted worker finds it
        assert [h.ports for h in await again.list_kernels()] == [{"inference": 18555}]
    finally:
        await rt.stop(handle, grace=1)


async def test_a_start_no_shim_claimed_yet_is_fenced_then_run_once(tmp_path: Path) -> None:
    """The worker was killed after writing a kernel's files but before its shim claimed
    the attempt (``shim.pid``): the restarted worker's runtime fences it - a late shim
    finds the claim taken and runs nothing - and lists it as never started, so the
    worker removes it and starts it once more."""
    ran = tmp_path / "ran"
    s = spec(["sh", "-c", f"echo run >> {ran}"])
    rt = make(tmp_path)
    await rt.wait(await rt.start(s))
    kdir = tmp_path / "process" / "k1"
    for name in ("shim.pid", "pid", "exit", "stdout", "stderr"):  # as the killed worker left it
        (kdir / name).unlink(missing_ok=True)
    ran.unlink()
    again = make(tmp_path)  # the restarted worker
    (found,) = await again.list_kernels()
    assert (found.kernel_id, found.started) == ("k1", False)
    assert (kdir / "shim.pid").read_text() == FENCED
    assert not claim(kdir)  # what the late shim tries first: it runs nothing
    await again.remove(found)
    assert (await again.wait(await again.start(s))).exit_code == 0
    assert ran.read_text() == "run\n"


async def test_an_exit_carries_when_it_happened(tmp_path: Path) -> None:
    """A kernel that ended while no worker watched is reported with its real end."""
    rt = make(tmp_path)
    handle = await rt.start(spec(["sh", "-c", "exit 5"]))
    await until(lambda: (tmp_path / "process" / "k1" / "exit").exists(), timeout=10, what="exit")
    later = time.time()
    status = await make(tmp_path).wait(handle)
    assert status.exit_code == 5
    assert status.ended_at is not None
    assert handle.started_at <= status.ended_at <= later
