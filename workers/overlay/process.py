"""The worker's side of a forwarder: start it detached (in the namespace holding the
node's address), recognise it by its control socket, stop it."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from plugins.runtimes.nsenter import nsenter_argv, same_namespace
from workers.overlay.config import OverlayConfig, OverlayError


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
    once its sockets are bound (before it says its pid): its pid. Raises OverlayError
    saying why it did not start."""
    prefix = []
    if netns_pid is not None and not same_namespace(netns_pid, "net"):
        prefix = nsenter_argv(netns_pid)
    argv = [*prefix, sys.executable, "-m", "workers.overlay", "serve", "--config", "-",
            "--detach", "--control", config.control]  # fmt: skip
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
    return int(last.split()[1])


def is_forwarder(pid: int, control: str) -> bool:
    """Whether *pid* is the running forwarder whose control socket is *control* (its
    command line says so: ``workers.overlay``, ``serve`` and exactly that path)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")
    except OSError:
        return False
    return b"workers.overlay" in cmdline and b"serve" in cmdline and os.fsencode(control) in cmdline


def stop(pid: int, control: str, *, grace: float = 5.0) -> bool:
    """Stop the forwarder *pid* of control socket *control* (SIGTERM, SIGKILL after
    *grace* seconds) and wait for it: whether it was running. A pid that is not that
    forwarder is left alone."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_forwarder(pid, control):  # looked at once the pidfd pins the process
            return False
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, sig)
            if select.select([pidfd], [], [], wait)[0]:
                return True
        raise OverlayError(f"the overlay forwarder {pid} did not end")
    finally:
        os.close(pidfd)
