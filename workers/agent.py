"""The node daemon: ``jobgate worker run``, the process around the nodes.

::

    register (NodeInfo + the kernels it found) ──▶ events queue ──▶ gateway
    heartbeat every few seconds ──────────────▶ Redis key with TTL
    node queue ──▶ start_kernel / stop_kernel ──▶ NodeAgent (workers/node.py)
                                                   └─ KernelRun (one task per kernel)
                                                      └─ events, output ──▶ gateway

Control jobs are short: ``start_kernel`` hands the kernel to its own task and returns,
so a slow image pull never holds a queue slot. On start the agent re-attaches to every
kernel its runtime still has, resuming output from the offsets it saved. Which nodes the
process attaches is its host's plan (workers/hosts.py): one; or, on a host of many nodes
(a sim host's simulated nodes, a Slurm partition's nodes), many sharing one queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from arq.connections import ArqRedis
from arq.worker import Worker, func
from redis.exceptions import RedisError

from contract.keys import heartbeat_key, own_jobs
from contract.messages import CommitKernel, StartKernel, StopKernel
from plugins.loader import RUNTIMES, load_one
from plugins.runtimes.base import Runtime, RuntimeContext
from plumbing import arq as queueing
from workers.config import WorkerSettings
from workers.credential import node_credential, redis_login
from workers.hosts import HostPlan, plan_host
from workers.keeper import start_keeper, stop_keeper
from workers.kernel import NodeServices
from workers.metrics import WorkerMetrics
from workers.node import NodeAgent
from workers.reporter import EventReporter
from workers.shipper import LogClient
from workers.state import StateStore
from workers.workdir import BlobClient, WorkdirCache, workdir_root

__all__ = ["Agent"]

log = logging.getLogger(__name__)


def build_runtime(name: str, context: RuntimeContext) -> Runtime:
    factory = load_one(RUNTIMES, name, Runtime)
    runtime: Runtime = factory(factory.Settings(), context)
    return runtime


#: a Redis command that gets no answer for this long fails and its connection goes, so a
#: node behind a partition that healed is heard from within a heartbeat, not after TCP's
#: retransmission backoff (plumbing.arq.connect; docs/node-loss.md)
REDIS_TIMEOUT_S = 5.0


class Agent:
    """Runs one or more NodeAgents until asked to stop."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings.resolved()  # node id and instance from the data dir
        self.nodes: dict[str, NodeAgent] = {}
        self.plan = HostPlan(self.settings.worker_runtime, "")  # made in _start
        #: working-directory caches: one per process, or one per node on a host of many
        #: real nodes (each fetches with its own node's credential)
        self.workdirs: list[WorkdirCache] = []
        #: the node's own Redis login once it joined (contract/acl.py), else the configured
        self.redis_url = self.settings.redis_url

    async def run(self, stop: asyncio.Event, on_ready: Callable[[], None] | None = None) -> None:
        s = self.settings
        # metrics (workers/metrics.py): the reporter and log client count what they ship;
        # /metrics is served only when JOBGATE_WORKER_METRICS_PORT is set
        metrics = WorkerMetrics(lambda: self.nodes)
        await metrics.serve(s.worker_metrics_host, s.worker_metrics_port)
        logs, pool, jobs_pool, reporter, queue = await self._start(metrics)
        await self._keeper()
        # beating before registering: a registration Redis loses (a flush) is then seen
        # by the next beat (its key gone) and sent again with the replay
        beat = asyncio.create_task(self._heartbeats(pool, reporter))
        try:
            for node in self.nodes.values():
                await node.recover()
                await node.sweep_networks()
                # one batch: the gateway reads the kernels it lists and the ends it carries
                # together, so a kernel that ended while no worker ran is never taken for lost
                reporter.register(*await node.registration())
                node.watch_recovered()
        except BaseException:
            beat.cancel()
            raise
        worker = self._worker(queue, jobs_pool)
        consume = asyncio.create_task(queueing.run(worker))
        log.info("worker %s ready: %d node(s) on %s", s.node_id, len(self.nodes), queue)
        if on_ready:
            on_ready()
        try:
            await stop.wait()
        finally:
            await queueing.stop(worker, consume)
            await metrics.close()
            if s.stop_kernels_on_exit:
                for node in self.nodes.values():
                    await node.stop_all(s.stop_grace_s, s.stop_kernels_reason or None)
            await reporter.flush(timeout=10.0)
            if not self.plan.many and not any(n.kernels for n in self.nodes.values()):
                stop_keeper(s.state_dir.resolve())  # nothing left here to keep alive
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            await reporter.close()
            await logs.close()
            for workdirs in self.workdirs:
                await workdirs.close()
            for node in self.nodes.values():
                for task in node.tasks:
                    task.cancel()  # containers live on; a restarted worker re-attaches
                await asyncio.gather(*node.tasks, return_exceptions=True)
                await node.runtime.close()
            for accelerators in {
                id(n.accelerators): n.accelerators for n in self.nodes.values()
            }.values():
                if accelerators is not None:
                    accelerators.close()
            await pool.aclose()

    async def _keeper(self) -> None:
        """The node's keeper (workers/keeper.py): its liveness outlives this process, so a
        restart of the worker is not taken for the node's loss. A host of many nodes has
        none: it is a process, not a machine (a sim host's kernels die with it)."""
        s = self.settings
        if self.plan.many:
            return
        await start_keeper(
            s.state_dir.resolve(),
            s.node_id,
            self.redis_url,
            interval_s=s.heartbeat_interval_s,
            ttl_s=s.heartbeat_ttl_s,
            max_disconnect_s=s.node_max_disconnect_s,
        )

    async def _credentials(self, logs: LogClient) -> dict[str, str]:
        """Each node's own credential: saved, else joined for with the join token (a host
        of many nodes: 16 at a time)."""
        s = self.settings
        gate = asyncio.Semaphore(16)

        async def credential(node_id: str) -> str:
            async with gate:
                return await node_credential(logs.http, s.data_dir, node_id, s.effective_join_token)

        ids = [node.node_id for node in self.plan.nodes]
        return dict(zip(ids, await asyncio.gather(*map(credential, ids)), strict=True))

    async def _start(
        self, metrics: WorkerMetrics
    ) -> tuple[LogClient, ArqRedis, ArqRedis, EventReporter, str]:
        """Join (or read the credentials), log in to Redis, build the nodes: the pools
        (events and heartbeats; the queue's jobs), the reporter and the queue."""
        s = self.settings
        logs = metrics.log_client(s.gateway_url, "")  # each node presents its own credential
        pools: list[ArqRedis] = []
        reporter: EventReporter | None = None
        try:
            self.plan = await plan_host(s)
            credentials = await self._credentials(logs)
            if not self.plan.many:  # its own Redis user where the gateway gives nodes one
                self.redis_url = await redis_login(
                    logs.http, s.redis_url, s.node_id, credentials[s.node_id]
                )
            queue = self.plan.queue
            for default in ("arq:queue", queue):
                pools.append(
                    await queueing.connect_when_up(
                        self.redis_url, default_queue=default, socket_timeout=REDIS_TIMEOUT_S
                    )
                )
            reporter = metrics.reporter(pools[0], None if self.plan.many else s.node_id)
            reporter.start()
            self._build_nodes(queue, reporter, logs, credentials)
            return logs, pools[0], pools[1], reporter, queue
        except BaseException:
            await logs.close()
            if reporter is not None:
                await reporter.close()
            for pool in pools:
                await pool.aclose()
            await metrics.close()
            raise

    def _build_nodes(
        self, queue: str, reporter: EventReporter, logs: LogClient, credentials: dict[str, str]
    ) -> None:
        s = self.settings
        plan = self.plan
        for node in plan.nodes:
            context = RuntimeContext(
                node_id=node.node_id, state_dir=s.state_dir, instance=s.instance_id
            )
            runtime = build_runtime(plan.runtime, context)
            services = NodeServices(
                node.node_id,
                runtime,
                reporter,
                logs.as_node(credentials[node.node_id]),
                StateStore(node.store_dir),
                self._workdirs(node.node_id, credentials[node.node_id]),
            )
            self.nodes[node.node_id] = NodeAgent(
                node.node_id,
                queue,
                runtime,
                services,
                node.settings,
                node.capacity,
                node.accelerators,
                hostname=node.hostname,
                arch=node.arch,
            )

    def _workdirs(self, node_id: str, credential: str) -> WorkdirCache | None:
        """The node's working-directory cache: none for simulated kernels; the process's
        one; on a host of many real nodes, the node's own (the gateway gives a node only
        the blobs of sessions placed on it)."""
        s, plan = self.settings, self.plan
        if not plan.workdirs:
            return None
        if self.workdirs and not plan.many:
            return self.workdirs[0]
        root = workdir_root(s.workdir_root, s.state_dir, plan.runtime, s.instance_id)
        cache = WorkdirCache(
            root / node_id if plan.many else root,
            BlobClient(s.gateway_url, credential),
            s.workdir_cache_bytes,
        )
        self.workdirs.append(cache)
        return cache

    def _worker(self, queue: str, pool: ArqRedis) -> Worker:
        async def start_kernel(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
            job = StartKernel.model_validate(payload)
            node = self.nodes.get(job.node_id)
            if node is None:
                log.error("start for node %s, which this worker does not run", job.node_id)
                return
            node.start(job)

        async def start_kernels(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
            for job in payload["jobs"]:
                await start_kernel(ctx, job)

        async def stop_kernel(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
            job = StopKernel.model_validate(payload)
            node = self.nodes.get(job.node_id) or next(
                (n for n in self.nodes.values() if n.find(job.kernel_id, job.attempt)), None
            )
            if node is None and len(self.nodes) == 1:
                node = next(iter(self.nodes.values()))
            if node is not None:
                await node.stop(job)

        async def commit_kernel(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
            job = CommitKernel.model_validate(payload)
            node = self.nodes.get(job.node_id)
            if node is None:
                log.error("commit for node %s, which this worker does not run", job.node_id)
                return
            await node.commit(job)

        return queueing.make_worker(
            self.redis_url,
            queue,
            [
                func(start_kernel, name="start_kernel", max_tries=3),
                func(start_kernels, name="start_kernels", max_tries=3),
                func(stop_kernel, name="stop_kernel", max_tries=3),
                func(commit_kernel, name="commit_kernel", max_tries=1, timeout=1800),
            ],
            max_jobs=200,
            job_timeout=60,
            poll_delay=0.01,
            pool=pool,
            # as the node's own user it may touch only its own jobs' keys (ids n:{node}:);
            # one of another form (enqueued before node ids were in job ids) is removed
            accept=self._own_jobs(),
        )

    def _own_jobs(self) -> Callable[[str], bool] | None:
        s = self.settings
        if self.plan.many or self.redis_url == s.redis_url:
            return None  # the configured login: every job of its queue is its own
        prefix = own_jobs(s.node_id)
        return lambda job_id: job_id.startswith(prefix)

    async def _heartbeats(self, pool: ArqRedis, reporter: EventReporter) -> None:
        """Beat; when the previous beat's key is gone (Redis restarted or was flushed, or
        this process stalled past the TTL), events Redis may have lost are sent again."""
        ttl = max(1, round(self.settings.heartbeat_ttl_s))
        first = True
        while True:
            await self._sample_stats()
            try:
                async with pool.pipeline(transaction=False) as pipe:
                    for node in self.nodes.values():
                        pipe.set(heartbeat_key(node.node_id), node.heartbeat(), ex=ttl, get=True)
                    previous = await pipe.execute()
                if not first and any(p is None for p in previous):
                    log.warning("Redis lost this node's keys; sending %d events again",
                                reporter.replay())  # fmt: skip
                first = False
            except (OSError, RedisError) as exc:
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(self.settings.heartbeat_interval_s)

    async def _sample_stats(self) -> None:
        """Device utilisation and memory, once per heartbeat (shared by sim nodes)."""
        first = next(iter(self.nodes.values()), None)
        if first is None or first.accelerators is None:
            return
        stats = await asyncio.to_thread(first.accelerators.stats)
        rows = [
            {
                "device_id": s.device_id,
                "utilization": s.utilization,
                "memory_used": s.memory_used,
                "memory_total": s.memory_total,
            }
            for s in stats
        ]
        for node in self.nodes.values():
            node.stats = rows
