"""One scheduling pass: snapshot → plan (pure) → apply (one transaction) → enqueue.

A pass that raises is logged and counted as a failed pass; the next request or tick
runs a fresh one. "Does not fit yet" is never an error: it is a reason stored on the
session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from arq.connections import ArqRedis
from sqlalchemy import select

from contract.keys import dirty_key
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Session
from gateway.domain.status import SessionStatus
from gateway.metrics import SchedulerMetrics, waiting_codes
from gateway.outbox import Outbox
from gateway.scheduler.applier import apply_plan
from gateway.scheduler.fairshare import FairShareCache
from gateway.scheduler.snapshot import build_snapshot, wire_egress
from plugins.scheduling.planner import plan

__all__ = ["PassResult", "Scheduler"]

S = SessionStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassResult:
    resource_group: str
    pending: int
    placed: int
    cancelled: int
    rejected: int
    seconds: float
    snapshot_seconds: float
    considered: int = 0  # the pass's limit on pending sessions read
    plan_seconds: float = 0.0
    apply_seconds: float = 0.0
    #: sessions the pass left pending, by reason code (``no-fit``, ``quota`` ...)
    waiting: Mapping[str, int] = field(default_factory=dict)
    preempted: int = 0  # running sessions it preempted


class Scheduler:
    """Runs passes for resource groups; safe to run in several processes at once."""

    #: a pass looks at this many pending sessions at most (highest priority first). The
    #: number adapts so that a pass takes about ``target_pass_s``: a pass holds node rows
    #: locked while it applies, and a long one delays everything that frees capacity
    max_pending_per_pass = 500
    min_pending_per_pass = 100
    max_pending_limit = 5000
    target_pass_s = 0.25
    #: passes in a row for one request while new work keeps arriving
    max_loops = 50

    def __init__(
        self,
        db: SessionFactory,
        pool: ArqRedis,
        settings: GatewaySettings,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.db = db
        self.pool = pool
        self.settings = settings
        self.metrics = metrics
        self.failed_passes = 0
        self._locks: dict[str, asyncio.Lock] = {}
        #: groups with a loop running here -> whether another request came in meanwhile
        self._looping: dict[str, bool] = {}
        #: group -> how many pending sessions its next pass reads (see _adapt)
        self._sizes: dict[str, int] = {}
        #: decayed usage for fair-share groups, read every refresh_s, not every pass
        self.fair_share = FairShareCache()

    async def run_pass(self, resource_group: str) -> PassResult:
        started = time.perf_counter()
        considered = self._sizes.get(resource_group, self.max_pending_per_pass)
        async with self._locks.setdefault(resource_group, asyncio.Lock()):
            async with self.db() as db, db.begin():
                snapshot, reasons = await build_snapshot(
                    db,
                    self.pool,
                    resource_group,
                    max_pending=considered,
                    settings=self.settings,
                    fair_share=self.fair_share,
                )
            snapshot_s = time.perf_counter() - started
            if not snapshot.pending:
                return PassResult(resource_group, 0, 0, 0, 0, snapshot_s, snapshot_s, considered)
            t0 = time.perf_counter()
            decided = plan(snapshot)
            plan_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            outbox = Outbox()
            async with self.db() as db, db.begin():
                key = self.settings.proxy_secret.get_secret_value()
                grace = snapshot.config.preemption_grace_s
                egress = wire_egress(snapshot.config)
                applied = await apply_plan(
                    db, decided, reasons, outbox, key, grace, egress, self.settings.cluster_ports
                )
            apply_s = time.perf_counter() - t0
        await outbox.flush(self.pool)
        return PassResult(
            resource_group,
            pending=len(snapshot.pending),
            placed=len(applied.placed),
            cancelled=len(applied.cancelled),
            rejected=len(applied.rejected),
            seconds=time.perf_counter() - started,
            snapshot_seconds=snapshot_s,
            considered=considered,
            plan_seconds=plan_s,
            apply_seconds=apply_s,
            waiting=waiting_codes(decided.codes, decided.waiting),
            preempted=len(applied.preempted),
        )

    async def run_requested(self, resource_group: str) -> list[PassResult]:
        """Pass after pass while requests keep arriving (the dirty flag is set again).

        One loop per group in this process: a request that finds one running only asks it
        to go round once more, so a burst never stacks up passes waiting on each other.
        """
        if resource_group in self._looping:
            self._looping[resource_group] = True
            return []
        self._looping[resource_group] = False
        try:
            return await self._loop(resource_group)
        finally:
            del self._looping[resource_group]

    async def _loop(self, resource_group: str) -> list[PassResult]:
        results = []
        for _ in range(self.max_loops):
            started = time.monotonic()
            await self.pool.delete(dirty_key(resource_group))
            result = await self.safe_pass(resource_group)
            if result is not None:
                results.append(result)
            again = await self.pool.exists(dirty_key(resource_group))
            asked = self._looping[resource_group]
            self._looping[resource_group] = False
            if not (again or asked) and not self._more_to_do(result):
                break
            # under a stream of requests, let the next pass take a batch of them: a pass
            # has a fixed cost, so one per request would spend the scheduler on overhead
            pause = self.settings.min_pass_interval_s - (time.monotonic() - started)
            if pause > 0:
                await asyncio.sleep(pause)
        return results

    def _adapt(self, result: PassResult) -> None:
        """Size the next pass so that a full one takes about target_pass_s."""
        if result.pending < result.considered or result.placed == 0 or result.seconds <= 0:
            return  # not a full pass that placed: it says nothing about what fits the target
        wanted = int(result.considered * self.target_pass_s / result.seconds)
        # move a quarter at most per pass: pass times are noisy on a busy machine
        wanted = max(result.considered * 3 // 4, min(result.considered * 5 // 4, wanted))
        self._sizes[result.resource_group] = max(
            self.min_pending_per_pass, min(self.max_pending_limit, wanted)
        )

    def _more_to_do(self, result: PassResult | None) -> bool:
        """Run another pass at once: capacity moved under it, or it saw only the first
        max_pending_per_pass sessions and placed some (more may fit)."""
        if result is None:
            return False
        full = result.pending >= result.considered
        return bool(result.rejected) or (full and result.placed > 0)

    async def safe_pass(self, resource_group: str) -> PassResult | None:
        started = time.perf_counter()
        try:
            result = await self.run_pass(resource_group)
        except Exception:
            self.failed_passes += 1
            if self.metrics is not None:
                self.metrics.failed(resource_group, time.perf_counter() - started)
            log.exception("scheduling pass for %s failed; the next one retries", resource_group)
            return None
        self._adapt(result)
        if self.metrics is not None:
            self.metrics.passed(resource_group, result.seconds, result.placed, result.waiting)
        if result.preempted:
            log.info("pass %s: %d session(s) preempted", result.resource_group, result.preempted)
        if result.placed or result.cancelled:
            log.info(
                "pass %s: %d pending, %d placed, %d cancelled, %.3fs "
                "(snapshot %.3fs, plan %.3fs, apply %.3fs)",
                resource_group,
                result.pending,
                result.placed,
                result.cancelled,
                result.seconds,
                result.snapshot_seconds,
                result.plan_seconds,
                result.apply_seconds,
            )
        return result

    async def groups_with_pending(self) -> list[str]:
        async with self.db() as db:
            rows = await db.execute(
                select(Session.resource_group)
                .distinct()
                .where(Session.status == SessionStatus.PENDING)
            )
            return list(rows.scalars())
