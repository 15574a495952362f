"""Sessions in rootless Podman containers, through the whole stack.

A real gateway (HTTP), scheduler, PostgreSQL and Redis, and a worker with the ``podman``
runtime talking to the real rootless API service (scripts/setup-podman.sh), with the
test images of scripts/build-test-images.sh. What is checked is what a user sees:
statuses, exit codes, reasons, logs (whole and followed live), and what Podman itself
says about the containers. Every podman worker gets a node id of its own; the containers
of those nodes are removed after each test, even a failed one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from harness import Stack
from needs import missing
from oci_registry import local_registry_image, registry_binary
from podman import PodmanClient
from podman_harness import BUSYBOX, PYTHON, PodmanNodes, sse, wait_gone, wait_state_not
from waiting import until

from gateway.db.migrate import upgrade
from gateway.db.models import Base
from workers.identity import load_identity

pytestmark = pytest.mark.podman

COUNT_SCRIPT = "for i in $(seq 1 30); do echo line $i; sleep 0.1; done; exit 7"
HAS_CGROUP_V2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()


# -- fixtures ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg_migrated(pg_database: str) -> str:
    upgrade(pg_database)
    return pg_database


@pytest.fixture
async def stack(
    pg_migrated: str, redis_url: str, tmp_path: Path, podman_nodes: PodmanNodes
) -> AsyncIterator[Stack]:
    """Gateway + scheduler on an emptied PostgreSQL database and Redis.

    It asks for ``podman_nodes`` so that its workers stop before that fixture removes
    their containers (a worker would otherwise see its containers vanish).
    """
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    conn = await asyncpg.connect(pg_migrated.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f"TRUNCATE {tables} CASCADE")
    finally:
        await conn.close()
    s = Stack(pg_migrated, redis_url, tmp_path)
    await s.bootstrap()
    await s.start_gateway()
    s.start_scheduler()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture(scope="module")
def images(podman_socket: str) -> dict[str, str]:
    with PodmanClient(base_url=podman_socket) as client:
        for image in (BUSYBOX, PYTHON):
            if not client.images.exists(image):
                missing(f"no {image} (run scripts/build-test-images.sh)")
    return {"busybox": BUSYBOX, "python": PYTHON}


@pytest.fixture
def podman_nodes(podman_socket: str, images: dict[str, str]) -> Iterator[PodmanNodes]:
    nodes = PodmanNodes(podman_socket)
    try:
        yield nodes
    finally:
        nodes.remove_all()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A host directory the Podman user can read (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="jobgate-e2e-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def podman_worker(
    stack: Stack, nodes: PodmanNodes, monkeypatch: pytest.MonkeyPatch, **podman: str
) -> str:
    """A podman worker task for a new node; *podman*: JOBGATE_PODMAN_* settings."""
    node_id = nodes.new()
    for name, value in nodes.env(**podman).items():
        monkeypatch.setenv(name, value)
    await stack.start_worker(node_id, worker_runtime="podman")
    return node_id


def transitions(session: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(h["from_status"], h["to_status"]) for h in session["history"]]


# -- exit codes and output -----------------------------------------------------------------
async def test_python_prints_its_version_and_succeeds(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(
        image=images["python"], command=["python3", "-c", "import sys; print(sys.version)"]
    )
    done = await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert done["exit_code"] == 0
    assert done["node"] == node
    assert (await stack.logs(s["id"])).startswith("3.11.")
    assert transitions(done) == [
        (None, "PENDING"),
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "PREPARING"),
        ("PREPARING", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]


async def test_nonzero_exit_fails_with_its_code(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", "exit 3"])
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 3
    assert done["status_reason"] == "exited with code 3"


async def test_stdout_and_stderr_reach_a_follower_while_it_runs(
    stack: Stack,
    podman_nodes: PodmanNodes,
    images: dict[str, str],
    shared_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job prints on both streams, then waits for a file only the test creates."""
    gate = shared_dir / "gate"
    gate.mkdir(mode=0o755)
    stack.settings.allowed_mount_roots = [str(shared_dir)]
    await podman_worker(stack, podman_nodes, monkeypatch, allowed_mount_roots=str(shared_dir))
    script = "echo out-1; echo err-1 >&2; until [ -e /gate/open ]; do sleep 0.05; done; echo out-2"
    s = await stack.submit(
        image=images["busybox"],
        command=["sh", "-c", script],
        mounts=[{"source": str(gate), "target": "/gate", "read_only": True}],
    )
    label = f"jobgate.session={s['id']}"
    seen: dict[str, str] = {"stdout": "", "stderr": ""}
    end: dict[str, Any] = {}
    try:
        async with stack.client() as api, asyncio.timeout(60):
            async for event, data in sse(api, s["id"]):
                if event == "log":
                    seen[data["stream"]] += data["data"]
                    if seen == {"stdout": "out-1\n", "stderr": "err-1\n"}:
                        # both lines arrived; the job cannot end before the gate opens
                        assert await asyncio.to_thread(podman_nodes.states, label) == ["running"]
                        (gate / "open").touch()
                elif event == "end":
                    end = data
    except TimeoutError:
        raise AssertionError(f"the follower saw only {seen} of a running job") from None
    assert seen == {"stdout": "out-1\nout-2\n", "stderr": "err-1\n"}
    assert end["status"] == "SUCCEEDED"
    assert end["exit_code"] == 0


async def test_session_env_reaches_the_container(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(
        image=images["busybox"],
        command=["sh", "-c", 'echo "$GREETING|$JOBGATE_SESSION_ID|${JOBGATE_NODE_TOKEN:-none}"'],
        env={"GREETING": "hello world"},
    )
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert await stack.logs(s["id"]) == f"hello world|{s['id']}|none\n"


# -- mounts ------------------------------------------------------------------------------
async def test_bind_mounts_from_an_allowed_root(
    stack: Stack,
    podman_nodes: PodmanNodes,
    images: dict[str, str],
    shared_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only input and a writable output directory (owned by the Podman user)."""
    data, out = shared_dir / "data", shared_dir / "out"
    data.mkdir(mode=0o755)
    (data / "in.txt").write_text("from the host\n")
    out.mkdir(mode=0o755)
    os.chown(out, podman_nodes.user_uid(), -1)
    stack.settings.allowed_mount_roots = [str(shared_dir)]
    await podman_worker(stack, podman_nodes, monkeypatch, allowed_mount_roots=str(shared_dir))
    script = (
        "cat /data/in.txt; "
        "touch /data/new 2>/dev/null && echo data-writable || echo data-read-only; "
        "echo result > /out/result.txt"
    )
    s = await stack.submit(
        image=images["busybox"],
        command=["sh", "-c", script],
        mounts=[
            {"source": str(data), "target": "/data", "read_only": True},
            {"source": str(out), "target": "/out"},
        ],
    )
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert await stack.logs(s["id"]) == "from the host\ndata-read-only\n"
    assert (out / "result.txt").read_text() == "result\n"
    assert not (data / "new").exists()


async def test_mount_outside_the_gateways_roots_is_refused_at_create(
    stack: Stack, images: dict[str, str], shared_dir: Path
) -> None:
    stack.settings.allowed_mount_roots = [str(shared_dir)]
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions",
            json={
                "image": images["busybox"],
                "command": ["cat", "/host/passwd"],
                "mounts": [{"source": "/etc", "target": "/host"}],
            },
        )
        assert r.status_code == 403, r.text  # well-formed; the operator's roots forbid it
        problem = r.json()
        assert "/etc is outside the host paths sessions may mount" in problem["detail"]
        assert (await api.get("/v1/sessions")).json()["items"] == []  # nothing was queued


async def test_mount_the_node_does_not_allow_ends_error_with_the_reason(
    stack: Stack,
    podman_nodes: PodmanNodes,
    images: dict[str, str],
    shared_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node checks again with its own (here narrower) roots: defence in depth."""
    (shared_dir / "public").mkdir(mode=0o755)
    (shared_dir / "private").mkdir(mode=0o755)
    stack.settings.allowed_mount_roots = [str(shared_dir)]
    await podman_worker(
        stack, podman_nodes, monkeypatch, allowed_mount_roots=str(shared_dir / "public")
    )
    s = await stack.submit(
        image=images["busybox"],
        command=["ls", "/mnt"],
        mounts=[{"source": str(shared_dir / "private"), "target": "/mnt"}],
    )
    done = await stack.wait_status(s["id"], {"ERROR"})
    assert "is not under an allowed root" in done["status_reason"]
    assert str(shared_dir / "private") in done["status_reason"]


# -- stop, limits, images ----------------------------------------------------------------------
async def test_terminate_stops_and_removes_the_container(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", "echo started; sleep 300"])
    await stack.wait_output(s["id"], "started")
    label = f"jobgate.session={s['id']}"
    assert await asyncio.to_thread(podman_nodes.states, label) == ["running"]
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{s['id']}")
    assert r.status_code == 202
    done = await stack.wait_status(s["id"], {"TERMINATED"})
    assert done["exit_code"] == 143  # SIGTERM, forwarded by the container's init
    await wait_gone(podman_nodes, label)


async def test_memory_limit_kill_fails_with_the_reason(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(
        image=images["busybox"],
        command=["sh", "-c", "echo allocating; dd if=/dev/zero of=/dev/null bs=128M count=1"],
        resources={"cpu": "0.5", "mem": "64m"},
    )
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 137
    assert done["status_reason"].startswith("out of memory (limit"), done["status_reason"]
    assert "64MiB" in done["status_reason"]


@pytest.mark.parametrize(
    ("image", "reason"),
    [
        pytest.param(
            "localhost/jobgate-no-such-image:latest",
            "image not found: localhost/jobgate-no-such-image:latest",
            id="local-only",
        ),
        pytest.param(
            "registry.invalid/jobgate/no-such-image:1",
            "registry unreachable: registry.invalid "
            "(pulling registry.invalid/jobgate/no-such-image:1)",
            id="unreachable-registry",
        ),
    ],
)
async def test_missing_image_ends_error_at_once_after_one_attempt(
    stack: Stack,
    podman_nodes: PodmanNodes,
    monkeypatch: pytest.MonkeyPatch,
    image: str,
    reason: str,
) -> None:
    await podman_worker(stack, podman_nodes, monkeypatch)
    s = await stack.submit(image=image, command=["true"])
    done = await stack.wait_status(s["id"], {"ERROR"}, timeout=15)
    assert done["status_reason"].startswith(reason), done["status_reason"]
    assert transitions(done) == [
        (None, "PENDING"),
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "PREPARING"),
        ("PREPARING", "ERROR"),
    ]


async def test_nodes_show_that_the_podman_node_enforces_limits(
    stack: Stack, podman_nodes: PodmanNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_id = await podman_worker(stack, podman_nodes, monkeypatch)
    async with stack.client() as api:
        nodes = {n["id"]: n for n in (await api.get("/v1/nodes")).json()["items"]}
    node = nodes[node_id]
    expected = "v2" if HAS_CGROUP_V2 else "v1-delegated"
    assert node["runtime"] == "podman"
    assert node["limits_enforced"] is True
    assert node["bind_mounts"] is True  # sessions with mounts may land here
    assert node["cgroup"] == expected
    assert "rootless" in node["runtime_detail"]


async def test_required_limits_keep_a_session_off_a_process_node(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.settings.require_limits_enforced = True
    await stack.start_worker("plain", worker_runtime="process")
    # asking for nothing explicit: the process node may run it
    free = await stack.submit(command=["true"], resources={})
    assert (await stack.wait_status(free["id"], {"SUCCEEDED"}))["node"] == "plain"
    # a Podman node joins the group, cordoned: the limited session can run nowhere yet
    node = await podman_worker(stack, podman_nodes, monkeypatch)
    async with stack.client() as api:
        assert (await api.post(f"/v1/nodes/{node}/cordon")).status_code == 200
    limited = await stack.submit(
        image=images["busybox"], command=["echo", "limited"], resources={"cpu": "0.5"}
    )

    async def held() -> dict[str, Any] | None:
        waiting = await stack.get(limited["id"])
        assert waiting["status"] == "PENDING", waiting
        return waiting if "limits" in (waiting["pending_reason"] or "") else None

    waiting = await until(held, timeout=20, interval=0.1, what="a reason that names limits")
    assert "without enforced cpu/mem limits" in waiting["pending_reason"]
    async with stack.client() as api:
        assert (await api.post(f"/v1/nodes/{node}/uncordon")).status_code == 200
    done = await stack.wait_status(limited["id"], {"SUCCEEDED"})
    assert done["node"] == node
    assert await stack.logs(limited["id"]) == "limited\n"


# -- worker restarts ---------------------------------------------------------------------
async def test_killed_worker_reattaches_to_its_container(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", COUNT_SCRIPT])
    await stack.wait_output(s["id"], "line 5")
    await worker.kill9()
    await asyncio.sleep(0.5)  # the job keeps printing while no worker watches it
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 7
    lines = (await stack.logs(s["id"])).splitlines()
    assert lines == [f"line {i}" for i in range(1, 31)]  # all of it, once, in order
    await wait_gone(podman_nodes, f"jobgate.session={s['id']}")


async def test_job_that_ended_while_the_worker_was_down_is_reported(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    gate_script = "echo before; sleep 1; echo after; exit 4"
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", gate_script])
    await stack.wait_output(s["id"], "before")
    await worker.kill9()
    label = f"jobgate.session={s['id']}"
    await wait_state_not(podman_nodes, label, "running")  # it ended, with nobody watching
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 4
    assert await stack.logs(s["id"]) == "before\nafter\n"
    await wait_gone(podman_nodes, label)


async def test_terminate_while_the_worker_is_down_takes_effect_when_it_returns(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", "echo up; sleep 300"])
    await stack.wait_output(s["id"], "up")
    await worker.kill9()
    async with stack.client() as api:
        assert (await api.delete(f"/v1/sessions/{s['id']}")).json()["status"] == "TERMINATING"
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    done = await stack.wait_status(s["id"], {"TERMINATED"})
    assert done["exit_code"] in (137, 143)  # SIGTERM, or SIGKILL after the grace period
    await wait_gone(podman_nodes, f"jobgate.session={s['id']}")


async def test_container_of_a_session_that_ended_meanwhile_is_removed(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    """The node stays away long enough for its sessions to be given up (ERROR); when the
    worker returns, it finds the container, and the gateway has it stopped and removed."""
    stack.settings.node_lost_after_s = 1.0
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    s = await stack.submit(
        image=images["busybox"], command=["sh", "-c", "echo up; sleep 300"], max_retries=0
    )
    await stack.wait_output(s["id"], "up")
    await worker.kill_node(kernels=False)  # worker and keeper: the node is cut off
    lost = await stack.wait_status(s["id"], {"ERROR"})
    assert lost["status_reason"] == f"node {node} lost; retries spent (0 of 0)"
    label = f"jobgate.session={s['id']}"
    assert await asyncio.to_thread(podman_nodes.states, label) == ["running"]
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    await wait_gone(podman_nodes, label)
    assert (await stack.get(s["id"]))["status"] == "ERROR"


async def test_container_of_no_known_session_is_removed_when_the_worker_starts(
    stack: Stack,
    podman_nodes: PodmanNodes,
    images: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Made by hand with this worker's labels (as a worker whose database was reset left
    it): its node and its instance (the data directory's identity)."""
    node = podman_nodes.new()
    kernel, session = str(uuid.uuid4()), str(uuid.uuid4())
    instance = load_identity(stack.tmp).instance
    labels = {
        "jobgate.node": node,
        "jobgate.instance": instance,
        "jobgate.kernel": kernel,
        "jobgate.session": session,
    }
    with PodmanClient(base_url=podman_nodes.socket) as client:
        stray = client.containers.create(
            images["busybox"], ["sleep", "300"], name=f"jobgate-{kernel}", labels=labels
        )
        stray.start()
    for name, value in podman_nodes.env().items():
        monkeypatch.setenv(name, value)
    await stack.start_worker(node, worker_runtime="podman")
    await wait_gone(podman_nodes, f"jobgate.kernel={kernel}")


async def test_a_lost_node_s_session_runs_again_in_a_container_of_its_own(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    """Node loss with real containers: attempt 2 is a container named apart from attempt
    1's, and the returning node stops attempt 1 without touching the session (its end is
    noted in the history); each attempt's output is kept under it."""
    stack.settings.node_lost_after_s = 1.0
    stack.settings.retry_backoff_s = 0.5
    first, second, env = podman_nodes.new(), podman_nodes.new(), podman_nodes.env()
    doomed = await stack.start_worker_process(first, JOBGATE_WORKER_RUNTIME="podman", **env)
    script = "echo up $JOBGATE_ATTEMPT; sleep 300"
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", script])
    await stack.wait_output(s["id"], "up 1")
    await stack.start_worker_process(second, JOBGATE_WORKER_RUNTIME="podman", **env)
    await doomed.kill_node(kernels=False)  # cut off: its container runs on
    assert await stack.wait_output(s["id"], "up 2", timeout=60) == "up 2\n"  # the latest
    # its output can arrive before the worker's "running" event is applied
    moved = await stack.wait_status(s["id"], {"RUNNING"})
    kernel = moved["kernels"][0]["id"]
    assert (moved["status"], moved["node"], moved["kernels"][0]["attempt"]) == (
        "RUNNING",
        second,
        2,
    )
    label = f"jobgate.session={s['id']}"
    found = await asyncio.to_thread(podman_nodes.containers, label)
    assert sorted(
        (c["Names"][0], c["Labels"]["jobgate.node"], c["State"]) for c in found
    ) == sorted(
        [(f"jobgate-{kernel}", first, "running"), (f"jobgate-{kernel}.a2", second, "running")]
    )
    await stack.start_worker_process(first, JOBGATE_WORKER_RUNTIME="podman", **env)
    await wait_gone(podman_nodes, f"jobgate.kernel={kernel}", timeout=60)  # attempt 1 only
    still = await stack.get(s["id"])

    async def noted() -> dict[str, Any] | None:  # attempt 1's stop, noted in the history
        now = await stack.get(s["id"])
        return now if len(now["history"]) > len(moved["history"]) else None

    still = await until(noted, timeout=60, what="the end of attempt 1 in the history")
    assert (still["status"], still["node"], still["history"][:-1]) == (
        "RUNNING",
        second,
        moved["history"],
    )
    assert still["history"][-1]["reason"].startswith(f"attempt 1 on {first} ended ")
    async with stack.client() as api:
        path = f"/v1/sessions/{s['id']}/logs"
        assert (await api.get(path, params={"attempt": 1})).text == "up 1\n"
        assert (await api.get(path, params={"attempt": 2})).text == "up 2\n"
    assert await asyncio.to_thread(podman_nodes.states, label) == ["running"]
    async with stack.client() as api:
        assert (await api.delete(f"/v1/sessions/{s['id']}")).status_code == 202
    await stack.wait_status(s["id"], {"TERMINATED"})
    await wait_gone(podman_nodes, label)


# -- a worker killed (SIGKILL) in the middle of a container operation ------------------------
async def test_worker_killed_while_starting_a_container_runs_it_once(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    """Killed the moment Podman has the container (created, or just started): the worker
    that comes back starts a never-started container over, or re-attaches to a running
    one; either way the command runs once and its session ends as the command did."""
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", "echo ran; exit 3"])
    label = f"jobgate.session={s['id']}"
    # Podman is another process: poll it, to kill the worker right after the create
    while not await asyncio.to_thread(podman_nodes.states, label):  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    await worker.kill9()
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert (done["exit_code"], done["node"]) == (3, node)
    assert await stack.logs(s["id"]) == "ran\n"  # once
    assert [h["to_status"] for h in done["history"]][-2:] == ["RUNNING", "FAILED"]
    await wait_gone(podman_nodes, label)


async def test_worker_killed_while_stopping_a_container_stops_it_when_back(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str]
) -> None:
    """The container ignores SIGTERM, so the stop waits out its grace; the worker is
    killed meanwhile. The gateway sends the stop again to the worker that comes back,
    which kills the container after the grace: TERMINATED, nothing left behind."""
    stack.settings.stop_grace_s = 3.0
    node, env = podman_nodes.new(), podman_nodes.env()
    worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    script = "trap '' TERM; echo up; while true; do sleep 1; done"
    s = await stack.submit(image=images["busybox"], command=["sh", "-c", script])
    await stack.wait_output(s["id"], "up")
    async with stack.client() as api:
        assert (await api.delete(f"/v1/sessions/{s['id']}")).json()["status"] == "TERMINATING"
    await asyncio.sleep(1.0)  # the worker took the stop job and is waiting out the grace
    await worker.kill9()
    label = f"jobgate.session={s['id']}"
    assert await asyncio.to_thread(podman_nodes.states, label) == ["running"]
    await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
    done = await stack.wait_status(s["id"], {"TERMINATED"}, timeout=60)
    assert done["exit_code"] == 137  # SIGKILL after the grace: TERM was ignored
    assert await stack.logs(s["id"]) == "up\n"
    await wait_gone(podman_nodes, label)


async def test_worker_killed_while_pulling_an_image_pulls_and_runs_it_once(
    stack: Stack, podman_nodes: PodmanNodes, images: dict[str, str], shared_dir: Path
) -> None:
    """Killed while the session is preparing (its image, only a local registry has it,
    being pulled): the worker that comes back prepares it again - it never ran - and
    the command runs once."""
    binary = registry_binary()
    if binary is None:
        missing("no docker-registry or openssl (scripts/build-test-images.sh registry)")
    socket = podman_nodes.socket
    with local_registry_image(binary, socket, images["busybox"], shared_dir, 30_000_000) as image:
        node, env = podman_nodes.new(), podman_nodes.env()
        worker = await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
        s = await stack.submit(image=image, command=["sh", "-c", "wc -c < /blob; exit 5"])
        await stack.wait_status(s["id"], {"PREPARING", "RUNNING"})
        await worker.kill9()
        await stack.start_worker_process(node, JOBGATE_WORKER_RUNTIME="podman", **env)
        done = await stack.wait_status(s["id"], {"FAILED"}, timeout=120)
        assert (done["exit_code"], done["node"]) == (5, node)
        assert (await stack.logs(s["id"])).split() == ["30000000"]  # it ran once
        await wait_gone(podman_nodes, f"jobgate.session={s['id']}")
