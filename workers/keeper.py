"""The node's keeper: liveness that outlives a worker restart.

A worker that restarts (a crash and systemd's ``Restart=always``, an upgrade) is not a
node that died: its kernels' supervisors (the process runtime's shim, Podman's conmon)
run on, and the next worker re-attaches to them. The worker's heartbeat alone cannot
tell the two apart, so each node also has a keeper, a tiny detached process started
once and kept across worker restarts::

    worker ──spawn (once; STATE/keeper.pid names a live one with the same login: kept)──▶ keeper
      (double fork, own session, like the shim: killing the worker leaves it running)
      every interval: SET jobgate:node-alive:{node} EX ttl
                      EXISTS jobgate:heartbeat:{node}   (is the worker there?)

The gateway counts a node lost only when *both* keys lapsed (the machine is gone, or cut
off: the fast re-run), or when the worker alone stayed silent for
``node_max_disconnect_s``; in between the node is ``disconnected`` and nothing of it is
re-run (docs/node-loss.md). The keeper ends, deleting its key, on SIGTERM (the worker
exits leaving no kernel behind), when its pid file no longer names it (replaced, or the
data dir removed), or once the worker's heartbeat was gone ``max_disconnect`` seconds
(that worker is not coming back).

Run as ``python -m workers.keeper STATE_DIR NODE INTERVAL TTL MAX_DISCONNECT``; the
Redis URL comes in ``JOBGATE_REDIS_URL`` (the environment, not argv: it may hold a
password). It imports only the synchronous Redis client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from contract.keys import heartbeat_key, keeper_key

__all__ = ["PID_FILE", "keeper_pid", "main", "start_keeper", "stop_keeper"]

log = logging.getLogger(__name__)
PID_FILE = "keeper.pid"
#: the SHA-256 of the Redis URL the running keeper was given (never the URL itself)
KEEPER_LOGIN = "keeper.login"


def keeper_pid(state_dir: Path) -> int | None:
    """The pid of this node's running keeper, if one runs (checked, not just read)."""
    try:
        pid = int((state_dir / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None  # no such process (or no /proc: then it cannot be checked)
    except OSError:
        return None
    ours = b"workers.keeper" in cmdline and str(state_dir).encode() in cmdline
    return pid if ours else None


async def start_keeper(
    state_dir: Path,
    node_id: str,
    redis_url: str,
    *,
    interval_s: float,
    ttl_s: float,
    max_disconnect_s: float,
) -> int | None:
    """This node's keeper's pid: the one already running with this Redis login, else a
    new one (None if it could not be started: the node then works, but a restart looks
    like a death). One running with another login (the node joined anew, or it now has a
    Redis user of its own) is stopped first: that login may no longer work."""
    login = hashlib.sha256(redis_url.encode()).hexdigest()
    login_file = state_dir / KEEPER_LOGIN
    if (pid := keeper_pid(state_dir)) is not None:
        if await asyncio.to_thread(_read, login_file) == login:
            log.info("node keeper %d still runs: kept", pid)
            return pid
        log.info("node keeper %d runs with another Redis login: replaced", pid)
        stop_keeper(state_dir)
        for _ in range(500):  # gone within 5 s (it deletes its key on the way out)
            if keeper_pid(state_dir) is None:
                break
            await asyncio.sleep(0.01)
    await asyncio.to_thread(state_dir.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(_write_private, login_file, login)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JOBGATE_REDIS_URL": redis_url}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv = [str(state_dir), node_id, str(interval_s), str(ttl_s), str(max_disconnect_s)]
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "workers.keeper",
            *argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        code = await proc.wait()  # it forks, and this first process exits at once
    except OSError as exc:
        log.warning("cannot start the node keeper: %s", exc)
        return None
    for _ in range(1000):  # its pid file, within 10 s
        if code == 0 and (pid := keeper_pid(state_dir)) is not None:
            log.info("node keeper %d started", pid)
            return pid
        await asyncio.sleep(0.01)
    log.warning("the node keeper did not start (exit %s): a worker restart will look "
                "like the node's loss", code)  # fmt: skip
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")


def stop_keeper(state_dir: Path) -> None:
    """Stop this node's keeper (it deletes its key): the worker exits and no kernel of
    the node is left running, so there is nothing to keep alive."""
    pid = keeper_pid(state_dir)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


# -- the keeper process ------------------------------------------------------------------
def _mine(pid_file: Path) -> bool:
    try:
        return int(pid_file.read_text()) == os.getpid()
    except (OSError, ValueError):
        return False


def _keep(node_id: str, pid_file: Path, every: float, ttl: int, max_gone: float) -> None:
    import redis  # only here: the worker imports this module for start_keeper()

    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop)
    client = redis.Redis.from_url(os.environ["JOBGATE_REDIS_URL"], socket_timeout=max(1.0, every))
    worker_seen = time.monotonic()
    while not stopping.is_set() and _mine(pid_file):
        try:
            pipe = client.pipeline(transaction=False)
            pipe.set(keeper_key(node_id), f"{time.time():.3f}", ex=ttl)
            pipe.exists(heartbeat_key(node_id))
            _, worker = pipe.execute()
            if worker:
                worker_seen = time.monotonic()
        except (OSError, redis.RedisError):
            pass  # Redis away: nothing to keep; the next beat tries again
        if time.monotonic() - worker_seen > max_gone:
            break  # its worker is not coming back: let the node be lost
        stopping.wait(every)
    with contextlib.suppress(OSError, redis.RedisError):
        client.delete(keeper_key(node_id))
    if _mine(pid_file):
        with contextlib.suppress(OSError):
            pid_file.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print("usage: python -m workers.keeper STATE_DIR NODE INTERVAL TTL MAX_DISCONNECT",
              file=sys.stderr)  # fmt: skip
        return 2
    state_dir, node_id = Path(argv[1]), argv[2]
    every, ttl, max_gone = float(argv[3]), max(1, round(float(argv[4]))), float(argv[5])
    if os.fork() > 0:  # detach as the shim does: owned by no worker
        os._exit(0)
    os.setsid()
    pid_file = state_dir / PID_FILE
    tmp = state_dir / f"{PID_FILE}.{os.getpid()}"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, pid_file)  # a keeper this replaces sees it and ends
    _keep(node_id, pid_file, every, ttl, max_gone)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
