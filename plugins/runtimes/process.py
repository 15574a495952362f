"""The ``process`` runtime: a session is a local process group, with no isolation.

For machines without Podman (a laptop, a CI box). Each kernel gets a directory
``STATE/process/<kernel>/`` with its working directory ``work/``, its output files and
the shim's pid and exit files (see :mod:`plugins.runtimes.shim`)::

    worker ──spawn──▶ shim (detached, own session) ──▶ command (own process group)
                        │                       ├─ stdout ▶ KDIR/stdout
                        └─ exit status ▶ KDIR/exit └─ stderr ▶ KDIR/stderr

Images are ignored (the command runs on the host with the worker's PATH), limits are
not enforced, and the environment is the session's own plus a minimal base (PATH,
LANG, HOME=the work directory): the worker's own variables, secrets included, are not
passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

from pydantic_settings import BaseSettings, SettingsConfigDict

from plugins.runtimes.base import (
    CommitUnsupported,
    ExitStatus,
    InvalidSpec,
    KernelHandle,
    KernelSpec,
    LogChunk,
    ProgressCallback,
    RuntimeContext,
    RuntimeFailure,
    RuntimeInfo,
)
from plugins.runtimes.outfiles import tail_output, write_notice
from plugins.runtimes.shim import FENCED

__all__ = ["ProcessRuntime"]

_BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")


class ProcessSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_PROCESS_", extra="ignore")

    python: str = sys.executable
    poll_interval_s: float = 0.05
    read_size: int = 64 * 1024


class ProcessRuntime:
    name: ClassVar[str] = "process"
    Settings: ClassVar[type[ProcessSettings]] = ProcessSettings

    def __init__(self, settings: ProcessSettings, context: RuntimeContext) -> None:
        self.settings = settings
        self.context = context
        self.root = context.state_dir / "process"
        self.root.mkdir(parents=True, exist_ok=True)

    async def info(self) -> RuntimeInfo:
        return RuntimeInfo(
            name=self.name,
            available=True,
            version=f"python {sys.version.split()[0]}",
            limits_enforced=False,
            cgroup="n/a",
            bind_mounts=False,  # a plain process has no file system of its own to mount into
            images="ignored",  # the gateway refuses sessions that name one
            detail="local processes without isolation; images are ignored",
        )

    async def prepare(self, spec: KernelSpec, progress: ProgressCallback) -> None:
        if not spec.command:
            raise InvalidSpec("the process runtime needs a command (it has no images)")

    def _kdir(self, kernel_id: str) -> Path:
        return self.root / kernel_id

    def _env(self, spec: KernelSpec, workdir: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["HOME"] = str(workdir)
        env.update(spec.full_env)
        return env

    async def image_labels(self, image: str) -> dict[str, str]:
        return {}

    async def start(self, spec: KernelSpec) -> KernelHandle:
        if (
            spec.mounts or spec.folders
        ):  # a process shares the host's files: there is nowhere to mount into
            raise InvalidSpec(
                "bind mounts need a container runtime; this node runs sessions as plain "
                "processes (--runtime process)"
            )
        kdir = self._kdir(spec.kernel_id)
        workdir = kdir / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        # --workdir wins; else the session's working tree; else the kernel's own directory
        cwd = Path(spec.workdir) if spec.workdir else spec.working_dir or workdir
        if not cwd.is_dir():
            raise InvalidSpec(f"working directory {cwd} does not exist on this node")
        # a process listens on the host itself: a service's port is the port it was given
        ports = {p.name: p.container_port for p in spec.ports}
        meta = {
            "labels": spec.labels,
            "command": spec.command,
            "started_at": time.time(),
            "ports": ports,
        }
        (kdir / "spec.json").write_text(json.dumps(meta))
        env_file = kdir / "env.json"
        env_file.touch(mode=0o600)
        env_file.write_text(json.dumps(self._env(spec, workdir)))
        try:
            proc = await asyncio.create_subprocess_exec(
                self.settings.python,
                "-m",
                "plugins.runtimes.shim",
                str(kdir),
                "--",
                *spec.command,
                cwd=cwd,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeFailure(f"cannot start the process supervisor: {exc}") from exc
        if await proc.wait() != 0:  # the shim forks and this first process exits at once
            raise RuntimeFailure(f"the process supervisor failed to start ({proc.returncode})")
        shim = await self._until_started(kdir)
        return KernelHandle(
            kernel_id=spec.kernel_id,
            session_id=spec.session_id,
            ref=str(shim),
            ports=ports,
            started_at=meta["started_at"],  # type: ignore[arg-type]
        )

    async def _until_started(self, kdir: Path, timeout: float = 30.0) -> int:
        """The shim's pid, once the command runs (or failed to run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ((kdir / "pid").exists() or (kdir / "exit").exists()) and (
                kdir / "shim.pid"
            ).exists():
                return int((kdir / "shim.pid").read_text())
            await asyncio.sleep(0.005)
        raise RuntimeFailure(f"the process supervisor did not start the command in {timeout}s")

    async def list_kernels(self) -> list[KernelHandle]:
        """The kernels here, for a worker that starts (called before it starts any).

        A start no shim claimed yet (the worker was killed between writing ``spec.json``
        and the shim creating ``shim.pid``) is fenced: this writes ``shim.pid`` first, so
        a late shim finds it taken and runs nothing, and the kernel is listed as never
        started (the worker removes it and starts that attempt once more)."""
        out = []
        for spec_file in sorted(self.root.glob("*/spec.json")):
            try:
                meta = json.loads(spec_file.read_text())
                labels = meta["labels"]
            except (OSError, ValueError, KeyError):
                continue
            if labels.get("jobgate.node") != self.context.node_id:
                continue
            shim = await _shim_pid(spec_file.parent)
            if shim is None:
                continue
            out.append(
                KernelHandle(
                    kernel_id=labels["jobgate.kernel"],
                    session_id=labels["jobgate.session"],
                    ref=str(shim),
                    ports={str(k): int(v) for k, v in meta.get("ports", {}).items()},
                    started_at=float(meta.get("started_at", 0.0)),
                    exited=(spec_file.parent / "exit").exists(),
                    started=shim > 0,
                )
            )
        return out

    def _exit(self, kdir: Path) -> ExitStatus | None:
        try:
            raw = json.loads((kdir / "exit").read_text())
        except (OSError, ValueError):
            return None
        code = int(raw["exit_code"])
        at = raw.get("at")
        ended_at = float(at) if isinstance(at, int | float) else None
        reason = None
        if raw.get("signal"):
            reason = f"killed by signal {raw['signal']} ({signal.Signals(raw['signal']).name})"
        elif raw.get("error"):
            reason = f"could not run the command: {raw['error']}"
        return ExitStatus(exit_code=code, reason=reason, ended_at=ended_at)

    async def wait(self, handle: KernelHandle) -> ExitStatus:
        kdir = self._kdir(handle.kernel_id)
        shim = int(handle.ref)
        while True:
            status = self._exit(kdir)
            if status is not None:
                return status
            if not _alive(shim):
                await asyncio.sleep(0.1)  # the shim may have just written it
                status = self._exit(kdir)
                return status or ExitStatus(
                    exit_code=137, reason="the process supervisor died; the exit status is lost"
                )
            await asyncio.sleep(self.settings.poll_interval_s)

    async def logs(self, handle: KernelHandle, offsets: dict[str, int]) -> AsyncIterator[LogChunk]:
        kdir = self._kdir(handle.kernel_id)
        pid = int(handle.ref)
        async for chunk in tail_output(
            kdir,
            offsets,
            self.settings.read_size,
            lambda: (kdir / "exit").exists() or not _alive(pid),
            lambda: asyncio.sleep(self.settings.poll_interval_s),
        ):
            yield chunk

    async def write_notice(self, handle: KernelHandle, name: str, text: str) -> None:
        """Into ``$HOME/.jobgate`` (the kernel's own work directory), atomically."""
        write_notice(self._kdir(handle.kernel_id) / "work", name, text)

    async def stop(self, handle: KernelHandle, grace: float) -> None:
        kdir = self._kdir(handle.kernel_id)
        try:
            pgid = int((kdir / "pid").read_text())
        except (OSError, ValueError):
            return  # never started or already gone
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        # the exit file is written by the shim, another process: poll it
        while time.monotonic() < deadline and not (kdir / "exit").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if not (kdir / "exit").exists():
            _signal_group(pgid, signal.SIGKILL)

    async def commit(self, handle: KernelHandle, image: str) -> str:
        raise CommitUnsupported(
            "the process runtime runs jobs as host processes: there is no container image to commit"
        )

    async def remove(self, handle: KernelHandle) -> None:
        await asyncio.to_thread(shutil.rmtree, self._kdir(handle.kernel_id), True)

    async def close(self) -> None:
        """Nothing to release: shims belong to no worker."""


async def _shim_pid(kdir: Path) -> int | None:
    """The pid of the kernel's shim; 0 if no shim claimed it (it is fenced now, see
    :meth:`ProcessRuntime.list_kernels`); None if unreadable."""
    path = kdir / "shim.pid"
    if claim_for_nobody(path):
        return 0
    for _ in range(100):  # a shim that just created it writes its pid at once
        try:
            text = path.read_text().strip()
        except OSError:
            return None
        if text == FENCED:
            return 0
        if text.isdigit() and int(text) > 0:
            return int(text)
        await asyncio.sleep(0.01)
    return None


def claim_for_nobody(path: Path) -> bool:
    """Create *path* holding :data:`FENCED` if no shim created it (True if so)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(FENCED)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
