"""Slurm's commands, run as subprocesses: a timeout each, retries with backoff while
slurmctld does not answer, typed errors.

* :class:`SlurmUnavailable` - the controller did not answer (after the retries): nothing
  is known, and nothing may be concluded (a job is never "gone" for it);
* :class:`SlurmRefused` - Slurm answered no (``sbatch``'s own message, an unknown node).

``scontrol show job`` of an id Slurm no longer knows (``Invalid job id specified``) is
``None``, not an error: the caller decides what an aged-out record means.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from plugins.runtimes.base import RuntimeFailure
from plugins.runtimes.slurm.records import (
    SQUEUE_FORMAT,
    JobRecord,
    QueueEntry,
    SlurmNode,
    parse_job,
    parse_node,
    parse_squeue,
)

__all__ = ["SlurmCli", "SlurmRefused", "SlurmUnavailable", "current_user"]

log = logging.getLogger(__name__)

#: what Slurm's clients print when the controller does not answer (worth a retry)
_TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Slurm backup controller in standby mode",
    "Resource temporarily unavailable",
    "Communication connection failure",
)
_INVALID_JOB = "Invalid job id specified"


class SlurmUnavailable(RuntimeFailure):
    """slurmctld did not answer: nothing can be concluded about any job."""


class SlurmRefused(RuntimeFailure):
    """Slurm answered with an error; the message is Slurm's own."""


@dataclass(frozen=True, slots=True)
class _Result:
    rc: int
    out: str
    err: str


class SlurmCli:
    """Slurm's client commands (``SLURM_CONF`` from the environment, as they read it)."""

    def __init__(
        self,
        *,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        bin_dir: Path | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.bin_dir = bin_dir

    def _argv(self, command: str, args: Sequence[str]) -> list[str]:
        program = str(self.bin_dir / command) if self.bin_dir else command
        return [program, *args]

    async def _once(self, argv: list[str]) -> _Result:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise SlurmUnavailable(f"cannot run {argv[0]}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return _Result(-1, "", f"{argv[0]} did not answer within {self.timeout_s:g}s")
        return _Result(
            proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")
        )

    async def run(self, command: str, *args: str, ok_errors: Sequence[str] = ()) -> _Result:
        """Run it; retried while the controller does not answer. A result whose error is
        one of *ok_errors* is returned as it is; any other failure raises."""
        argv = self._argv(command, args)
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            result = await self._once(argv)
            if result.rc == 0 or any(e in result.err for e in ok_errors):
                return result
            message = _message(result.err) or f"{command} exited with {result.rc}"
            transient = result.rc == -1 or any(t in result.err for t in _TRANSIENT)
            if not transient:
                raise SlurmRefused(message)
            if attempt == self.retries:
                raise SlurmUnavailable(f"Slurm does not answer ({command}): {message}")
            log.warning("%s: %s; again in %.1fs", command, message, delay)
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # -- the commands -----------------------------------------------------------------
    async def sbatch(self, options: Sequence[str], script: Path) -> str:
        """Submit; the job id (``--parsable``: ``ID`` or ``ID;cluster``)."""
        result = await self.run("sbatch", "--parsable", *options, str(script))
        job_id = result.out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmRefused(f"sbatch printed no job id: {result.out.strip()!r}")
        return job_id

    async def squeue(
        self,
        *,
        jobs: Sequence[str] = (),
        user: str | None = None,
        partitions: Sequence[str] = (),
        all_states: bool = False,
    ) -> list[QueueEntry]:
        """Jobs as squeue lists them (an unknown job id: none, not an error)."""
        args = ["--noheader", "-o", SQUEUE_FORMAT]
        if jobs:
            args += ["-j", ",".join(jobs)]
        if user:
            args += ["-u", user]
        if partitions:
            args += ["-p", ",".join(partitions)]
        if all_states:
            args += ["-t", "all"]
        result = await self.run("squeue", *args, ok_errors=[_INVALID_JOB])
        return [] if result.rc else parse_squeue(result.out)

    async def show_job(self, job_id: str) -> JobRecord | None:
        """The job's record; None if Slurm no longer knows the id (it aged out)."""
        result = await self.run("scontrol", "show", "job", "-o", job_id, ok_errors=[_INVALID_JOB])
        lines = [line for line in result.out.splitlines() if line.strip()]
        if result.rc or not lines:
            return None
        return parse_job(lines[0])

    async def show_nodes(self) -> list[SlurmNode]:
        result = await self.run("scontrol", "show", "node", "-o")
        return [parse_node(line) for line in result.out.splitlines() if line.strip()]

    async def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as key -> value (``Key = Value`` lines)."""
        result = await self.run("scontrol", "show", "config")
        out = {}
        for line in result.out.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                out[key.strip()] = value.strip()
        return out

    async def version(self) -> str:
        return (await self.run("scontrol", "--version")).out.strip()

    async def scancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        """Cancel (no *signal*), or send *signal* to the job's steps, or (*batch*) to its
        batch script (a batch job without steps gets nothing otherwise, and Slurm 22.05's
        ``--full`` does not reach the script either); a job that ended is not an error."""
        args = []
        if signal:
            args.append(f"--signal={signal}")
        if batch:
            args.append("--batch")
        await self.run(
            "scancel",
            *args,
            job_id,
            ok_errors=["already completing or completed", _INVALID_JOB, "Job/step already"],
        )


def _message(err: str) -> str:
    """Slurm's error lines without their ``sbatch: error:`` prefixes, joined."""
    lines = []
    for line in err.splitlines():
        line = line.strip()
        for prefix in (
            "sbatch: error: ",
            "squeue: error: ",
            "scontrol: error: ",
            "scancel: error: ",
        ):
            line = line.removeprefix(prefix)
        if line:
            lines.append(line)
    return "; ".join(lines)


def current_user() -> str:
    """The user this process runs as (whose jobs it lists)."""
    return pwd.getpwuid(os.getuid()).pw_name
