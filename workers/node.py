"""One node's launch pipeline: :class:`NodeAgent`.

::

    start_kernel ──▶ NodeAgent.start ──▶ spec (env, devices reserved) ──▶ KernelRun.launch
                                         └─ after the pull: working dir, folders, apps,
                                            the cluster session's files and network
    stop_kernel / commit_kernel ──▶ the attempt's KernelRun, or "not_started"
    recover ──▶ re-attach to what the runtime lists; start again, or report, the rest
    describe / registration / heartbeat ──▶ what the process sends for this node

A job may arrive twice or after its kernel ended: ``start`` runs an attempt only if it
neither runs here nor left a tombstone. The process around the nodes (arq worker,
heartbeats, shutdown) is :mod:`workers.agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import socket
import time
from typing import Any

from contract.apps import App, secret_env
from contract.cluster import cluster_network
from contract.messages import (
    CommitKernel,
    Heartbeat,
    ImageCommitted,
    KernelEvent,
    KernelReport,
    NodeInfo,
    StartKernel,
    StopKernel,
    WireApp,
)
from contract.secrets import SECRETS_DIR_ENV
from contract.version import VERSION
from plugins.accelerators.base import Reservation, ReservationError
from plugins.accelerators.node import NodeAccelerators, NodeDevices
from plugins.common import Mount
from plugins.resources import ResourceSlots
from plugins.runtimes.base import (
    Egress,
    KernelSpec,
    NetworkRuntime,
    Runtime,
    RuntimeFailure,
    RuntimeInfo,
)
from workers.apps import apps_from_labels, service_port, start_command
from workers.cluster import Overlays, cluster_env, cluster_net, remove_config, write_config
from workers.config import WorkerSettings
from workers.devices import registration_fields
from workers.fingerprint import machine_arch
from workers.folders import folder_env, folder_mounts
from workers.kernel import KernelRun, NodeServices
from workers.overlay import OverlayError
from workers.reporter import EventReporter
from workers.secretfiles import secrets_dir, write_secret_files
from workers.state import KernelState, attempt_ref, parse_ref

__all__ = ["NodeAgent"]

log = logging.getLogger(__name__)


class NodeAgent:
    """One node identity: its runtime, its kernels, its registration."""

    def __init__(
        self,
        node_id: str,
        queue: str,
        runtime: Runtime,
        services: NodeServices,
        settings: WorkerSettings,
        capacity: ResourceSlots,
        accelerators: NodeAccelerators | None = None,
        *,
        hostname: str | None = None,
        arch: str | None = None,
    ) -> None:
        self.node_id = node_id
        #: what it registers as (None: this machine's; a Slurm node's are Slurm's)
        self.hostname = hostname
        self.arch = arch
        self.queue = queue
        self.runtime = runtime
        self.services = services
        self.settings = settings
        self.capacity = capacity
        self.accelerators = accelerators
        self.devices: NodeDevices | None = None
        self.kernels: dict[str, KernelRun] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.runtime_info: RuntimeInfo | None = None
        self.network_locks: dict[str, asyncio.Lock] = {}  # session id -> its network's
        self.overlays = Overlays(settings.state_dir / "overlays")
        self.stats: list[dict[str, Any]] = []
        self._recovered: list[KernelRun] = []

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def describe(self) -> NodeInfo:
        self.runtime_info = info = await self.runtime.info()
        if self.accelerators is not None:
            self.devices = await asyncio.to_thread(self.accelerators.fingerprint)
        capacity = self.capacity + (self.devices.capacity if self.devices else ResourceSlots())
        return NodeInfo(
            node_id=self.node_id,
            hostname=self.hostname or socket.gethostname(),
            address=self.settings.node_address,
            queue=self.queue,
            runtime=info.name,
            resource_group=self.settings.resource_group,
            arch=self.arch or machine_arch(),
            labels=self.settings.labels,
            capacity=capacity.to_json(),
            limits_enforced=info.limits_enforced,
            bind_mounts=info.bind_mounts,
            images=info.images,
            egress=list(info.egress),
            cgroup=info.cgroup,
            runtime_detail=info.detail,
            version=VERSION,
            **registration_fields(self.devices, self.settings.numa_sysfs_root),
            ts=time.time(),  # the kernels below, as of now (no await in between)
            kernels=[
                KernelReport(
                    kernel_id=k.state.kernel_id,
                    session_id=k.state.session_id,
                    attempt=k.state.attempt,
                )
                for k in self.kernels.values()
            ],
        )

    async def registration(self) -> tuple[NodeInfo, list[KernelEvent]]:
        """What the worker registers with: :meth:`describe`, and the last events of the
        attempts that ended here lately, for the gateway to apply again. The ends are
        read after the kernels are listed: a kernel leaves :attr:`kernels` only after its
        tombstone holds its end, so one that ends meanwhile (a kernel started again by
        :meth:`recover` runs while the runtime is asked for its info) is in one or the
        other, never in neither (the gateway would take it for lost)."""
        info = await self.describe()
        endings = []
        for text in self.services.store.recent_endings(EventReporter.KEEP_S):
            with contextlib.suppress(ValueError):
                endings.append(KernelEvent.model_validate_json(text))
        return info, endings

    # -- recovery ---------------------------------------------------------------------
    async def recover(self) -> None:
        """Re-attach to the kernels the runtime still has (watched from
        :meth:`watch_recovered` on, once the registration lists them), start again those
        the worker was killed preparing (their container never existed: they never ran),
        report the ones that vanished."""
        store = self.services.store
        saved = store.load_all()
        for handle in await self.runtime.list_kernels():
            kernel_id, attempt = parse_ref(handle.kernel_id)  # the runtime knows the ref
            state = saved.pop(handle.kernel_id, None) or KernelState(
                kernel_id, handle.session_id, self.node_id, phase="running", attempt=attempt
            )
            if not handle.started:  # created, never run: the worker died starting it
                with contextlib.suppress(Exception):
                    await self.runtime.remove(handle)
                state.phase = "preparing"
                saved[handle.kernel_id] = state  # started again below, as it never ran
                continue
            state.phase = "running"
            run = KernelRun(self.services, state)
            run.handle = handle
            self.kernels[handle.kernel_id] = run
            self._recovered.append(run)
            log.info("re-attached to kernel %s", handle.kernel_id)
        for state in saved.values():
            if state.phase == "preparing" and state.job and not state.requested_stop:
                store.delete(state.ref)  # no tombstone text: start() must not skip it
                store.forget(state.ref)
                self.start(StartKernel.model_validate(state.job))
                log.info("starting kernel %s again (the worker was killed preparing it)",
                         state.ref)  # fmt: skip
                continue
            run = KernelRun(self.services, state)
            if state.phase == "running":
                run.end("lost", message="its container disappeared while the worker was down")
            elif state.requested_stop:
                run.end("not_started", message="stopped before it started")
            else:
                run.end("start_failed", message="the worker restarted while preparing it")
            run._release_working_dir()

    def watch_recovered(self) -> None:
        for run in self._recovered:
            self._spawn(self._watch(run))
        self._recovered.clear()

    async def sweep_networks(self) -> None:
        """Remove the session networks and overlays no container here uses any more (a
        worker killed while a cluster session ran leaves them behind)."""
        if not isinstance(self.runtime, NetworkRuntime):
            return
        sessions = {k.state.session_id for k in self.kernels.values()}
        try:
            await self.overlays.sweep(sessions)
        except (OSError, OverlayError) as exc:
            log.warning("sweeping session overlays: %s", exc)
        live = {cluster_network(s) for s in sessions}
        try:
            for name in await self.runtime.list_networks():
                if name not in live:
                    await self.runtime.remove_network(name)
                    log.info("removed network %s: no container of its session is here", name)
        except RuntimeFailure as exc:
            log.warning("sweeping session networks: %s", exc)

    async def _watch(self, run: KernelRun) -> None:
        try:
            await run.watch()
        finally:
            self.kernels.pop(run.state.ref, None)
            workdirs = self.services.workdirs
            if workdirs is not None and (workdirs.root / "cluster" / run.state.ref).exists():
                await self._cluster_done(run.state.session_id, run.state.ref)

    # -- control jobs -----------------------------------------------------------------
    def start(self, job: StartKernel) -> None:
        ref = attempt_ref(job.kernel_id, job.attempt)
        if ref in self.kernels or self.services.store.is_done(ref):
            return  # a repeated job: already running, or it ran here and ended
        state = KernelState(
            job.kernel_id,
            job.session_id,
            self.node_id,
            devices=job.devices,
            cpuset=job.cpuset,
            attempt=job.attempt,
            job=job.model_dump(mode="json"),
        )
        run = KernelRun(self.services, state)
        self.kernels[ref] = run
        self._spawn(self._launch(run, job))

    async def _launch(self, run: KernelRun, job: StartKernel) -> None:
        try:
            try:
                spec = self.spec(job)
            except ReservationError as exc:
                run.refuse(f"cannot reserve its devices: {exc}")
                return
            await run.launch(spec, functools.partial(self._refine, job))
        finally:
            ref = attempt_ref(job.kernel_id, job.attempt)
            self.kernels.pop(ref, None)
            if job.cluster is not None:
                await self._cluster_done(job.session_id, ref)

    def spec(self, job: StartKernel) -> KernelSpec:
        env = dict(job.env)
        if job.cluster is not None:
            own = isinstance(self.runtime, NetworkRuntime)
            for name, value in cluster_env(job.cluster, job.session_id, job.kernel_id, own).items():
                env.setdefault(name, value)
        env.setdefault("JOBGATE_SESSION_ID", job.session_id)
        env.setdefault("JOBGATE_KERNEL_ID", job.kernel_id)
        env.setdefault("JOBGATE_ATTEMPT", str(job.attempt))
        if job.app_secret:  # the session's apps check it; the session's own env cannot undo it
            env.update(secret_env(job.app_secret))
        return KernelSpec(
            kernel_id=attempt_ref(job.kernel_id, job.attempt),  # names the container
            session_id=job.session_id,
            node_id=self.node_id,
            command=list(job.command),
            image=job.image,
            env=env,
            workdir=job.workdir,
            resources=ResourceSlots.from_json(job.resources),
            mounts=[Mount(m.source, m.target, m.read_only) for m in job.mounts],
            reservation=self._reserve(job),
            cpuset=job.cpuset,
            egress=Egress(job.egress.mode, tuple(job.egress.allow)),
        )

    async def _refine(self, job: StartKernel, spec: KernelSpec) -> tuple[KernelSpec, list[WireApp]]:
        """After the image is here: the working directory, the folders, the apps, the cluster."""
        spec = self._folders(job, await self._working_dir(job, spec))
        spec = await self._secrets(job, spec)
        spec, apps = await self._with_apps(job, spec)
        return await self._cluster(job, spec), apps

    async def _cluster(self, job: StartKernel, spec: KernelSpec) -> KernelSpec:
        """A cluster session's container: its files, and its session's network first."""
        cluster = job.cluster
        if cluster is None or self.runtime.name == "sim":
            return spec
        config_dir = None
        if self.services.workdirs is not None and cluster.ssh_seed:
            config_dir = self.services.workdirs.root / "cluster" / spec.kernel_id
            await asyncio.to_thread(write_config, config_dir, cluster)
        if not isinstance(self.runtime, NetworkRuntime):  # plain processes: the node's network
            return dataclasses.replace(
                spec, cluster=cluster_net(cluster, job.session_id, config_dir)
            )
        async with self._network_lock(job.session_id):
            if cluster.mode == "multi-node":
                try:
                    netns = await self.runtime.netns_pid()
                    attach = await self.overlays.ensure(job.session_id, cluster, netns)
                except (ValueError, OSError, OverlayError) as exc:
                    raise RuntimeFailure(f"cannot join the session's overlay: {exc}") from exc
                net = cluster_net(cluster, job.session_id, config_dir, attach)
            else:
                subnet = await self.runtime.create_network(cluster_network(job.session_id))
                try:
                    net = cluster_net(cluster, job.session_id, config_dir, subnet=subnet)
                except ValueError as exc:
                    raise RuntimeFailure(str(exc)) from exc
        return dataclasses.replace(spec, cluster=net)

    def _network_lock(self, session_id: str) -> asyncio.Lock:
        lock = self.network_locks.get(session_id)
        if lock is None:
            lock = self.network_locks[session_id] = asyncio.Lock()
        return lock

    async def _cluster_done(self, session_id: str, ref: str) -> None:
        """After a cluster container is gone: its files; the network after the last one."""
        if self.services.workdirs is not None:
            await asyncio.to_thread(remove_config, self.services.workdirs.root / "cluster" / ref)
        if not isinstance(self.runtime, NetworkRuntime):
            return
        if any(k.state.session_id == session_id for k in self.kernels.values()):
            return  # another container of the session still runs here
        async with self._network_lock(session_id):
            try:
                await self.runtime.remove_network(cluster_network(session_id))
            except RuntimeFailure as exc:
                log.warning("removing the network of session %s: %s", session_id, exc)
            try:
                await self.overlays.done(session_id)
            except (OSError, ValueError, OverlayError) as exc:
                log.warning("stopping the overlay of session %s: %s", session_id, exc)
        self.network_locks.pop(session_id, None)

    def _folders(self, job: StartKernel, spec: KernelSpec) -> KernelSpec:
        """The session's data folders, bind-mounted (every kernel of it gets the same)."""
        if not job.folders or self.runtime.name == "sim":
            return spec
        can_mount = self.runtime_info.bind_mounts if self.runtime_info else True
        root = self.settings.effective_folders_root
        mounts = folder_mounts(list(job.folders), root, can_mount=can_mount)
        mounted = [f for f in job.folders if any(m.target == f.target for m in mounts)]
        env = folder_env(mounted) | spec.env  # the session's own settings win
        return dataclasses.replace(spec, folders=mounts, env=env)

    async def _secrets(self, job: StartKernel, spec: KernelSpec) -> KernelSpec:
        """The user secrets it receives, fetched now with this node's credential: into
        its environment, or as files of mode 0400 (bind-mounted read-only at their
        paths, or, where the runtime cannot bind-mount, in the directory that
        JOBGATE_SECRETS_DIR names, one file per secret name). Values are never logged."""
        if not job.secrets or self.runtime.name == "sim":
            return spec
        values = await self.services.logs.secrets(job.kernel_id)
        env = dict(spec.env)
        files = [s for s in values if s.path is not None]
        for s in values:
            if s.env is not None:
                env[s.env] = s.value
        folders = list(spec.folders)
        if files:
            workdirs = self.services.workdirs
            if workdirs is None:
                raise RuntimeFailure("this node has no state directory for secret files")
            root = secrets_dir(workdirs.root, spec.kernel_id)
            await asyncio.to_thread(write_secret_files, root, files)
            can_mount = self.runtime_info.bind_mounts if self.runtime_info else True
            if can_mount:
                folders += [Mount(str(root / s.name), s.path or "", True) for s in files]
            else:
                env[SECRETS_DIR_ENV] = str(root)
        return dataclasses.replace(spec, env=env, folders=folders)

    async def _working_dir(self, job: StartKernel, spec: KernelSpec) -> KernelSpec:
        """The kernel's own copy of the session's working tree (sim nodes ignore it)."""
        workdirs = self.services.workdirs
        if job.working_dir is None or workdirs is None or self.runtime.name == "sim":
            return spec
        path = await workdirs.checkout(job.working_dir, attempt_ref(job.kernel_id, job.attempt))
        return dataclasses.replace(spec, working_dir=path)

    async def _with_apps(
        self, job: StartKernel, spec: KernelSpec
    ) -> tuple[KernelSpec, list[WireApp]]:
        """An interactive session's apps: the registry's, else the image's label; an
        inference replica's one app (its server port)."""
        if job.session_type not in ("interactive", "inference"):
            return spec, []
        if job.apps:
            apps = [App(a.name, a.port, a.protocol, a.start, a.strip_prefix) for a in job.apps]
        elif spec.image:
            apps = apps_from_labels(await self.runtime.image_labels(spec.image))
        else:
            apps = []
        if not apps:
            return spec, []
        command = spec.command or start_command(job.session_id, apps) or []
        spec = dataclasses.replace(
            spec, command=command, ports=[*spec.ports, *(service_port(a) for a in apps)]
        )
        wire = [
            WireApp(
                name=a.name,
                port=a.port,
                protocol=a.protocol,
                start=a.start,
                strip_prefix=a.strip_prefix,
            )
            for a in apps
        ]
        return spec, wire

    def _reserve(self, job: StartKernel) -> Reservation:
        if not job.devices:
            return Reservation()
        if self.accelerators is None:
            raise ReservationError("this node has no accelerator plugins")
        return self.accelerators.reserve(job.devices)

    def find(self, kernel_id: str, attempt: int | None) -> KernelRun | None:
        """The run of that attempt of the kernel (any attempt when None)."""
        if attempt is not None:
            return self.kernels.get(attempt_ref(kernel_id, attempt))
        return next((r for r in self.kernels.values() if r.state.kernel_id == kernel_id), None)

    async def commit(self, job: CommitKernel) -> None:
        """Commit the kernel's container to ``job.image`` and push it; report the result."""
        run = self.find(job.kernel_id, None)
        ok, detail, digest = False, "its container does not run on this node", ""
        if run is not None and run.handle is not None:
            try:
                digest = await self.runtime.commit(run.handle, job.image)
                ok, detail = True, ""
            except RuntimeFailure as exc:
                detail = str(exc)
        reported = ImageCommitted(
            image=job.image, session_id=job.session_id, ok=ok, detail=detail, digest=digest
        )
        self.services.reporter.report(reported)

    async def stop(self, job: StopKernel) -> None:
        run = self.find(job.kernel_id, job.attempt)
        if run is None:
            ref = attempt_ref(job.kernel_id, job.attempt or 1)
            if self.services.store.is_done(ref):
                return  # it ran here and its end was reported: nothing to stop, nothing to say
            # never started here: a start job still in the queue must not run it later
            state = KernelState(
                job.kernel_id, job.session_id, self.node_id, attempt=job.attempt or 1
            )
            KernelRun(self.services, state).end("not_started", message="stopped before it started")
            return
        notice = None
        if job.preempted_by is not None:
            notice = (
                f"JOBGATE_PREEMPTED=1\nJOBGATE_PREEMPTED_BY={job.preempted_by}\n"
                f"JOBGATE_GRACE_S={job.grace:g}\n"
            )
        self._spawn(run.stop(job.grace, notice=notice))

    async def stop_all(self, grace: float, reason: str | None = None) -> None:
        """Stop every session of the node (its worker is exiting), *reason* recorded."""
        runs = list(self.kernels.values())
        for run in runs:
            self._spawn(run.stop(grace, reason))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in runs)), grace + 15.0)
        if self.tasks:  # their clean-up after the exit (a cluster session's network ...)
            await asyncio.wait(set(self.tasks), timeout=10.0)

    def heartbeat(self) -> str:
        info = self.runtime_info
        return Heartbeat(
            node_id=self.node_id,
            ts=time.time(),
            kernels=sorted({r.state.kernel_id for r in self.kernels.values()}),
            limits_enforced=info.limits_enforced if info else False,
            stats=self.stats,
        ).model_dump_json()
