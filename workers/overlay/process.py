"""The worker's side of a forwarder: start it detached (in the namespace holding the
node's address), recognise it, stop it; and the nsenter helpers attach() shares."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from workers.overlay.config import OverlayConfig, OverlayError


def _same_ns(pid: int, kind: str) -> bool:
    theirs = os.stat(f"/proc/{pid}/ns/{kind}")
    ours = os.stat(f"/proc/self/ns/{kind}")
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def nsenter(pid: int) -> list[str]:
    """nsenter into the network namespace of *pid*; through its user namespace too when
    we are not root (a rootless Podman user's namespaces belong to its user namespace)."""
    user = os.geteuid() != 0 and not _same_ns(pid, "user")
    extra = ["--user", "--preserve-credentials"] if user else []
    return ["nsenter", f"--target={pid}", "--net", *extra]


def helper_env() -> dict[str, str]:
    """The helpers' environment: what finds ip/nsenter and this package, nothing else
    (the worker's may hold credentials)."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def spawn(
    config: OverlayConfig,
    netns_pid: int | None,
    log_path: str | os.PathLike[str],
    *,
    timeout: float = 15.0,
) -> int:
    """Start the forwarder of *config*, detached, in the network namespace of *netns_pid*
    (ours when None or the same); it logs to *log_path* (appended, created 0600). Returns
    once its sockets are bound: its pid. Raises OverlayError saying why it did not start."""
    prefix = []
    if netns_pid is not None and not _same_ns(netns_pid, "net"):
        prefix = nsenter(netns_pid)
    argv = [*prefix, sys.executable, "-m", "workers.overlay", "serve", "--config", "-",
            "--detach"]  # fmt: skip
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        done = subprocess.run(
            argv,
            input=config.to_json().encode(),
            stdout=subprocess.PIPE,
            stderr=fd,
            timeout=timeout,
            env=helper_env(),
            start_new_session=True,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OverlayError(f"the overlay forwarder did not start: {exc}") from exc
    finally:
        os.close(fd)
    said = done.stdout.decode(errors="replace").strip().splitlines()
    last = said[-1] if said else ""
    if done.returncode != 0 or not last.startswith("pid "):
        raise OverlayError(
            f"the overlay forwarder did not start ({done.returncode}): {last or 'no message'}"
            f" (log: {log_path})"
        )
    pid = int(last.split()[1])
    deadline = time.monotonic() + timeout
    while not _is_socket(config.control):  # bound before it forked: at once
        if time.monotonic() > deadline:
            raise OverlayError(f"the overlay forwarder {pid} has no control socket")
        time.sleep(0.01)
    return pid


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def is_forwarder(pid: int) -> bool:
    """Whether *pid* is a running forwarder (its command line says so)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")
    except OSError:
        return False
    return b"workers.overlay" in cmdline and b"serve" in cmdline


def stop(pid: int, *, grace: float = 5.0) -> bool:
    """Stop the forwarder *pid* (SIGTERM, SIGKILL after *grace* seconds) and wait for it:
    whether it was running. A pid that is not a forwarder is left alone."""
    if not is_forwarder(pid):
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_forwarder(pid):  # the pid was reused between the two looks
            return False
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, sig)
            if select.select([pidfd], [], [], wait)[0]:
                return True
        raise OverlayError(f"the overlay forwarder {pid} did not end")
    finally:
        os.close(pidfd)
