"""The multi-process deployment as separate OS processes, each of which a test may kill.

PostgreSQL is a throw-away cluster of this test's own (``initdb`` + ``pg_ctl`` on a free
port, as the ``postgres`` user when run as root), so it can be restarted without
touching the shared one; Redis is a private ``redis-server``; the gateway, the scheduler
and the workers are ``jobgate gateway serve``, ``jobgate scheduler run`` and
``jobgate worker run``. Every process is killed only by the pid this harness started.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from waiting import until_sync

from gateway.bootstrap import admin_key
from gateway.db.migrate import upgrade
from jobgate.localnet import free_port, redis_server_argv, wait_port

__all__ = ["ChaosStack", "Component", "PostgresCluster", "pg_bin", "soak_seed"]

NODE_TOKEN = "jgn_chaos-node-token"


def soak_seed() -> int:
    """The chaos soak's seed: ``JOBGATE_SOAK_SEED`` repeats a run; else a fresh one."""
    given = os.environ.get("JOBGATE_SOAK_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


def pg_bin() -> Path | None:
    """The newest PostgreSQL server binaries on this machine (Debian's layout)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    return found[-1].parent if found else None


class PostgresCluster:
    """A PostgreSQL cluster in a directory of its own, on a free port."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = free_port()
        # the postgres user must reach it: not under a 0700 pytest directory
        self.dir = Path(tempfile.mkdtemp(prefix="jobgate-chaos-pg-"))
        self.user = "postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        subprocess.run(
            [*prefix, *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres",
                  "--auth=trust")  # fmt: skip
        self.start()

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200 -c full_page_writes=off"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l",
                  str(self.dir / "log"), "-o", options, "-w", "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """``immediate``: every server process quits at once, as in a crash (recovery on
        the next start)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", mode, "-w",
                  "stop")  # fmt: skip

    def destroy(self) -> None:
        try:
            if (self.dir / "data" / "postmaster.pid").exists():
                self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Component:
    """One long-running process of the deployment, restartable with the same argv."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    #: what its log says once it is up (None: its port is waited for instead)
    ready: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log_from: int = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start {self.starts + 1} ===\n".encode())
            log.flush()
            self._log_from = log.tell()
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.starts += 1

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until this start's output shows :attr:`ready` (a slow machine starts slowly)."""
        ready, proc = self.ready, self.proc
        assert ready is not None
        assert proc is not None

        def up() -> bool:
            with self.log_path.open("rb") as log:
                log.seek(self._log_from)
                if ready.encode() in log.read():
                    return True
            assert proc.poll() is None, f"{self.name} exited {proc.returncode}:\n{self.tail()}"
            return False

        until_sync(up, timeout=timeout, what=lambda: f"{self.name} ready:\n{self.tail()}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return f"--- {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class ChaosStack:
    """PostgreSQL, Redis, gateway, scheduler and workers, as processes of their own."""

    tmp: Path
    workers: tuple[str, ...] = ("c1", "c2")
    settings: dict[str, str] = field(default_factory=dict)
    pg: PostgresCluster | None = None
    redis_port: int = field(default_factory=free_port)
    port: int = field(default_factory=free_port)
    admin: str = ""
    components: dict[str, Component] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def data_dir(self) -> Path:
        return self.tmp / "data"

    def start(self, bin_dir: Path) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pg = PostgresCluster(bin_dir)
        self.pg.init()
        database = self.pg.url.replace("postgresql://", "postgresql+asyncpg://")
        upgrade(database)
        self.admin = asyncio.run(admin_key(database, key_name="chaos"))
        me = [sys.executable, "-m", "jobgate"]
        env = (
            {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
            | {
                "JOBGATE_DATA_DIR": str(self.data_dir),
                "JOBGATE_DATABASE_URL": database,
                "JOBGATE_REDIS_URL": self.redis_url,
                "JOBGATE_NODE_TOKEN": NODE_TOKEN,
                "JOBGATE_PROXY_SECRET": "chaos-proxy-secret",
                "JOBGATE_GATEWAY_URL": self.url,
                "JOBGATE_API_KEY_CACHE_S": "0",
                "JOBGATE_DEFAULT_EGRESS": "open",  # process-runtime workers enforce no egress
                "PYTHONUNBUFFERED": "1",
            }
            | self.settings
        )
        self._add("redis", redis_server_argv(self.tmp, port=self.redis_port), env)
        self._add("gateway", [*me, "gateway", "serve", "--port", str(self.port)], env)
        self._add("scheduler", [*me, "scheduler", "run"], env, "jobgate scheduler:")
        for node in self.workers:
            worker_env = env | {
                "JOBGATE_NODE_ID": node,
                "JOBGATE_WORKER_RUNTIME": "process",
                "JOBGATE_WORKER_CPU": "4",
                "JOBGATE_WORKER_MEM": "8g",
                "JOBGATE_ACCELERATORS": "none",
            }
            self._add(node, [*me, "worker", "run"], worker_env, " ready: ")
        for name, component in self.components.items():
            component.start()
            self._wait_up(name)

    def _add(self, name: str, argv: list[str], env: dict[str, str], ready: str = "") -> None:
        path = self.tmp / f"{name}.log"
        self.components[name] = Component(name, argv, env, path, ready or None)

    def _wait_up(self, name: str) -> None:
        if name == "redis":
            wait_port(self.redis_port, 10)
        elif name == "gateway":
            wait_port(self.port, 120)
        else:
            self.components[name].wait_ready()

    def restart(self, name: str, down_s: float = 0.0) -> None:
        """SIGKILL the component, leave it down *down_s*, start it again and wait until
        it is up."""
        component = self.components[name]
        component.kill9()
        time.sleep(down_s)
        component.start()
        self._wait_up(name)

    def restart_postgres(self, down_s: float = 0.0) -> None:
        """An immediate shutdown (a crash: recovery on the next start), *down_s* down."""
        assert self.pg is not None
        self.pg.stop("immediate")
        time.sleep(down_s)
        self.pg.start()

    def close(self) -> None:
        for component in reversed(list(self.components.values())):
            component.stop()
        if self.pg is not None:
            self.pg.destroy()

    def logs(self) -> str:
        return "\n".join(c.tail() for c in self.components.values())

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the gateway answers and lists every worker's node as ready."""
        import httpx

        wanted = set(self.workers)

        def up() -> bool:
            try:
                r = httpx.get(
                    f"{self.url}/v1/nodes", headers={"Authorization": f"Bearer {self.admin}"}
                )
            except httpx.HTTPError:
                return False
            ready = {n["id"] for n in r.json()["items"] if n["status"] == "ready"}
            return r.status_code == 200 and wanted <= ready

        until_sync(up, timeout=timeout, interval=0.1, what=lambda: f"the stack up:\n{self.logs()}")


@contextmanager
def chaos_stack(tmp: Path, bin_dir: Path, **settings: str) -> Iterator[ChaosStack]:
    stack = ChaosStack(tmp, settings=settings)
    try:
        stack.start(bin_dir)
        stack.wait_ready()
        yield stack
    finally:
        stack.close()
