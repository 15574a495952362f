"""The podman runtime against the real rootless Podman service (scripts/setup-podman.sh).

Images come from scripts/build-test-images.sh. Every test uses its own node id, so its
containers are its own (and are removed afterwards even when the test fails).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from needs import missing
from oci_registry import local_registry_image, registry_binary
from podman import PodmanClient

from plugins.common import Mount
from plugins.resources import ResourceSlots
from plugins.runtimes.base import (
    ImageNotFound,
    InvalidSpec,
    KernelSpec,
    LogChunk,
    RuntimeContext,
    ServicePort,
)
from plugins.runtimes.podman import PodmanRuntime, PodmanSettings

pytestmark = pytest.mark.podman

BUSYBOX = "localhost/jobgate-busybox:latest"
Factory = Callable[..., PodmanRuntime]


@pytest.fixture(scope="module")
def busybox(podman_socket: str) -> str:
    with PodmanClient(base_url=podman_socket) as client:
        if not client.images.exists(BUSYBOX):
            missing(f"no {BUSYBOX} (run scripts/build-test-images.sh)")
    return BUSYBOX


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A host directory the Podman user can read (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="jobgate-podman-test-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def make_runtime(podman_socket: str, busybox: str) -> AsyncIterator[Factory]:
    """Build runtimes for this test's node (or another); their containers go afterwards."""
    made: list[PodmanRuntime] = []
    default_node = f"test-{uuid.uuid4().hex[:10]}"

    def make(node_id: str = default_node, **settings: object) -> PodmanRuntime:
        settings.setdefault("socket", podman_socket)
        runtime = PodmanRuntime(
            PodmanSettings(**settings),  # type: ignore[arg-type]
            RuntimeContext(node_id=node_id, state_dir=Path("/nonexistent")),
        )
        made.append(runtime)
        return runtime

    yield make
    for node_id in {r.context.node_id for r in made}:  # a fresh runtime: tests close theirs
        cleaner = PodmanRuntime(
            PodmanSettings(socket=podman_socket), RuntimeContext(node_id, Path("/nonexistent"))
        )
        for handle in await cleaner.list_kernels():
            await cleaner.remove(handle)
        await cleaner.close()
    for runtime in made:
        await runtime.close()


def spec_for(runtime: PodmanRuntime, command: list[str], **fields: object) -> KernelSpec:
    kernel = uuid.uuid4().hex[:12]
    return KernelSpec(
        kernel_id=kernel,
        session_id=f"s-{kernel}",
        node_id=runtime.context.node_id,
        command=command,
        image=str(fields.pop("image", BUSYBOX)),
        **fields,  # type: ignore[arg-type]
    )


async def no_progress(message: str) -> None:
    raise AssertionError(f"unexpected progress: {message}")


async def run_to_end(runtime: PodmanRuntime, spec: KernelSpec) -> tuple[int, bytes, bytes]:
    await runtime.prepare(spec, no_progress)
    handle = await runtime.start(spec)
    chunks = [c async for c in runtime.logs(handle, {})]
    status = await runtime.wait(handle)
    await runtime.remove(handle)
    return status.exit_code, joined(chunks, "stdout"), joined(chunks, "stderr")


def joined(chunks: list[LogChunk], stream: str) -> bytes:
    """The stream's bytes, checking the offsets are contiguous from 0."""
    data = b""
    for chunk in chunks:
        if chunk.stream == stream:
            assert chunk.offset == len(data), (
                f"{stream} chunk at {chunk.offset}, expected {len(data)}"
            )
            data += chunk.data
    return data


async def read_until(
    stream: AsyncIterator[LogChunk], done: Callable[[list[LogChunk]], bool]
) -> list[LogChunk]:
    chunks: list[LogChunk] = []
    async for chunk in stream:
        chunks.append(chunk)
        if done(chunks):
            break
    return chunks


def has(chunks: list[LogChunk], stream: str, text: bytes) -> bool:
    return text in b"".join(c.data for c in chunks if c.stream == stream)


# -- running, output, exit codes -------------------------------------------------------
async def test_info_reports_enforced_limits_after_setup(make_runtime: Factory) -> None:
    info = await make_runtime().info()
    assert info.available
    assert info.version.startswith("podman ")
    assert info.limits_enforced, info.detail  # setup-podman.sh delegates cgroups on v1
    assert info.cgroup in ("v2", "v1-delegated")
    assert "rootless" in info.detail


async def test_an_unreachable_service_is_reported_not_raised(make_runtime: Factory) -> None:
    info = await make_runtime(socket="unix:///nonexistent/podman.sock").info()
    assert not info.available
    assert "unreachable" in info.detail


async def test_exit_code_and_separate_streams_with_offsets(make_runtime: Factory) -> None:
    runtime = make_runtime()
    spec = spec_for(
        runtime, ["sh", "-c", "echo one; echo uh-oh >&2; printf 'two'; echo again >&2; exit 3"]
    )
    code, out, err = await run_to_end(runtime, spec)
    assert (code, out, err) == (3, b"one\ntwo", b"uh-oh\nagain\n")


async def test_output_arrives_while_the_container_still_runs(make_runtime: Factory) -> None:
    runtime = make_runtime()
    spec = spec_for(runtime, ["sh", "-c", "echo early; echo early-err >&2; exec sleep 600"])
    handle = await runtime.start(spec)
    stream = runtime.logs(handle, {})
    chunks = await read_until(
        stream, lambda cs: has(cs, "stdout", b"early\n") and has(cs, "stderr", b"early-err\n")
    )
    await stream.aclose()  # type: ignore[attr-defined]
    (listed,) = await runtime.list_kernels()
    assert not listed.exited  # both streams were delivered before any exit
    assert joined(chunks, "stdout") == b"early\n"
    await runtime.stop(handle, 0)


async def test_env_and_workdir(make_runtime: Factory) -> None:
    runtime = make_runtime()
    spec = spec_for(
        runtime,
        ["sh", "-c", 'echo "$GREETING $PYTHONUNBUFFERED"; pwd'],
        env={"GREETING": "hello world"},
        workdir="/srv/job",
    )
    code, out, _ = await run_to_end(runtime, spec)
    assert (code, out) == (0, b"hello world 1\n/srv/job\n")


async def test_a_command_that_does_not_exist_says_so(make_runtime: Factory) -> None:
    runtime = make_runtime()
    code, out, err = await run_to_end(runtime, spec_for(runtime, ["not-a-command"]))
    assert (code, out) == (1, b"")
    assert b"failed to exec pid1: No such file or directory" in err  # from catatonit


async def test_starting_the_same_kernel_twice_runs_it_once(make_runtime: Factory) -> None:
    runtime = make_runtime()
    spec = spec_for(runtime, ["sh", "-c", "echo once; sleep 600"])
    first = await runtime.start(spec)
    second = await runtime.start(spec)
    assert second.ref == first.ref
    chunks = await read_until(runtime.logs(first, {}), lambda cs: has(cs, "stdout", b"once"))
    assert joined(chunks, "stdout") == b"once\n"
    await runtime.stop(first, 0)


# -- isolation and mounts ------------------------------------------------------------------
async def test_no_new_privileges_caps_and_ulimit(make_runtime: Factory) -> None:
    runtime = make_runtime(nofile=1024)
    spec = spec_for(
        runtime, ["sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ulimit -n"]
    )
    code, out, _ = await run_to_end(runtime, spec)
    # CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE = bits 0,1,3-7,10
    assert (code, out) == (0, b"CapEff:\t00000000000004fb\nNoNewPrivs:\t1\n1024\n")


async def test_bind_mount_from_an_allowed_root(make_runtime: Factory, shared_dir: Path) -> None:
    data = shared_dir / "data"
    data.mkdir()
    (data / "input.txt").write_text("from the host\n")
    data.chmod(0o755)
    (data / "input.txt").chmod(0o644)
    runtime = make_runtime(allowed_mount_roots=[shared_dir])
    spec = spec_for(
        runtime,
        ["sh", "-c", "cat /in/input.txt; touch /in/new 2>/dev/null || echo read-only"],
        mounts=[Mount(str(data), "/in", read_only=True)],
    )
    code, out, _ = await run_to_end(runtime, spec)
    assert (code, out) == (0, b"from the host\nread-only\n")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("/etc", id="outside-the-root"),
        pytest.param("{root}/../etc", id="dot-dot-escape"),
        pytest.param("{root}/link-to-etc", id="symlink-escape"),
    ],
)
async def test_mount_outside_allowed_roots_is_refused(
    make_runtime: Factory, shared_dir: Path, source: str
) -> None:
    (shared_dir / "link-to-etc").symlink_to("/etc")
    runtime = make_runtime(allowed_mount_roots=[shared_dir])
    spec = spec_for(
        runtime, ["cat", "/in/passwd"], mounts=[Mount(source.format(root=shared_dir), "/in")]
    )
    with pytest.raises(InvalidSpec, match="not under an allowed root"):
        await runtime.prepare(spec, no_progress)
    with pytest.raises(InvalidSpec, match="not under an allowed root"):
        await runtime.start(spec)
    assert await runtime.list_kernels() == []


async def test_published_port_is_reachable(make_runtime: Factory) -> None:
    runtime = make_runtime()
    script = "mkdir -p /www && echo served > /www/index.html && exec httpd -f -p 8080 -h /www"
    spec = spec_for(runtime, ["sh", "-c", script], ports=[ServicePort("web", "http", 8080)])
    handle = await runtime.start(spec)
    assert set(handle.ports) == {"web"}
    body = await asyncio.to_thread(fetch, f"http://127.0.0.1:{handle.ports['web']}/index.html")
    assert body == b"served\n"
    (listed,) = await runtime.list_kernels()
    assert listed.ports == handle.ports  # what a restarted worker would find
    await runtime.stop(handle, 0)


def fetch(url: str) -> bytes:
    """GET, retrying until the server inside the container listens (bounded by attempts)."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                data: bytes = response.read()
                return data
        except OSError:
            subprocess.run(["sleep", "0.05"], check=True)
    raise AssertionError(f"nothing answered at {url}")


# -- limits ----------------------------------------------------------------------------------
LIMIT_FILES = {  # what the container sees of its own cgroup, per mode
    "v1-delegated": "cpu/cpu.cfs_quota_us memory/memory.limit_in_bytes pids/pids.max "
    "cpuset/cpuset.cpus",
    "v2": "cpu.max memory.max pids.max cpuset.cpus",
}
LIMIT_VALUES = {
    "v1-delegated": [b"50000", b"67108864", b"50", b"0"],
    "v2": [b"50000", b"100000", b"67108864", b"50", b"0"],
}


async def test_limits_land_in_the_containers_cgroup(make_runtime: Factory) -> None:
    runtime = make_runtime()
    mode = (await runtime.info()).cgroup
    assert mode in LIMIT_FILES, "scripts/setup-podman.sh should have made limits enforceable"
    spec = spec_for(
        runtime,
        ["sh", "-c", f"cd /sys/fs/cgroup && cat {LIMIT_FILES[mode]}"],
        resources=ResourceSlots.parse({"cpu": "0.5", "mem": "64m"}),
        pids_limit=50,
        cpuset=[0],
    )
    code, out, _ = await run_to_end(runtime, spec)
    assert (code, out.split()) == (0, LIMIT_VALUES[mode])


async def test_memory_limit_kill_is_reported_as_out_of_memory(make_runtime: Factory) -> None:
    runtime = make_runtime()
    assert (await runtime.info()).limits_enforced
    spec = spec_for(
        runtime,
        ["dd", "if=/dev/zero", "of=/dev/null", "bs=128M", "count=1"],
        resources=ResourceSlots.parse({"mem": "64m"}),
    )
    handle = await runtime.start(spec)
    status = await runtime.wait(handle)
    assert (status.exit_code, status.oom_killed, status.reason) == (
        137,
        True,
        "out of memory (limit 64MiB)",
    )


async def test_a_kill_9_under_a_memory_limit_is_not_out_of_memory(make_runtime: Factory) -> None:
    """SIGKILL (137) alone is no OOM: `kill -9` of the container's process says so."""
    runtime = make_runtime()
    assert (await runtime.info()).limits_enforced
    spec = spec_for(
        runtime,
        ["sh", "-c", "echo ready; sleep 0.5; kill -9 $$"],
        resources=ResourceSlots.parse({"mem": "64m"}),
    )
    handle = await runtime.start(spec)
    status = await runtime.wait(handle)
    await runtime.remove(handle)
    assert (status.exit_code, status.oom_killed, status.reason) == (
        137,
        False,
        "killed by signal 9 (SIGKILL)",
    )


async def test_pids_limit_stops_forks(make_runtime: Factory) -> None:
    runtime = make_runtime(pids_limit=8)
    spec = spec_for(runtime, ["sh", "-c", "for i in $(seq 20); do sleep 60 & done; echo all"])
    code, out, err = await run_to_end(runtime, spec)
    assert code == 2  # busybox sh gives up on the failed fork
    assert b"can't fork" in err
    assert out == b""


# -- stop and remove ---------------------------------------------------------------------------
async def test_stop_waits_the_grace_period_then_kills(make_runtime: Factory) -> None:
    runtime = make_runtime()
    spec = spec_for(
        runtime,
        ["sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"],
        resources=ResourceSlots.parse({"mem": "64m"}),  # a kill on request is not an OOM
    )
    handle = await runtime.start(spec)
    await read_until(runtime.logs(handle, {}), lambda cs: has(cs, "stdout", b"ready"))
    await runtime.stop(handle, 0.5)
    status = await runtime.wait(handle)
    assert (status.exit_code, status.oom_killed) == (137, False)
    assert status.reason == "stopped on request (SIGKILL)"
    await runtime.remove(handle)
    assert await runtime.list_kernels() == []


async def test_stop_ends_a_cooperative_container_with_sigterm(make_runtime: Factory) -> None:
    runtime = make_runtime()
    handle = await runtime.start(spec_for(runtime, ["sleep", "600"]))
    await runtime.stop(handle, 30)
    status = await runtime.wait(handle)
    assert (status.exit_code, status.reason) == (143, "stopped on request (SIGTERM)")
    await runtime.remove(handle)
    await runtime.remove(handle)  # twice is fine
    assert await runtime.list_kernels() == []


# -- images ----------------------------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("image", "reason"),
    [
        pytest.param("localhost/jobgate-no-such-image:1", "never pulled", id="local"),
        pytest.param(
            "registry.invalid/jobgate/none:1",
            r"^registry unreachable: registry\.invalid "
            r"\(pulling registry\.invalid/jobgate/none:1\)",
            id="no-registry",  # the name does not resolve: said as such, not "not found"
        ),
    ],
)
async def test_missing_image_is_final(make_runtime: Factory, image: str, reason: str) -> None:
    runtime = make_runtime()
    lines: list[str] = []

    async def progress(message: str) -> None:
        lines.append(message)

    with pytest.raises(ImageNotFound, match=reason):
        await runtime.prepare(spec_for(runtime, ["true"], image=image), progress)
    assert all("%" not in line for line in lines)


# -- restart of the worker -----------------------------------------------------------------------
async def test_a_restarted_worker_resumes_logs_and_exit(make_runtime: Factory) -> None:
    first = make_runtime()
    script = "for i in 1 2 3 4 5 6; do echo out$i; echo err$i >&2; sleep 0.2; done; exit 5"
    spec = spec_for(first, ["sh", "-c", script], ports=[ServicePort("web", "http", 8080)])
    handle = await first.start(spec)
    early = await read_until(first.logs(handle, {}), lambda cs: has(cs, "stdout", b"out2\n"))
    offsets = {s: len(joined(early, s)) for s in ("stdout", "stderr")}
    await first.close()  # the worker dies; the container runs on

    second = make_runtime(first.context.node_id)
    (found,) = await second.list_kernels()
    assert (found.kernel_id, found.session_id, found.ref) == (
        spec.kernel_id,
        spec.session_id,
        handle.ref,
    )
    assert found.ports == handle.ports
    rest = [c async for c in second.logs(found, offsets)]
    status = await second.wait(found)
    assert status.exit_code == 5
    out = joined(early, "stdout") + joined_from(rest, "stdout", offsets["stdout"])
    err = joined(early, "stderr") + joined_from(rest, "stderr", offsets["stderr"])
    assert out == b"".join(b"out%d\n" % i for i in range(1, 7))
    assert err == b"".join(b"err%d\n" % i for i in range(1, 7))


def joined_from(chunks: list[LogChunk], stream: str, start: int) -> bytes:
    data = b""
    for chunk in chunks:
        if chunk.stream == stream:
            assert chunk.offset == start + len(data)
            data += chunk.data
    return data


async def test_a_container_that_exited_while_the_worker_was_down(make_runtime: Factory) -> None:
    first = make_runtime()
    handle = await first.start(spec_for(first, ["sh", "-c", "echo bye; exit 9"]))
    await first.close()
    second = make_runtime(first.context.node_id)
    await second.wait(handle)  # let it finish; a fresh handle comes from list_kernels
    (found,) = await second.list_kernels()
    assert found.exited
    assert (await second.wait(found)).exit_code == 9
    tail = [c async for c in second.logs(found, {"stdout": 2})]
    assert [(c.offset, c.data) for c in tail] == [(2, b"e\n")]


async def test_other_nodes_containers_are_not_listed(make_runtime: Factory) -> None:
    mine, other = make_runtime(), make_runtime(f"other-{uuid.uuid4().hex[:8]}")
    theirs = await other.start(spec_for(other, ["sleep", "600"]))
    assert await mine.list_kernels() == []
    assert [h.ref for h in await other.list_kernels()] == [theirs.ref]
    await other.stop(theirs, 0)


# -- pulling ---------------------------------------------------------------------------------------
@pytest.fixture
def registry_image(podman_socket: str, busybox: str, shared_dir: Path) -> Iterator[str]:
    """An image only a local TLS registry has (so prepare() must pull it), with a 3 MB layer."""
    binary = registry_binary()
    if binary is None:
        missing("no docker-registry or openssl (scripts/build-test-images.sh registry)")
    with local_registry_image(binary, podman_socket, busybox, shared_dir) as image:
        yield image


async def test_a_missing_image_is_pulled_with_progress(
    make_runtime: Factory, registry_image: str
) -> None:
    runtime = make_runtime()
    lines: list[str] = []

    async def progress(message: str) -> None:
        lines.append(message)

    spec = spec_for(runtime, ["sh", "-c", "wc -c < /blob"], image=registry_image)
    await runtime.prepare(spec, progress)
    assert lines[0] == f"pulling {registry_image}"
    assert f"pulling {registry_image}: 2 layers done" in lines  # busybox's and the blob's
    assert lines[-1] == f"pulled {registry_image}"
    handle = await runtime.start(spec)
    out = joined([c async for c in runtime.logs(handle, {})], "stdout")
    assert out.strip() == b"3000000"
    await runtime.remove(handle)
