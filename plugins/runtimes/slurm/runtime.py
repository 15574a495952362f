"""``SlurmRuntime``: one jobgate node = one Slurm node; a kernel = one batch job on it.

::

    start ──▶ KDIR/env.sh (0600: the kernel's environment, read by the script, never on a
              │            command line, so never in ``scontrol show job``)
              │ KDIR/job.sh (. env.sh; cd; exec the command)
              ▼
            sbatch --parsable --nodelist=NODE --cpus-per-task --mem [--gres=gpu[:type]:N]
                   --export=NONE --no-requeue --open-mode=append --job-name=jobgate-<kernel>
                   --comment=jobgate/<instance>/<session> --output/--error=KDIR/std*
              │ PENDING past start_timeout_s ─▶ scancel, StartDeferred ("Slurm did not start":
              │                                 the gateway places the session again)
              ▼
    logs  ◀── KDIR/stdout, KDIR/stderr (a shared filesystem), from offsets
    wait  ◀── squeue, then scontrol show job (the exit code), then the jobcomp file
    stop  ──▶ scancel --batch --signal=TERM (and to the steps), grace, scancel

``KDIR`` is ``JOBS_DIR/<kernel>`` (``JOBGATE_SLURM_JOBS_DIR``, default the worker's state
directory's ``slurm/``): it must be the same path on the worker and on the Slurm nodes.
A job is never taken for gone because squeue did not list it or did not answer: only
``scontrol show job`` saying it ended, or (its record aged out) the jobcomp file, ends it;
with neither, it is reported lost, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from plugins.accelerators.sharing import DEVICE_SLOT
from plugins.resources import CPU, MEM
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
    StartDeferred,
)
from plugins.runtimes.outfiles import tail_output, write_notice
from plugins.runtimes.slurm.cli import SlurmCli, SlurmRefused, SlurmUnavailable, current_user
from plugins.runtimes.slurm.records import JobRecord, SlurmNode, parse_jobcomp

__all__ = ["JOB_PREFIX", "SlurmRuntime", "SlurmSettings", "exit_status"]

log = logging.getLogger(__name__)

JOB_PREFIX = "jobgate-"
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SlurmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_SLURM_", extra="ignore")

    #: the partitions a ``--runtime slurm`` worker attaches (their nodes become jobgate
    #: nodes); empty: every node Slurm has. Jobs are submitted to the first of them the
    #: node is in.
    partitions: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: a job Slurm has not started within this long is cancelled, and the session placed
    #: again (StartDeferred)
    start_timeout_s: float = Field(default=30.0, gt=0)
    poll_interval_s: float = Field(default=1.0, gt=0)
    #: one Slurm command's time limit, its retries while slurmctld does not answer
    command_timeout_s: float = Field(default=30.0, gt=0)
    retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    #: ``sbatch --time`` (``60``, ``1-00:00:00``); empty: the partition's default
    time_limit: str = ""
    #: a jobcomp/filetxt file (``JobCompLoc``): where a job's end is read once its record
    #: aged out of slurmctld (``MinJobAge``); unset: such a job is reported lost
    jobcomp_file: Path | None = None
    #: where job scripts and output live: the same path on the worker and the nodes
    jobs_dir: Path | None = None
    read_size: int = 64 * 1024

    @field_validator("partitions", mode="before")
    @classmethod
    def _list(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value


def exit_status(job: JobRecord) -> ExitStatus:
    """An ended job's ExitStatus: ``ExitCode=code:signal`` -> code, or 128+signal "killed
    by signal N (SIGNAME)" as the process runtime words it; Slurm's own ends (cancelled,
    time limit, node failure, out of memory) say so."""
    code, sig = job.exit_code, job.exit_signal
    reason: str | None = None
    if sig:
        code = 128 + sig
        reason = f"killed by signal {sig} ({_signal_name(sig)})"
    own = {
        "CANCELLED": ("cancelled in Slurm", 143),
        "TIMEOUT": ("Slurm's time limit ran out", 143),
        "NODE_FAIL": (f"its Slurm node {job.nodes or ''} failed".replace("  ", " "), 137),
        "OUT_OF_MEMORY": ("out of memory (Slurm: OUT_OF_MEMORY)", 137),
        "PREEMPTED": ("preempted by Slurm", 143),
        "BOOT_FAIL": ("its Slurm node failed to boot", 1),
        "DEADLINE": ("Slurm's deadline passed", 1),
    }.get(job.state)
    if own is not None:
        words, default = own
        if not (job.state == "CANCELLED" and sig):  # a signal says enough (a stop's scancel)
            reason = f"{words}; {reason}" if reason else words
        code = code or default
    elif job.state == "FAILED" and code == 0:
        code, reason = 1, f"Slurm: FAILED ({job.reason or 'no reason given'})"
    return ExitStatus(
        exit_code=code,
        oom_killed=job.state == "OUT_OF_MEMORY",
        reason=reason,
        ended_at=job.end_time,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class SlurmRuntime:
    name: ClassVar[str] = "slurm"
    Settings: ClassVar[type[SlurmSettings]] = SlurmSettings

    def __init__(self, settings: SlurmSettings, context: RuntimeContext) -> None:
        self.settings = settings
        self.context = context
        self.root = settings.jobs_dir or context.state_dir / "slurm"
        self.root.mkdir(parents=True, exist_ok=True)
        self.cli = SlurmCli(
            timeout_s=settings.command_timeout_s,
            retries=settings.retries,
            backoff_s=settings.backoff_s,
        )
        self.node: SlurmNode | None = None  # from info()
        self._ended: dict[str, asyncio.Event] = {}

    # -- about the node ---------------------------------------------------------------
    async def info(self) -> RuntimeInfo:
        try:
            version = await self.cli.version()
            config = await self.cli.show_config()
            self.node = next(
                (n for n in await self.cli.show_nodes() if n.name == self.context.node_id), None
            )
        except RuntimeFailure as exc:
            return RuntimeInfo(name=self.name, available=False, detail=str(exc))
        enforced = "cgroup" in config.get("TaskPlugin", "")
        where = self.node.state if self.node else "not known to Slurm"
        limits = "enforced by Slurm's cgroups" if enforced else "not enforced (no task/cgroup)"
        return RuntimeInfo(
            name=self.name,
            available=self.node is not None,
            version=version,
            limits_enforced=enforced,
            cgroup="slurm" if enforced else "n/a",
            bind_mounts=False,  # plain processes on the Slurm node: nowhere to mount into
            images="ignored",
            detail=(
                f"Slurm node {self.context.node_id} ({where}), partition "
                f"{self._partition() or 'default'}: sessions are batch jobs (plain processes); "
                f"limits {limits}"
            ),
        )

    def _partition(self) -> str | None:
        if self.node is None:
            return self.settings.partitions[0] if self.settings.partitions else None
        return next((p for p in self.settings.partitions if p in self.node.partitions), None)

    def _gpu_type(self) -> str:
        """The node's one GPU type ("" when it has none or several: untyped gres)."""
        types = {g.type for g in self.node.gres if g.name == "gpu"} if self.node else set()
        return types.pop() if len(types) == 1 else ""

    async def prepare(self, spec: KernelSpec, progress: ProgressCallback) -> None:
        if not spec.command:
            raise InvalidSpec("the slurm runtime needs a command (it has no images)")

    async def image_labels(self, image: str) -> dict[str, str]:
        return {}

    # -- start ------------------------------------------------------------------------
    def _kdir(self, kernel_id: str) -> Path:
        return self.root / kernel_id

    def _env(self, spec: KernelSpec, home: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["HOME"] = str(home)
        env.update(spec.full_env)
        return env

    def _options(self, spec: KernelSpec, kdir: Path, cwd: Path) -> list[str]:
        cpus = max(1, math.ceil(spec.resources.get(CPU, 1)))
        mem_mb = max(1, math.ceil(spec.resources.get(MEM, 0) / (1024 * 1024)))
        options = [
            f"--nodelist={self.context.node_id}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={cpus}",
            f"--mem={mem_mb}M",
            f"--job-name={JOB_PREFIX}{spec.kernel_id}",
            f"--comment=jobgate/{self.context.instance}/{spec.session_id}",
            f"--output={kdir / 'stdout'}",
            f"--error={kdir / 'stderr'}",
            f"--chdir={cwd}",
            "--open-mode=append",
            "--export=NONE",  # the worker's own environment stays out of the job
            "--no-requeue",  # jobgate decides whether an attempt runs again
        ]
        gpus = math.ceil(spec.resources.get(DEVICE_SLOT, 0))
        if gpus:
            kind = self._gpu_type()
            options.append(f"--gres=gpu:{kind}:{gpus}" if kind else f"--gres=gpu:{gpus}")
        if self.settings.time_limit:
            options.append(f"--time={self.settings.time_limit}")
        if partition := self._partition():
            options.append(f"--partition={partition}")
        return options

    def _write_job(self, spec: KernelSpec, kdir: Path, cwd: Path) -> Path:
        work = kdir / "work"
        work.mkdir(parents=True, exist_ok=True)
        env = self._env(spec, work)
        bad = sorted(name for name in env if not _ENV_NAME.match(name))
        if bad:
            raise InvalidSpec(f"environment variable names a shell cannot set: {', '.join(bad)}")
        env_file = kdir / "env.sh"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script = kdir / "job.sh"
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
        with os.fdopen(fd, "w") as out:
            out.write(
                "#!/bin/sh\n"
                f"# jobgate kernel {spec.kernel_id} of session {spec.session_id}\n"
                f". {shlex.quote(str(env_file))} || exit 126\n"
                f"cd {shlex.quote(str(cwd))} || exit 126\n"
                f"exec {shlex.join(spec.command)}\n"
            )
        return script

    async def start(self, spec: KernelSpec) -> KernelHandle:
        if spec.mounts or spec.folders:
            raise InvalidSpec(
                "bind mounts need a container runtime; this node runs sessions as Slurm "
                "batch jobs (plain processes)"
            )
        kdir = self._kdir(spec.kernel_id)
        kdir.mkdir(parents=True, exist_ok=True)
        cwd = Path(spec.workdir) if spec.workdir else spec.working_dir or kdir / "work"
        script = self._write_job(spec, kdir, cwd)
        if not cwd.is_dir():
            raise InvalidSpec(f"working directory {cwd} does not exist on this node")
        started_at = time.time()
        try:
            job_id = await self.cli.sbatch(self._options(spec, kdir, cwd), script)
        except SlurmRefused as exc:
            raise RuntimeFailure(f"Slurm refused the job: {exc}") from exc
        (kdir / "meta.json").write_text(
            json.dumps({"job_id": job_id, "labels": spec.labels, "started_at": started_at})
        )
        await self._until_started(job_id)
        return KernelHandle(
            kernel_id=spec.kernel_id,
            session_id=spec.session_id,
            ref=job_id,
            started_at=started_at,
        )

    async def _until_started(self, job_id: str) -> None:
        """Return once Slurm started the job (or it already ended); cancel it and defer
        the start (:class:`StartDeferred`, Slurm's state and reason in the message) if it
        is still waiting after ``start_timeout_s``."""
        limit = self.settings.start_timeout_s
        deadline = time.monotonic() + limit
        why = "not yet listed by squeue"
        while True:
            try:
                entries = await self.cli.squeue(jobs=[job_id], all_states=True)
                if entries and not entries[0].waiting:
                    return
                if entries:
                    why = f"{entries[0].state}, {entries[0].reason or 'no reason given'}"
                else:
                    job = await self.cli.show_job(job_id)
                    if job is not None and not job.waiting:
                        return
            except SlurmUnavailable as exc:
                why = str(exc)
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(
                min(self.settings.poll_interval_s, max(0.0, deadline - time.monotonic()))
            )
        with contextlib.suppress(RuntimeFailure):
            await self.cli.scancel(job_id)
        raise StartDeferred(
            f"Slurm did not start job {job_id} within {limit:g}s ({why}); it was cancelled"
        )

    # -- after the start --------------------------------------------------------------
    def _ended_event(self, kernel_id: str) -> asyncio.Event:
        return self._ended.setdefault(kernel_id, asyncio.Event())

    async def ended(self, job_id: str) -> JobRecord | ExitStatus | None:
        """The job's end: its record once Slurm says it ended; an ExitStatus saying it is
        lost if Slurm no longer knows it and the jobcomp file has no line of it; None
        while it runs (or while nothing can be known: squeue failing or empty is never
        taken for an end)."""
        try:
            entries = await self.cli.squeue(jobs=[job_id], all_states=True)
            if entries and entries[0].active:
                return None
            job = await self.cli.show_job(job_id)
        except SlurmUnavailable as exc:
            log.warning("job %s: %s", job_id, exc)
            return None
        if job is not None:
            return None if job.active else job
        if self.settings.jobcomp_file is not None:
            try:
                text = await asyncio.to_thread(self.settings.jobcomp_file.read_text)
            except OSError as exc:
                log.warning("reading %s: %s", self.settings.jobcomp_file, exc)
            else:
                found = parse_jobcomp(text, job_id)
                if found is not None:
                    return found
        where = (
            f"nor does {self.settings.jobcomp_file}"
            if self.settings.jobcomp_file
            else "and no jobcomp file is configured (JOBGATE_SLURM_JOBCOMP_FILE)"
        )
        return ExitStatus(
            exit_code=255,
            reason=f"lost: Slurm no longer knows job {job_id} (its record aged out), {where}",
        )

    async def wait(self, handle: KernelHandle) -> ExitStatus:
        try:
            while True:
                end = await self.ended(handle.ref)
                if isinstance(end, ExitStatus):
                    return end
                if end is not None:
                    return exit_status(end)
                await asyncio.sleep(self.settings.poll_interval_s)
        finally:
            self._ended_event(handle.kernel_id).set()

    async def logs(self, handle: KernelHandle, offsets: dict[str, int]) -> AsyncIterator[LogChunk]:
        ended = self._ended_event(handle.kernel_id)

        async def idle() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), min(self.settings.poll_interval_s, 0.2))

        # files on the file system the nodes share
        async for chunk in tail_output(
            self._kdir(handle.kernel_id), offsets, self.settings.read_size, ended.is_set, idle
        ):
            yield chunk

    async def write_notice(self, handle: KernelHandle, name: str, text: str) -> None:
        write_notice(self._kdir(handle.kernel_id) / "work", name, text)

    async def stop(self, handle: KernelHandle, grace: float) -> None:
        """SIGTERM to the batch script and its steps, *grace* seconds, then scancel."""
        job_id = handle.ref
        if grace > 0:
            # the script, then its steps (srun) if any; best effort: a job that ends
            # meanwhile makes scancel fail in words that vary (or none, exit 229)
            with contextlib.suppress(SlurmRefused):
                await self.cli.scancel(job_id, signal="TERM", batch=True)
                await self.cli.scancel(job_id, signal="TERM")
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if await self.ended(job_id) is not None:
                    return
                await asyncio.sleep(min(self.settings.poll_interval_s, 0.5))
        await self.cli.scancel(job_id)

    async def list_kernels(self) -> list[KernelHandle]:
        """This node's jobs of this worker instance (by job name and comment) whose
        directory is still here (a removed one was reported already)."""
        out = []
        for entry in await self.cli.squeue(user=current_user(), all_states=True):
            if not entry.name.startswith(JOB_PREFIX):
                continue
            tag, _, rest = entry.comment.partition("/")
            instance, _, session_id = rest.partition("/")
            if (tag, instance) != ("jobgate", self.context.instance) or not session_id:
                continue
            if (entry.nodes or entry.requested_nodes) != self.context.node_id:
                continue
            kernel_id = entry.name.removeprefix(JOB_PREFIX)
            try:
                meta = json.loads((self._kdir(kernel_id) / "meta.json").read_text())
            except (OSError, ValueError):
                continue
            if meta.get("job_id") != entry.job_id:
                continue
            out.append(
                KernelHandle(
                    kernel_id=kernel_id,
                    session_id=session_id,
                    ref=entry.job_id,
                    started_at=float(meta.get("started_at", 0.0)),
                    exited=not entry.active,
                    started=not entry.waiting,  # still pending: cancelled and started again
                )
            )
        return out

    async def commit(self, handle: KernelHandle, image: str) -> str:
        raise CommitUnsupported(
            "the slurm runtime runs jobs as plain processes: there is no container image to commit"
        )

    async def remove(self, handle: KernelHandle) -> None:
        if not self._ended_event(handle.kernel_id).is_set():
            with contextlib.suppress(RuntimeFailure):
                await self.cli.scancel(handle.ref)
        self._ended.pop(handle.kernel_id, None)
        await asyncio.to_thread(shutil.rmtree, self._kdir(handle.kernel_id), True)

    async def close(self) -> None:
        """Nothing to release: the jobs belong to Slurm."""
