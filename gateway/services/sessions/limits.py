"""Quotas at create: the resource policies' ``max_pending`` and ``max_slots``, cached."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import func, select

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import ResourcePolicy, Session
from gateway.domain.errors import Invalid, QuotaExceeded
from gateway.domain.requests import SessionCreate
from gateway.domain.status import SessionStatus
from gateway.scheduler.policy import DEFAULT_SUBJECT
from gateway.services.lookups import Facts
from gateway.services.sessions.cache import Timed
from gateway.services.sessions.reads import Reads
from plugins.resources import ResourceSlots
from plugins.scheduling.reasons import format_amount

__all__ = ["Limits", "Policies"]

POLICY_CACHE_S = 5.0
S = SessionStatus


class Limits:
    """The resource policies as a create checks them, re-read every few seconds."""

    def __init__(self, db: SessionFactory) -> None:
        self.db = db
        self._cache: Timed[Policies] = Timed(POLICY_CACHE_S, Policies())

    async def check_pending(
        self,
        reads: Reads,
        principal: Principal,
        project_id: str | None,
        project: str | None,
        adding: int,
        facts: Facts,
        limits: Policies,
    ) -> None:
        """The max_pending policies (*limits*) of the user and the project (a soft limit
        under races); an array must fit whole. The user's count is in *facts* (read only
        when a user limit applies); the project's is counted here, when one applies."""
        user_limit = limits.max_pending("user", principal.user_id)
        if user_limit is not None:
            _refuse_over(f"user {principal.name}", facts.pending, adding, user_limit)
        if project_id is None:
            return
        project_limit = limits.max_pending("project", project_id)
        if project_limit is not None:
            pending = (
                await reads().execute(
                    select(func.count())
                    .select_from(Session)
                    .where(Session.project_id == project_id, Session.status == S.PENDING)
                )
            ).scalar_one()
            _refuse_over(f"project {project}", pending, adding, project_limit)

    async def check_slot_limits(
        self,
        principal: Principal,
        project_id: str | None,
        body: SessionCreate,
        resources: ResourceSlots,
        limits: Policies,
    ) -> None:
        """A session that asks for more than its user's or project's ``max_slots`` could
        never start (the quota validator would keep it waiting forever): refused. One
        that has to wait for the user's other sessions queues. Policies are cached; a
        refusal is given only after they are read again."""
        asked = resources * body.cluster_size  # a gang counts cluster_size times
        subjects = [("user", principal.user_id, f"user {principal.name}")]
        if project_id is not None:
            subjects.append(("project", project_id, f"project {body.project}"))
        for fresh in (False, True):
            if fresh:
                limits = await self.policies(fresh=True)
            over = _over_limit(limits, subjects, asked)
            if over is None:
                return
        assert over is not None
        who, slot, limit = over
        each = f" ({body.cluster_size} containers)" if body.cluster_size > 1 else ""
        raise Invalid(
            f"quota: {who} may hold at most {format_amount(slot, limit)} {slot}; this session "
            f"asks for {format_amount(slot, asked[slot])}{each}, so it could never start",
            field=f"resources.{slot}",
        )

    async def policies(self, *, fresh: bool = False) -> Policies:
        """The policies' max_pending and max_slots, re-read every few seconds (policies
        rarely change) or when *fresh*."""
        if not fresh and self._cache.current():
            return self._cache.value
        async with self.db() as db:
            rows = await db.execute(
                select(
                    ResourcePolicy.scope,
                    ResourcePolicy.subject_id,
                    ResourcePolicy.max_pending,
                    ResourcePolicy.max_slots,
                )
            )
            limits = Policies()
            for scope, subject, pending, slots in rows:
                if pending is not None:
                    limits.pending[scope, subject] = pending
                limits.slots[scope, subject] = ResourceSlots.from_json(slots) if slots else None
        return self._cache.put(limits)


@dataclass(slots=True)
class Policies:
    """What the gateway checks of the resource policies at create time."""

    #: (scope, subject) -> max_pending, for the policies that set one
    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (scope, subject) -> max_slots (None: unlimited), for every policy
    slots: dict[tuple[str, str], ResourceSlots | None] = field(default_factory=dict)

    def max_pending(self, scope: str, subject: str) -> int | None:
        """The max_pending that applies to *subject*: its own, else its scope's default."""
        return self.pending.get((scope, subject), self.pending.get((scope, DEFAULT_SUBJECT)))

    def max_slots(self, scope: str, subject: str) -> ResourceSlots | None:
        """The max_slots that apply to *subject*: its policy's, else the scope's default
        policy's (as the scheduler's quota validator reads them)."""
        own = (scope, subject)
        return self.slots[own] if own in self.slots else self.slots.get((scope, DEFAULT_SUBJECT))


def _over_limit(
    limits: Policies, subjects: list[tuple[str, str, str]], asked: ResourceSlots
) -> tuple[str, str, Decimal] | None:
    """The first (who, slot, limit) of *subjects* that *asked* alone is over."""
    for scope, subject, who in subjects:
        most = limits.max_slots(scope, subject)
        if most is None:
            continue
        for slot, limit in sorted(most.items()):
            if asked[slot] > limit:
                return who, slot, limit
    return None


def _refuse_over(label: str, pending: int, adding: int, limit: int) -> None:
    if pending + adding > limit:
        more = f"; {adding} more do not fit" if adding > 1 else ""
        raise QuotaExceeded(
            f"quota: {label} already has {pending} of {limit} pending sessions{more}"
        )
