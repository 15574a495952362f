"""The process runtime's supervisor: ``python -m plugins.runtimes.shim KDIR -- CMD...``.

Like conmon for Podman, it detaches (double fork, new session) and outlives the worker
that started it. It claims the attempt by creating ``KDIR/shim.pid`` (its pid; only if
that file does not exist, see :func:`claim`) and runs CMD in its own process group
with the environment in ``KDIR/env.json``, its stdout and stderr appended
to ``KDIR/stdout`` and ``KDIR/stderr``; it writes the child's pid to ``KDIR/pid`` and,
when the child ends, its exit status to ``KDIR/exit`` (a temporary file renamed into
place, so a reader never sees half of it). A worker that was killed and restarted finds
all it needs in KDIR to re-attach.

Exit codes follow the shell: a child killed by signal N exits 128+N; a command that
cannot be executed exits 127 (not found) or 126 (not executable).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

__all__ = ["FENCED", "claim", "main", "write_exit"]

#: what a restarted worker writes to ``shim.pid`` of a start no shim claimed yet
FENCED = "fenced"


def write_exit(kdir: Path, code: int, signum: int | None = None, error: str | None = None) -> None:
    tmp = kdir / "exit.tmp"
    tmp.write_text(
        json.dumps({"exit_code": code, "signal": signum, "error": error, "at": time.time()})
    )
    os.replace(tmp, kdir / "exit")


def claim(kdir: Path) -> bool:
    """Take the attempt: create ``KDIR/shim.pid`` holding this pid, only if it does not
    exist. A worker restarted before the file appeared fences the start the same way
    (:data:`FENCED`), so a start it repeats never runs beside this one."""
    try:
        fd = os.open(kdir / "shim.pid", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:  # there already (fenced, or taken), or the directory is gone
        return False
    with os.fdopen(fd, "w") as out:
        out.write(str(os.getpid()))
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m plugins.runtimes.shim KDIR -- CMD [ARG...]", file=sys.stderr)
        return 2
    kdir = Path(argv[1])
    command = argv[3:]
    # detach as conmon does: the process the worker started exits at once, the shim
    # lives on as an orphan in its own session, owned by no worker
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    try:
        env = json.loads((kdir / "env.json").read_text())
    except (OSError, ValueError):
        return 0  # its directory is gone (the attempt was given up on): run nothing
    if not claim(kdir):
        return 0  # a restarted worker gave up on this start, or another shim runs it
    # the worker signals the child's process group; the shim itself keeps running to
    # record the exit status (a Python handler, unlike SIG_IGN, is reset by exec)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    with (
        open(kdir / "stdout", "ab", buffering=0) as out,
        open(kdir / "stderr", "ab", buffering=0) as err,
    ):
        try:
            child = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                close_fds=True,
                process_group=0,
            )
        except OSError as exc:
            err.write(f"jobgate: cannot run {command[0]!r}: {exc.strerror}\n".encode())
            code = 127 if exc.errno == errno.ENOENT else 126
            write_exit(kdir, code, error=exc.strerror)
            return 0
        (kdir / "pid").write_text(str(child.pid))
        status = child.wait()
    if status < 0:
        write_exit(kdir, 128 - status, signum=-status)
    else:
        write_exit(kdir, status)
    return 0


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Signals for the shim are meant for the child, which gets them by its group."""


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
