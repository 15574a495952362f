"""Run a command in another process's network namespace (a container created but not
started): what the egress rules (``nft -f -``) and the multi-node overlay's TUN helper do.

As root ``nsenter --net`` joins the namespace directly. As the rootless Podman user, a
container's namespaces belong to that user's own user namespace: nsenter joins it too,
keeping our credentials, unless we already are in it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

__all__ = ["NsenterFailed", "nsenter_argv", "run_in_netns", "same_namespace"]


class NsenterFailed(RuntimeError):
    """The command could not run in the namespace, or failed there (its last words)."""


def same_namespace(pid: int, kind: str) -> bool:
    """Whether process *pid* is in our namespace of *kind* (``net``, ``user``, ...)."""
    theirs = os.stat(f"/proc/{pid}/ns/{kind}")
    ours = os.stat(f"/proc/self/ns/{kind}")
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def nsenter_argv(pid: int) -> list[str]:
    """``nsenter`` into the network namespace of *pid* (and its user namespace, see above)."""
    user = os.geteuid() != 0 and not same_namespace(pid, "user")
    extra = ["--user", "--preserve-credentials"] if user else []
    return ["nsenter", f"--target={pid}", "--net", *extra]


async def run_in_netns(
    pid: int,
    argv: Sequence[str],
    *,
    what: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> None:
    """Run *argv* in the network namespace of *pid*; :class:`NsenterFailed` naming *what*
    with the command's last line of stderr when it cannot start, fails or outlasts
    *timeout* seconds (then it is killed)."""
    try:
        full = [*nsenter_argv(pid), *argv]
        proc = await asyncio.create_subprocess_exec(
            *full,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        where = f"in process {pid}'s namespace"
        raise NsenterFailed(f"{what}: cannot run {argv[0]} {where}: {exc}") from None
    try:
        _, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise NsenterFailed(f"{what}: took over {timeout:g} s") from None
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise NsenterFailed(
            f"{what} failed ({proc.returncode}): {lines[-1] if lines else 'no message'}"
        )
