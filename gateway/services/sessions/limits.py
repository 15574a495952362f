"""Quotas at create: the resource policies' ``max_pending``, ``max_slots`` and
``max_priority``, and the budgets (a session that would spend a whole budget in its
first hour), cached."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import func, select

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Budget, ResourcePolicy, Session
from gateway.domain.budgets import rates
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

    async def priority(
        self,
        principal: Principal,
        project_id: str | None,
        body: SessionCreate,
        limits: Policies,
    ) -> int:
        """The priority the session gets under the ``max_priority`` of its owner (their
        policy's, else the ``*`` default's) and of its project: the lower cap applies.
        Asking for more is refused; a request that asked for none gets the default,
        lowered to the cap when the cap is below it. Admins are not exempt: the cap is
        the owner's. Policies are cached; a refusal is given only after they are read
        again (a lifted cap counts at once)."""
        asked = "priority" in body.model_fields_set
        cap = _priority_cap(limits, principal, project_id, body.project)
        if asked and cap is not None and body.priority > cap[0]:
            limits = await self.policies(fresh=True)
            cap = _priority_cap(limits, principal, project_id, body.project)
        if cap is None:
            return body.priority
        most, who = cap
        if body.priority <= most:
            return body.priority
        if not asked:
            return most
        raise Invalid(
            f"priority {body.priority} is above the highest {who} may ask for ({most})",
            field="priority",
        )

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
        each = f" ({body.cluster_size} containers)" if body.cluster_size > 1 else ""
        over = _over_limit(limits, subjects, asked)
        if over is not None:
            limits = await self.policies(fresh=True)
            over = _over_limit(limits, subjects, asked)
        if over is not None:
            who, slot, limit = over
            raise Invalid(
                f"quota: {who} may hold at most {format_amount(slot, limit)} {slot}; this "
                f"session asks for {format_amount(slot, asked[slot])}{each}, so it could never "
                "start",
                field=f"resources.{slot}",
            )
        if project_id is not None:
            member = f"user {principal.name} in project {body.project}"
            subjects.append(("member", f"{project_id}/{principal.user_id}", member))
        spent = _over_budget(limits, subjects, asked)
        if spent is not None:
            limits = await self.policies(fresh=True)
            spent = _over_budget(limits, subjects, asked)
        if spent is not None:
            who, kind, period, budget, rate = spent
            slot = kind if kind != "gpu" else next(s for s in sorted(asked) if s not in _NOT_GPU)
            unit = "GiB-hours" if kind == "mem" else f"{kind}-hours"
            raise Invalid(
                f"budget: {who} may spend {budget:g} {unit} per {period}; this session holds "
                f"{rate:g} {kind if kind != 'mem' else 'GiB of mem'}{each} at once, more than "
                "that whole budget in its first hour",
                field=f"resources.{slot}",
            )

    async def policies(self, *, fresh: bool = False) -> Policies:
        """The policies' max_pending, max_slots and max_priority, re-read every few
        seconds (policies rarely change) or when *fresh*."""
        if not fresh and self._cache.current():
            return self._cache.value
        async with self.db() as db:
            rows = await db.execute(
                select(
                    ResourcePolicy.scope,
                    ResourcePolicy.subject_id,
                    ResourcePolicy.max_pending,
                    ResourcePolicy.max_slots,
                    ResourcePolicy.max_priority,
                )
            )
            limits = Policies()
            for scope, subject, pending, slots, priority in rows:
                if pending is not None:
                    limits.pending[scope, subject] = pending
                if priority is not None:
                    limits.priority[scope, subject] = priority
                limits.slots[scope, subject] = ResourceSlots.from_json(slots) if slots else None
            budgets = await db.execute(
                select(
                    Budget.scope, Budget.subject_id, Budget.period, Budget.limits, Budget.members
                )
            )
            for scope, subject, period, amounts, members in budgets:
                limits.budgets[scope, subject] = (period, dict(amounts))
                for uid, mine in members.items():
                    limits.budgets["member", f"{subject}/{uid}"] = (period, dict(mine))
        return self._cache.put(limits)


@dataclass(slots=True)
class Policies:
    """What the gateway checks of the resource policies at create time."""

    #: (scope, subject) -> max_pending, for the policies that set one
    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (scope, subject) -> max_priority, for the policies that set one
    priority: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (scope, subject) -> max_slots (None: unlimited), for every policy
    slots: dict[tuple[str, str], ResourceSlots | None] = field(default_factory=dict)
    #: (scope, subject) -> (period, kind -> slot-hours) of every budget; a member's
    #: sub-limits under ("member", "project id/user id")
    budgets: dict[tuple[str, str], tuple[str, dict[str, float]]] = field(default_factory=dict)

    def max_pending(self, scope: str, subject: str) -> int | None:
        """The max_pending that applies to *subject*: its own, else its scope's default."""
        return self.pending.get((scope, subject), self.pending.get((scope, DEFAULT_SUBJECT)))

    def max_priority(self, scope: str, subject: str) -> int | None:
        """The max_priority that applies to *subject*: its own, else its scope's default."""
        return self.priority.get((scope, subject), self.priority.get((scope, DEFAULT_SUBJECT)))

    def max_slots(self, scope: str, subject: str) -> ResourceSlots | None:
        """The max_slots that apply to *subject*: its policy's, else the scope's default
        policy's (as the scheduler's quota validator reads them)."""
        own = (scope, subject)
        return self.slots[own] if own in self.slots else self.slots.get((scope, DEFAULT_SUBJECT))


def _priority_cap(
    limits: Policies, principal: Principal, project_id: str | None, project: str | None
) -> tuple[int, str] | None:
    """The lower of the owner's and the project's max_priority, and whose it is (the
    user's on a tie); None when neither sets one."""
    caps: list[tuple[int, str]] = []
    user_cap = limits.max_priority("user", principal.user_id)
    if user_cap is not None:
        caps.append((user_cap, f"user {principal.name}"))
    if project_id is not None:
        project_cap = limits.max_priority("project", project_id)
        if project_cap is not None:
            caps.append((project_cap, f"project {project}"))
    return min(caps, key=lambda cap: cap[0]) if caps else None


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


_NOT_GPU = frozenset({"cpu", "mem"})


def _over_budget(
    limits: Policies, subjects: list[tuple[str, str, str]], asked: ResourceSlots
) -> tuple[str, str, str, float, float] | None:
    """The first (who, kind, period, budget, rate) of *subjects* whose budget *asked*
    would spend whole within an hour: budgets are slot-hours, so a session holding more
    than a whole budget at once overspends it before it could be stopped."""
    if not limits.budgets:
        return None
    held = rates(asked.to_json())
    for scope, subject, who in subjects:
        found = limits.budgets.get((scope, subject))
        if found is None:
            continue
        period, amounts = found
        for kind, budget in sorted(amounts.items()):
            if held.get(kind, 0.0) > budget * (1 + 1e-12):
                return who, kind, period, budget, round(held[kind], 6)
    return None


def _refuse_over(label: str, pending: int, adding: int, limit: int) -> None:
    if pending + adding > limit:
        more = f"; {adding} more do not fit" if adding > 1 else ""
        raise QuotaExceeded(
            f"quota: {label} already has {pending} of {limit} pending sessions{more}"
        )
