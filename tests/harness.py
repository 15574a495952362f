"""A factory for real jobgate stacks inside one test's event loop.

The gateway is a real uvicorn server on a random port (tests talk to it with a real
HTTP client), the scheduler and workers are the real components as asyncio tasks, and
the database and Redis are the real services from ``tests/conftest.py``. Components can
be stopped and started again mid-test (gateway restart, worker restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from pydantic import SecretStr
from waiting import until

from gateway.api.http11 import GatewayProtocol
from gateway.app import create_app
from gateway.bootstrap import ensure_admin_key, ensure_default_group
from gateway.config import GatewaySettings
from gateway.db.engine import create_engine, create_session_factory
from gateway.loops.scheduler_process import run_scheduler
from jobgate.client import tls_for
from jobgate.localnet import free_port
from workers.agent import Agent
from workers.config import WorkerSettings
from workers.keeper import PID_FILE as KEEPER_PID
from workers.keeper import keeper_pid

__all__ = ["Stack", "free_port"]

NODE_TOKEN = "jgn_test-node-token"
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}


@dataclass
class WorkerHandle:
    settings: WorkerSettings
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def close(self) -> None:
        self.stop.set()
        done, _ = await asyncio.wait({self.task}, timeout=60)
        if not done:
            # a worker that has not stopped a minute after it was asked: cancelling it
            # leaves its connections to the garbage collector (pyproject's filterwarnings);
            # where it waited goes to the run's artefacts for whoever hunts that hang
            _note_hung_worker(self.settings.node_id, self.task)
            self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if not done:
            raise TimeoutError(f"worker {self.settings.node_id} did not stop within 60 s")
        self.task.result()


def _note_hung_worker(node_id: str, task: asyncio.Task[None]) -> None:
    """Append where a hung worker's task waits to ``$JOBGATE_TEST_ARTIFACTS/hung-workers.txt``
    (kept after the run, as the console's screenshots are), naming the test."""
    folder = os.environ.get("JOBGATE_TEST_ARTIFACTS")
    if not folder:
        return
    where = []
    step: Any = task.get_coro()
    while step is not None:  # down the chain of awaits to what it waits on
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            where.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    test = os.environ.get("PYTEST_CURRENT_TEST", "?")
    Path(folder).mkdir(parents=True, exist_ok=True)
    with (Path(folder) / "hung-workers.txt").open("a") as out:
        out.write(
            f"== {test}: worker {node_id} did not stop within 60 s\n" + "\n".join(where) + "\n"
        )


def kill_keeper(state_dir: Path) -> None:
    """SIGKILL the node keeper its pid file names (checked to be that keeper)."""
    pid = keeper_pid(state_dir.resolve())
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class WorkerProcess:
    """``jobgate worker run`` as a real process: it can be killed -9 and started again."""

    proc: asyncio.subprocess.Process
    log_path: Path
    state_dir: Path  # DATA_DIR/worker/<node>: its keeper's pid file, its kernels' dirs

    async def kill9(self) -> None:
        """The worker process alone (a crash it restarts from): its keeper and kernels
        live on."""
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def kill_node(self, kernels: bool = True) -> None:
        """What a machine that dies loses: the worker, its keeper and (with *kernels*)
        each kernel's process group and shim - all by the pids they wrote. Without
        *kernels* it is a node cut off (a partition): its kernels run on."""
        await self.kill9()
        kill_keeper(self.state_dir)
        if kernels:
            for kdir in self.state_dir.glob("process/*"):
                for name, kill in (("pid", os.killpg), ("shim.pid", os.kill)):
                    with contextlib.suppress(OSError, ValueError):
                        kill(int((kdir / name).read_text()), signal.SIGKILL)

    async def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.returncode is None:
            self.proc.terminate()
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            return await self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Stack:
    database_url: str
    redis_url: str
    tmp: Path
    settings: GatewaySettings = field(init=False)
    admin_key: str = ""
    port: int = 0
    _server: uvicorn.Server | None = None
    _server_task: asyncio.Task[None] | None = None
    _schedulers: list[asyncio.Task[None]] = field(default_factory=list)
    workers: list[WorkerHandle] = field(default_factory=list)
    processes: list[WorkerProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.settings = GatewaySettings(
            data_dir=self.tmp,
            database_url=self.database_url,
            redis_url=self.redis_url,
            node_token=SecretStr(NODE_TOKEN),
            proxy_secret=SecretStr("test-proxy-secret"),
            tick_interval_s=1.0,
            requeue_after_s=3.0,
            # a worker restarted by a test must not be taken for lost (tests of node
            # loss lower it: stack.settings.node_lost_after_s)
            node_lost_after_s=30.0,
            api_key_cache_s=0.0,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle --------------------------------------------------------------------
    async def bootstrap(self) -> None:
        engine = create_engine(self.settings.effective_database_url)
        try:
            async with create_session_factory(engine)() as db, db.begin():
                await ensure_default_group(db)
                self.admin_key = await ensure_admin_key(db)
        finally:
            await engine.dispose()

    async def start_gateway(self) -> None:
        self._server, self._server_task = await serve_gateway(self.settings, self.port)

    async def stop_gateway(self) -> None:
        if self._server is not None and self._server_task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._server_task, 30)
            self._server = None

    def start_scheduler(self) -> None:
        self._schedulers.append(
            asyncio.create_task(run_scheduler(self.settings, handle_signals=False))
        )

    async def stop_schedulers(self) -> None:
        for task in self._schedulers:
            task.cancel()
        await asyncio.gather(*self._schedulers, return_exceptions=True)
        self._schedulers.clear()

    async def start_worker(self, node_id: str = "n1", **overrides: Any) -> WorkerHandle:
        values: dict[str, Any] = {
            "redis_url": self.redis_url,
            "gateway_url": self.url,
            "node_token": SecretStr(NODE_TOKEN),
            "data_dir": self.tmp,
            "node_id": node_id,
            "worker_runtime": "process",
            "worker_cpu": "4",
            "worker_mem": "8g",
            "heartbeat_interval_s": 0.5,
            "heartbeat_ttl_s": 3.0,
            "stop_grace_s": 2.0,
        } | overrides
        settings = WorkerSettings(**values)
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.create_task(Agent(settings).run(stop, on_ready=ready.set))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({task, waiter}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()
        handle = WorkerHandle(settings, stop, task)
        self.workers.append(handle)
        await self.wait_nodes({n for n in _node_ids(settings)})
        return handle

    async def start_worker_process(
        self,
        node_id: str = "n1",
        enter: Sequence[str] = (),
        args: Sequence[str] = (),
        nodes: set[str] | None = None,
        **env: str,
    ) -> WorkerProcess:
        """A worker in its own process (settings as JOBGATE_* variables in *env*, more
        ``jobgate worker run`` options in *args*), run through the argv prefix *enter*
        (``ip netns exec NS``: tests/partition.py), once the *nodes* it attaches (just
        *node_id* by default; a Slurm host's are its Slurm nodes) registered."""
        values = {
            "JOBGATE_REDIS_URL": self.redis_url,
            "JOBGATE_GATEWAY_URL": self.url,
            "JOBGATE_NODE_TOKEN": NODE_TOKEN,
            "JOBGATE_DATA_DIR": str(self.tmp),
            "JOBGATE_NODE_ID": node_id,
            "JOBGATE_WORKER_RUNTIME": "process",
            "JOBGATE_WORKER_CPU": "4",
            "JOBGATE_WORKER_MEM": "8g",
            "JOBGATE_HEARTBEAT_INTERVAL_S": "0.5",
            "JOBGATE_HEARTBEAT_TTL_S": "3",
            "JOBGATE_STOP_GRACE_S": "2",
        } | env
        log_path = self.tmp / f"worker-{node_id}-{len(self.processes)}.log"
        with log_path.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *enter,
                sys.executable,
                "-m",
                "jobgate",
                "worker",
                "run",
                *args,
                env=os.environ | values,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        handle = WorkerProcess(proc, log_path, self.tmp / "worker" / node_id)
        self.processes.append(handle)
        try:
            await self.wait_nodes(nodes or {node_id})
        except AssertionError:
            raise AssertionError(f"worker {node_id} did not register:\n{handle.log()}") from None
        return handle

    async def close(self) -> None:
        for process in self.processes:
            with contextlib.suppress(Exception):
                await process.terminate()
        for worker in self.workers:
            with contextlib.suppress(Exception):
                await worker.close()
        for pid_file in self.tmp.glob(f"worker/*/{KEEPER_PID}"):  # none outlives the test
            kill_keeper(pid_file.parent)
        await self.stop_schedulers()
        await self.stop_gateway()

    # -- API helpers ------------------------------------------------------------------
    def client(self, key: str | None = None) -> httpx.AsyncClient:
        key = self.admin_key if key is None else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=30, verify=tls_for(self.url)
        )

    async def cli(self, *args: str, key: str | None = None, timeout: float = 120) -> str:
        """``jobgate ARGS`` as a user runs it (a process; the gateway runs in this event
        loop) with *key* (the admin's by default) and no profile; its standard output.
        One that has not ended within *timeout* seconds is killed (its pid) and waited
        for before the test fails: no CLI process outlives the test."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jobgate",
            *args,
            env=os.environ
            | {
                "JOBGATE_URL": self.url,
                "JOBGATE_API_KEY": self.admin_key if key is None else key,
                "JOBGATE_CONFIG": str(self.tmp / "no-profile.toml"),
                "COLUMNS": "200",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()  # SIGKILL to proc.pid, the process this call started
            await proc.wait()
            raise AssertionError(
                f"jobgate {' '.join(args)}: still running after {timeout:g}s (pid {proc.pid}, "
                "killed)"
            ) from None
        assert proc.returncode == 0, f"jobgate {' '.join(args)}: {err.decode()}"
        return out.decode()

    async def create_user(self, name: str, role: str = "user") -> str:
        async with self.client() as api:
            r = await api.post("/v1/users", json={"name": name, "role": role})
            assert r.status_code == 201, r.text
            r = await api.post(f"/v1/users/{name}/keys", json={"name": "test"})
            assert r.status_code == 201, r.text
            key: str = r.json()["key"]
            return key

    async def submit(self, key: str | None = None, **body: Any) -> dict[str, Any]:
        body.setdefault("resources", {"cpu": "0.1", "mem": "64m"})
        async with self.client(key) as api:
            r = await api.post("/v1/sessions", json=body)
            assert r.status_code == 201, r.text
            session: dict[str, Any] = r.json()
            return session

    async def get(self, session_id: str, key: str | None = None) -> dict[str, Any]:
        async with self.client(key) as api:
            r = await api.get(f"/v1/sessions/{session_id}")
            assert r.status_code == 200, r.text
            session: dict[str, Any] = r.json()
            return session

    async def wait_status(
        self, session_id: str, statuses: Iterable[str], timeout: float = 30.0
    ) -> dict[str, Any]:
        wanted = set(statuses)
        seen: dict[str, Any] = {}

        async def reached() -> dict[str, Any] | None:
            seen.update(await self.get(session_id))
            if seen["status"] in wanted:
                return seen
            assert seen["status"] not in TERMINAL, said()
            return None

        def said() -> str:
            return (
                f"session {session_id} is {seen.get('status')} ({seen.get('status_reason')}, "
                f"pending: {seen.get('pending_reason')}), wanted {sorted(wanted)}"
            )

        return await until(reached, timeout=timeout, what=said)

    async def wait_pending(
        self, session_id: str, reason: str, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Until the scheduler has judged a session and holds it back: PENDING with a
        ``pending_reason`` that starts with ``reason`` (the event a test of "nothing
        runs yet" waits for, instead of sleeping through a few passes)."""
        seen: dict[str, Any] = {}

        async def held() -> dict[str, Any] | None:
            seen.update(await self.get(session_id))
            assert seen["status"] == "PENDING", said()
            return seen if (seen.get("pending_reason") or "").startswith(reason) else None

        def said() -> str:
            return (
                f"session {session_id} is {seen.get('status')} "
                f"(pending: {seen.get('pending_reason')}), wanted PENDING: {reason}..."
            )

        return await until(held, timeout=timeout, what=said)

    async def logs(self, session_id: str, key: str | None = None) -> str:
        async with self.client(key) as api:
            r = await api.get(f"/v1/sessions/{session_id}/logs")
            assert r.status_code == 200, r.text
            return r.text

    async def wait_output(self, session_id: str, text: str, timeout: float = 30.0) -> str:
        seen = [""]

        async def output() -> str | None:
            seen[0] = await self.logs(session_id)
            return seen[0] if text in seen[0] else None

        return await until(
            output, timeout=timeout, what=lambda: f"{text!r} in {session_id}'s output {seen[0]!r}"
        )

    async def kernel_ended(self, session: dict[str, Any], timeout: float = 30.0) -> None:
        """Until the process runtime recorded the exit of *session*'s kernel (its shim
        writes ``<data dir>/.../process/<kernel id>/exit``): the event a test of "it ended
        while nobody watched" waits for, with no worker or gateway to tell (so *session*
        is as the API showed it while it ran)."""
        (kernel,) = session["kernels"]
        pattern = f"**/process/{kernel['id']}/exit"
        await until(
            lambda: any(self.tmp.glob(pattern)), timeout=timeout, what=f"{session['id']} ended"
        )

    async def wait_nodes(self, node_ids: set[str], timeout: float = 30.0) -> None:
        async with self.client() as api:

            async def ready() -> bool:
                nodes = (await api.get("/v1/nodes")).json()["items"]
                return node_ids <= {n["id"] for n in nodes if n["status"] == "ready"}

            await until(ready, timeout=timeout, what=f"nodes {sorted(node_ids)} ready")


def _node_ids(settings: WorkerSettings) -> list[str]:
    if settings.sim_nodes:
        return [f"{settings.node_id}-{i:04d}" for i in range(settings.sim_nodes)]
    return [settings.node_id]


@asynccontextmanager
async def started_stack(
    database_url: str, redis_url: str, tmp_path: Path, **settings: Any
) -> AsyncIterator[Stack]:
    """A gateway + scheduler, *settings* over the harness's (``webhook_deliverer=False``
    ...), closed on the way out; the fixtures below and tests that need other settings
    start theirs with it."""
    s = Stack(database_url, redis_url, tmp_path)
    if settings:
        s.settings = s.settings.model_copy(update=settings)
    await s.bootstrap()
    await s.start_gateway()
    s.start_scheduler()
    try:
        yield s
    finally:
        await s.close()


async def serve_gateway(
    settings: GatewaySettings, port: int
) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """A gateway app served on 127.0.0.1:*port* in this event loop, once it answers;
    stop it with ``server.should_exit = True`` and await the task."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            http=GatewayProtocol,  # as `jobgate gateway serve` runs it (zero-copy downloads)
        )
    )
    task = asyncio.create_task(server.serve())

    def started() -> bool:
        if task.done():
            task.result()
        return server.started

    await until(started, timeout=20, interval=0.01, what="the gateway started")
    return server, task
