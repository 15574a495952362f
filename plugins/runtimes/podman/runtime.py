"""The ``podman`` runtime: each kernel is a rootless Podman container.

The worker drives it through :class:`plugins.runtimes.base.Runtime`. Short API calls go
through podman-py in a small thread pool (:mod:`.api`); waiting, logs and pulls are
coroutines on the same socket (:mod:`.streams`). The runtime keeps no state a restart
would lose except "stop requested", which only sharpens an exit reason: everything else
is in the container's labels, so :meth:`list_kernels` on a fresh instance finds it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from plugins.common import EGRESS_MODES
from plugins.runtimes.base import (
    LABEL_INSTANCE,
    LABEL_KERNEL,
    LABEL_NODE,
    ExitStatus,
    ImageNotFound,
    InvalidSpec,
    KernelHandle,
    KernelSpec,
    LogChunk,
    ProgressCallback,
    RuntimeContext,
    RuntimeFailure,
    RuntimeInfo,
)

from . import egress
from .api import NameTaken, PodmanAPI, open_pidfd, peer_pid
from .cgroups import (
    CgroupSupport,
    LimitError,
    Limits,
    apply_v1,
    compute_limits,
    detect,
    oom_kill_file,
    oom_kills,
)
from .exits import exit_status, finished_at, out_of_memory
from .handles import NEVER_STARTED, RUNNING, handle_from_inspect, handle_from_row
from .settings import PodmanSettings
from .spec import container_name, create_body
from .streams import KernelGone, StreamClient
from .wire import notice_tar

__all__ = ["PodmanRuntime"]

log = logging.getLogger(__name__)
T = TypeVar("T")


_SETTLE_POLLS = 300  # after the process ended: inspect every 10 ms for up to 3 s
_SETTLE_INTERVAL = 0.01
_SETTLE_RETRIES = 10


def _running(data: dict[str, Any]) -> bool:
    return str((data.get("State") or {}).get("Status") or "") in RUNNING


async def _process_exit(data: dict[str, Any]) -> bool:
    """Wait for the container's init process to end; False if it cannot be watched here."""
    state = data.get("State") or {}
    fd = open_pidfd(int(state.get("Pid") or 0), int(state.get("ConmonPid") or 0))
    if fd is None:
        return False
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(fd, ended.set_result, None)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return True


def _local_only(image: str) -> bool:
    """``localhost/...`` images are built or loaded on the node; no registry has them."""
    return image.split("/", 1)[0] == "localhost"


class PodmanRuntime:
    """Rootless Podman over its API socket; see the package README for the picture."""

    name: ClassVar[str] = "podman"
    Settings: ClassVar[type[BaseModel]] = PodmanSettings

    def __init__(self, settings: BaseModel | None, context: RuntimeContext) -> None:
        if not isinstance(settings, PodmanSettings):
            settings = PodmanSettings.model_validate(settings.model_dump() if settings else {})
        self.settings: PodmanSettings = settings
        self.context = context
        self._pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="podman-api")
        self._api = PodmanAPI(settings.socket, settings.api_timeout)
        self._streams = StreamClient(settings.socket, stall_timeout=settings.pull_stall_timeout)
        self._support: CgroupSupport | None = None
        self._stop_requested: set[str] = set()  # container ids
        self._exits: dict[str, asyncio.Task[tuple[int, bool]]] = {}
        #: container id -> where its memory cgroup counts OOM kills and the count then
        #: (v1: noted at start, when the worker writes the limits)
        self._oom_counters: dict[str, tuple[Path, int | None]] = {}
        self._closed = False

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking podman-py call in the pool, so the worker's event loop never waits."""
        if self._closed:
            raise RuntimeFailure("the podman runtime was closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    # -- node -------------------------------------------------------------------------
    def _detect(self) -> CgroupSupport:
        text: str | None = None
        path = self.settings.socket_path
        pid = peer_pid(path) if path else None
        if pid is not None:
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/cgroup").read_text()
        return detect(self.settings.cgroup_root, text, self.settings.cgroup_parent)

    async def _cgroups(self) -> CgroupSupport:
        if self._support is None:
            self._support = await self._run(self._detect)
        return self._support

    async def info(self) -> RuntimeInfo:
        path = self.settings.socket_path
        if path and await self._run(peer_pid, path) is None:  # nobody listens: say so, cheaply
            return RuntimeInfo(
                self.name,
                available=False,
                images="required",
                detail=f"Podman API at {self.settings.socket} is unreachable "
                "(run scripts/setup-podman.sh as root)",
            )
        try:
            data = await self._run(self._api.info)
        except RuntimeFailure as exc:
            return RuntimeInfo(self.name, available=False, images="required", detail=str(exc))
        self._support = support = await self._run(self._detect)
        host, store = data.get("host") or {}, data.get("store") or {}
        rootless = (host.get("security") or {}).get("rootless")
        detail = (
            f"{support.detail}; {'rootless' if rootless else 'NOT rootless'}, "
            f"{(host.get('ociRuntime') or {}).get('name', '?')}, "
            f"{store.get('graphDriverName', '?')} storage, network {self.settings.network}"
        )
        return RuntimeInfo(
            name=self.name,
            available=True,
            version=f"podman {(data.get('version') or {}).get('Version', '?')}",
            limits_enforced=support.enforced,
            cgroup=support.mode,
            images="required",
            detail=detail,
            egress=EGRESS_MODES if self._can_filter() else ("open",),
        )

    def _can_filter(self) -> bool:
        """Every container without a network is kept to any egress; with slirp4netns,
        rules need nft here."""
        return self.settings.network == "none" or egress.available()

    # -- prepare ----------------------------------------------------------------------
    async def prepare(self, spec: KernelSpec, progress: ProgressCallback) -> None:
        """Check the spec, then make sure the image is here, pulling it if needed."""
        self._limits(spec)
        create_body(spec, self.settings, native=None, mem_label=None)  # InvalidSpec early
        image = str(spec.image)
        if await self._run(self._api.image_exists, image):
            return
        if _local_only(image):
            raise ImageNotFound(
                image, "not in this node's image store; localhost/ images are never pulled"
            )
        await progress(f"pulling {image}")
        await self._streams.pull(image, progress)
        if not await self._run(self._api.image_exists, image):
            raise ImageNotFound(image, "the pull ended without the image")
        await progress(f"pulled {image}")

    async def image_labels(self, image: str) -> dict[str, str]:
        return await self._run(self._api.image_labels, image)

    # -- start ------------------------------------------------------------------------
    def _limits(self, spec: KernelSpec) -> Limits:
        pids = spec.pids_limit if spec.pids_limit is not None else self.settings.pids_limit
        try:
            return compute_limits(spec.resources, pids, spec.cpuset)
        except LimitError as exc:
            raise InvalidSpec(str(exc)) from None

    def _home(self, kernel_id: str) -> Path:
        """The kernel's own empty /home/work when it has no working tree (see spec._mounts).

        Under the state directory, except for a worker running as root beside another
        user's rootless Podman: that user must traverse to it, and a data directory is
        0700; then ``/var/tmp/jobgate-home-<instance>`` (0711: traversable, not listable).
        """
        root = self.context.state_dir / "podman-home"
        path = self.settings.socket_path
        if os.geteuid() == 0 and path and os.path.exists(path) and os.stat(path).st_uid != 0:
            root = Path("/var/tmp") / f"jobgate-home-{self.context.instance or 'default'}"
            root.mkdir(mode=0o711, parents=True, exist_ok=True)
            root.chmod(0o711)
        return root / kernel_id

    async def start(self, spec: KernelSpec) -> KernelHandle:
        """Create and start; returns once the container runs (with its host ports)."""
        limits = self._limits(spec)
        support = await self._cgroups()
        enforce = support.enforced and not limits.empty
        native = limits if enforce and support.mode == "v2" else None
        delegated = limits if enforce and support.mode == "v1-delegated" else None
        if delegated is not None and not support.cpuset:
            delegated = replace(delegated, cpuset=None)
        if not limits.empty and not support.enforced:
            log.debug("kernel %s: limits not enforced here (%s)", spec.kernel_id, support.detail)
        mem_label = limits.memory if enforce else None
        home = None if spec.working_dir is not None else self._home(spec.kernel_id)
        body = create_body(spec, self.settings, native=native, mem_label=mem_label, home=home)
        tree = spec.working_dir or home
        if tree is not None:
            await asyncio.to_thread(_hand_to_podman_user, tree, self.settings.socket, home)
        if spec.cluster is not None and spec.cluster.config_dir is not None:
            await asyncio.to_thread(
                _hand_to_podman_user, spec.cluster.config_dir, self.settings.socket
            )
        if self.context.instance:
            body["labels"][LABEL_INSTANCE] = self.context.instance
        ref, adopted = await self._create(spec, body)
        if adopted is not None:
            return adopted
        rules = spec.egress.mode != "open" and body["netns"]["nsmode"] != "none"
        link = spec.cluster.attach if spec.cluster is not None else None
        try:
            if rules or link is not None or (delegated is not None and not delegated.empty):
                await self._before_start(ref, spec, delegated, rules)
            await self._run(self._api.start, ref)
            data = await self._run(self._api.inspect, ref) if spec.ports else None
        except BaseException:
            await asyncio.shield(self._discard(ref))
            raise
        if data is None:
            return KernelHandle(
                spec.kernel_id,
                spec.session_id,
                ref,
                started_at=time.time(),
                extra={"mem_limit": mem_label, "state": "running"},
            )
        return handle_from_inspect(data)

    async def _create(
        self, spec: KernelSpec, body: dict[str, Any]
    ) -> tuple[str, KernelHandle | None]:
        """Create the container; a second start of the same kernel adopts the first one."""
        try:
            return await self._run(self._api.create, body), None
        except NameTaken:
            pass
        data = await self._run(self._api.inspect, container_name(spec.kernel_id))
        labels = (data.get("Config") or {}).get("Labels") or {}
        if (
            labels.get(LABEL_KERNEL) != spec.kernel_id
            or labels.get(LABEL_NODE) != spec.node_id
            or labels.get(LABEL_INSTANCE, "") != self.context.instance
        ):
            raise RuntimeFailure(f"container name {body['name']} is taken by something else")
        if (data.get("State") or {}).get("Status") not in NEVER_STARTED:
            return str(data["Id"]), handle_from_inspect(data)  # it ran: never start it twice
        await self._discard(str(data["Id"]))  # half-made by a worker that died: start over
        return await self._run(self._api.create, body), None

    async def _before_start(
        self, ref: str, spec: KernelSpec, delegated: Limits | None, rules: bool
    ) -> None:
        """Initialise the container (its namespaces and cgroups; nothing runs yet), then
        write what Podman cannot: v1 limits, egress rules, a multi-node session's link."""
        await self._run(self._api.init, ref)
        made = await self._run(self._api.inspect, ref)
        pid = int((made.get("State") or {}).get("Pid") or 0)
        if pid <= 0:
            raise RuntimeFailure("the initialised container has no pid")
        if delegated is not None and not delegated.empty:
            await self._apply_delegated(ref, pid, delegated)
        if rules:
            await self._apply_egress(spec, pid, made)
        if spec.cluster is not None and spec.cluster.attach is not None:
            await spec.cluster.attach(pid)

    async def _apply_delegated(self, ref: str, pid: int, limits: Limits) -> None:
        """cgroup v1: write limits into the initialised (not yet running) container's cgroups."""

        def write() -> None:
            text = Path(f"/proc/{pid}/cgroup").read_text()
            apply_v1(self.settings.cgroup_root, text, self.settings.cgroup_parent, limits)
            counter = oom_kill_file(self.settings.cgroup_root, text)
            if counter is not None:
                self._oom_counters[ref] = (counter, oom_kills(counter))

        try:
            await self._run(write)
        except OSError as exc:
            self._support = None  # detect again: the service may have moved
            raise RuntimeFailure(f"cannot enforce limits: {exc}") from exc

    async def _apply_egress(self, spec: KernelSpec, pid: int, made: dict[str, Any]) -> None:
        """The group's egress rules into the initialised container's network namespace.

        The node's addresses are read now (an address it gained since is refused too) in
        the API service's namespace, whose addresses slirp4netns connects from."""
        service = await self.netns_pid()
        where = Path(f"/proc/{service}/net") if service else Path("/proc/net")
        own = await asyncio.to_thread(egress.node_addresses, where)
        peers, dns, links = [], [egress.SLIRP_DNS], []
        cluster = spec.cluster
        if cluster is not None and cluster.network is not None:  # single-node: its peers
            net = ((made.get("NetworkSettings") or {}).get("Networks") or {}).get(cluster.network)
            if net and net.get("IPAddress") and net.get("IPPrefixLen"):
                peers.append(f"{net['IPAddress']}/{net['IPPrefixLen']}")
            if net and net.get("Gateway"):
                dns.append(str(net["Gateway"]))  # aardvark-dns answers there
        if cluster is not None and cluster.link:  # multi-node: the overlay
            links.append(cluster.link)
        script = egress.ruleset(
            spec.egress.mode, spec.egress.allow, own, peers=peers, dns=dns, links=links
        )
        try:
            await egress.apply(pid, script)
        except egress.EgressUnavailable as exc:
            raise RuntimeFailure(f"cannot enforce egress {spec.egress.mode}: {exc}") from None

    async def _discard(self, ref: str) -> None:
        with contextlib.suppress(RuntimeFailure):
            await self._run(self._api.kill, ref, signal.SIGKILL)
        with contextlib.suppress(RuntimeFailure):
            await self._run(self._api.remove, ref)

    # -- networks (cluster sessions) ----------------------------------------------------
    async def create_network(self, name: str) -> str:
        """A private bridge network, isolated from the others; its IPv4 subnet. (Its
        aardvark-dns answers names outside; peers are in each container's /etc/hosts.)"""
        info = await self._run(self._api.info)
        backend = str((info.get("host") or {}).get("networkBackend") or "")
        if backend and backend != "netavark":
            raise RuntimeFailure(
                f"cannot make the session's network: Podman's network backend is {backend}, "
                "not netavark (scripts/setup-podman.sh configures it)"
            )
        body = {
            "name": name,
            "driver": "bridge",
            "dns_enabled": True,
            "labels": self._network_labels(),
            "options": {"isolate": "true"},
        }
        await self._run(self._api.network_create, body)
        return await self._run(self._api.network_subnet, name)

    async def remove_network(self, name: str) -> None:
        await self._run(self._api.network_remove, name)

    async def netns_pid(self) -> int | None:
        """The API service's pid: its network namespace is where containers' ports are
        published and the node's address is (a test may run it in one of its own)."""
        path = self.settings.socket_path
        return await self._run(peer_pid, path) if path else None

    async def list_networks(self) -> list[str]:
        labels = [f"{k}={v}" for k, v in self._network_labels().items()]
        return await self._run(self._api.network_names, labels)

    def _network_labels(self) -> dict[str, str]:
        labels = {LABEL_NODE: self.context.node_id}
        if self.context.instance:
            labels[LABEL_INSTANCE] = self.context.instance
        return labels

    # -- re-attach --------------------------------------------------------------------
    async def list_kernels(self) -> list[KernelHandle]:
        """Every container of this node and worker instance, running or exited, by label."""
        rows = await self._run(self._api.list_node, f"{LABEL_NODE}={self.context.node_id}")
        mine = self.context.instance
        handles = [
            handle_from_row(row)
            for row in rows
            if (row.get("Labels") or {}).get(LABEL_INSTANCE, "") == mine
        ]
        return [h for h in handles if h is not None]

    # -- watch ------------------------------------------------------------------------
    def _exit(self, ref: str) -> asyncio.Task[tuple[int, bool]]:
        """One exit watch per container, shared by wait(), logs() and stop()."""
        task = self._exits.get(ref)
        if task is None:
            task = self._exits[ref] = asyncio.ensure_future(self._watch_exit(ref))
        return task

    async def _watch_exit(self, ref: str) -> tuple[int, bool]:
        """``(exit code, out of memory)`` once the container stopped.

        Podman's wait endpoint polls and answers 0.1-0.35 s late; a pidfd on the
        container's init process wakes the moment it ends, after which a few cheap
        inspects see Podman record the exit (~10-30 ms). Where no pidfd can be had (a
        remote socket, another pid namespace) the long-poll is the fallback.

        Out of memory (``exits.out_of_memory``): the container's memory cgroup counted
        an OOM kill between the reading when this watch began (at start, where the worker
        writes the limits) and the one as soon as the process ended, before Podman's
        clean-up removes the cgroup; Podman's ``OOMKilled`` only where the count could
        not be read (rootless Podman on cgroup v1 never sets it).
        """
        data = await self._inspect_now(ref)
        counter = self._oom_counters.pop(ref, None)
        watched = False
        if _running(data):
            counter = counter or await self._run(self._oom_counter, data)
            watched = await _process_exit(data)
        # at once: Podman's clean-up removes the cgroup soon after the process ended
        kills_after = None if counter is None else await self._run(oom_kills, counter[0])
        if _running(data):
            for _ in range(_SETTLE_POLLS if watched else 0):
                data = await self._inspect_now(ref)
                if not _running(data):
                    break
                await asyncio.sleep(_SETTLE_INTERVAL)
            if _running(data):
                log.debug("container %s: no pidfd here, long-polling Podman", ref[:12])
                await self._streams.wait(ref, self.settings.wait_interval)
                data = await self._inspect_now(ref)
        state = data.get("State") or {}
        code = int(state.get("ExitCode") or 0)
        oom = out_of_memory(
            code,
            podman_flag=bool(state.get("OOMKilled")),
            kills_before=None if counter is None else counter[1],
            kills_after=kills_after,
        )
        return code, oom

    def _oom_counter(self, data: dict[str, Any]) -> tuple[Path, int | None] | None:
        """Where the running container's memory cgroup counts its OOM kills, if readable,
        and the count now."""
        pid = int((data.get("State") or {}).get("Pid") or 0)
        if pid <= 0:
            return None
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return None
        counter = oom_kill_file(self.settings.cgroup_root, text)
        return None if counter is None else (counter, oom_kills(counter))

    async def _inspect_now(self, ref: str) -> dict[str, Any]:
        """Inspect, retrying the errors Podman gives while a process is ending.

        (e.g. ``read /proc/PID/cgroup: no such process`` between the exit and its record.)
        """
        for _ in range(_SETTLE_RETRIES):
            try:
                return await self._run(self._api.inspect, ref)
            except KernelGone:
                raise
            except RuntimeFailure:
                await asyncio.sleep(_SETTLE_INTERVAL * 5)
        return await self._run(self._api.inspect, ref)

    async def wait(self, handle: KernelHandle) -> ExitStatus:
        if handle.extra.get("state") in NEVER_STARTED:
            raise RuntimeFailure("the container was created but never started")
        code, oom = await asyncio.shield(self._exit(handle.ref))
        status = exit_status(
            code,
            stop_requested=handle.ref in self._stop_requested,
            mem_limit=handle.extra.get("mem_limit"),
            oom_flag=oom,
        )
        if handle.exited:  # it ended while no worker watched: when, as Podman recorded it
            with contextlib.suppress(RuntimeFailure):
                state = (await self._inspect_now(handle.ref)).get("State") or {}
                status = replace(status, ended_at=finished_at(state.get("FinishedAt")))
        return status

    async def logs(self, handle: KernelHandle, offsets: dict[str, int]) -> AsyncIterator[LogChunk]:
        """stdout and stderr with per-stream byte offsets, live, ending after the exit."""
        async for chunk in self._streams.logs(handle.ref, offsets, self._exit(handle.ref)):
            yield chunk

    # -- stop -------------------------------------------------------------------------
    async def stop(self, handle: KernelHandle, grace: float) -> None:
        """SIGTERM, up to *grace* seconds for it to exit, then SIGKILL."""
        self._stop_requested.add(handle.ref)
        first = signal.SIGTERM if grace > 0 else signal.SIGKILL
        if not await self._run(self._api.kill, handle.ref, first) or grace <= 0:
            return
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(self._exit(handle.ref))
        except TimeoutError:
            await self._run(self._api.kill, handle.ref, signal.SIGKILL)
        except KernelGone:
            return

    async def write_notice(self, handle: KernelHandle, name: str, text: str) -> None:
        """Into ``/home/work/.jobgate`` through the API (an archive unpacked there): the
        container's own view, whatever is mounted at /home/work."""
        target = self.settings.working_dir_target
        await self._run(self._api.put_archive, handle.ref, target, notice_tar(name, text))

    async def remove(self, handle: KernelHandle) -> None:
        """Kill if still running (a forced remove would wait out the stop timeout), remove."""
        with contextlib.suppress(RuntimeFailure):
            await self._run(self._api.kill, handle.ref, signal.SIGKILL)
        await self._run(self._api.remove, handle.ref)
        self._stop_requested.discard(handle.ref)
        self._oom_counters.pop(handle.ref, None)
        task = self._exits.pop(handle.ref, None)
        if task is not None and not task.done():
            task.cancel()
        await asyncio.to_thread(shutil.rmtree, self._home(handle.kernel_id), True)

    # -- commit -----------------------------------------------------------------------
    async def commit(self, handle: KernelHandle, image: str) -> str:
        """Commit the running container to *image* and push it; the pushed digest.

        ``podman commit`` takes the container's own filesystem only: bind mounts (the
        working tree or the empty home at /home/work, user mounts) are never in it.
        The registry must be one Podman trusts (TLS, or ``certs.d`` for its CA)."""
        await self._streams.commit(handle.ref, image)
        return await self._streams.push(image)

    async def close(self) -> None:
        """Drop connections and threads; containers keep running (a new instance re-attaches)."""
        if self._closed:
            return
        self._closed = True
        for task in self._exits.values():
            task.cancel()
        self._exits.clear()
        await self._streams.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._api.close()


def _hand_to_podman_user(tree: Path, socket: str, create: Path | None = None) -> None:
    """Make the Podman user (the container's root) own a kernel's working directory.

    A worker running as the Podman user (the normal rootless node) already owns the copy
    it unpacked, so this does nothing. A worker running as root next to another user's
    rootless Podman (CI, some hosts) hands the copy over, so the job owns its files.
    *create*: make that (empty) directory first.
    """
    if create is not None:
        create.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not socket.startswith("unix://"):
        return
    owner = os.stat(socket.removeprefix("unix://"))
    if owner.st_uid == 0:
        return
    for directory, dirs, files in os.walk(tree):
        os.lchown(directory, owner.st_uid, owner.st_gid)
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), owner.st_uid, owner.st_gid)
