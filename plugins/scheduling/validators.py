"""Validators: policy a session must pass before the planner looks for a node.

* ``quota`` - per-user and per-project limits on concurrent sessions and total slots.
  Usage counts the sessions held now (the snapshot) plus those placed earlier in this
  pass. (The limit on *pending* sessions is the gateway's, at create time.) It also
  holds back the sessions of a user, project or project member whose budget of
  slot-hours is spent (``Snapshot.budget_holds``, worked out by the gateway): a spent
  gpu budget only the sessions that ask for an accelerator slot.
* ``dependencies`` - a session starts only after every session it depends on
  SUCCEEDED; one that ended FAILED, CANCELLED, ERROR or TERMINATED cancels it (and, in
  the same pass, whatever depends on it in turn); a dependency cycle cancels its members.
* ``start-time`` - not before ``starts_at`` (compared with the snapshot's database clock).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from plugins.scheduling import reasons as r
from plugins.scheduling.protocols import Verdict
from plugins.scheduling.reasons import format_amount, in_words, short_id, utc
from plugins.scheduling.state import Account, PassContext
from plugins.scheduling.types import SessionRequest

__all__ = ["DependencyValidator", "QuotaValidator", "StartTimeValidator"]

#: statuses after which a dependent session can never start
DOOMED = frozenset({"FAILED", "CANCELLED", "ERROR", "TERMINATED"})
SUCCEEDED = "SUCCEEDED"
#: the budget kinds every session spends (docs/fair-share.md, Budgets)
CPU_MEM = frozenset({"cpu", "mem"})


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuotaValidator:
    """``quota: user alice already runs 2 of 2 sessions`` / ``... uses 6 of 8 cpu``."""

    name: ClassVar[str] = "quota"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def check(self, request: SessionRequest, ctx: PassContext) -> Verdict | None:
        if ctx.snapshot.budget_holds:
            spent = _budget(request, ctx)
            if spent is not None:
                return Verdict("wait", r.BUDGET, spent)
        if not ctx.snapshot.user_limits and not ctx.snapshot.project_limits:
            return None  # nobody is limited: nothing to look up
        found = self._scope(ctx, request, "user", request.owner, ctx.user(request.owner))
        if found is None and request.project is not None:
            account = ctx.project(request.project)
            found = self._scope(ctx, request, "project", request.project, account)
        return None if found is None else Verdict("wait", r.QUOTA, found)

    @staticmethod
    def _scope(
        ctx: PassContext, request: SessionRequest, scope: str, subject: str, account: Account
    ) -> str | None:
        limits = ctx.limits(scope, subject)
        if limits is None:
            return None
        max_sessions, max_slots = limits
        who = f"{scope} {ctx.user_name(subject) if scope == 'user' else ctx.project_name(subject)}"
        if max_sessions is not None and account.sessions + 1 > max_sessions:
            return f"quota: {who} already runs {account.sessions} of {max_sessions} sessions"
        if max_slots:
            asked = dict(ctx.totals(request))
            for i, limit in max_slots:
                want = asked.get(i, 0)
                if want and account.used[i] + want > limit:
                    slot = ctx.slots.names[i]
                    used, cap, ask = (
                        format_amount(slot, ctx.amount(i, v))
                        for v in (account.used[i], limit, want)
                    )
                    return f"quota: {who} uses {used} of {cap} {slot} (this session asks {ask})"
        return None


def _budget(request: SessionRequest, ctx: PassContext) -> str | None:
    """``budget of project ml-a exhausted until 2026-12-01 00:00 UTC (gpu)`` (the latest,
    when several of the session's budgets are spent), or None. A spent kind holds back
    only the sessions that ask for it: gpu those that ask for an accelerator slot; cpu
    and mem every session."""
    holds = ctx.snapshot.budget_holds
    asks = _budget_kinds(request)
    user = f"user {ctx.user_name(request.owner)}"
    keys = [(("user", request.owner), user)]
    if request.project is not None:
        project = f"project {ctx.project_name(request.project)}"
        keys.append((("project", request.project), project))
        keys.append((("member", f"{request.project}/{request.owner}"), f"{user} in {project}"))
    spent = []
    for key, who in keys:
        mine = {k: at for k, at in holds.get(key, {}).items() if k in asks}
        if mine:
            spent.append((max(mine.values()), who, ", ".join(sorted(mine))))
    if not spent:
        return None
    until, who, kinds = max(spent)
    return f"budget of {who} exhausted until {utc(until):%Y-%m-%d %H:%M} UTC ({kinds})"


def _budget_kinds(request: SessionRequest) -> frozenset[str]:
    """The budget kinds a session spends: cpu and mem always, gpu when it asks for any
    accelerator slot (every slot but cpu and mem, as the budgets count them)."""
    if any(amount > 0 for slot, amount in request.requested.items() if slot not in CPU_MEM):
        return frozenset({"cpu", "mem", "gpu"})
    return CPU_MEM


class DependencyValidator:
    """``waiting for dependency 7f3a1c2d… (RUNNING)`` or cancel when one cannot succeed."""

    name: ClassVar[str] = "dependencies"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def check(self, request: SessionRequest, ctx: PassContext) -> Verdict | None:
        if not request.depends_on:
            return None
        doom = _doom(request.id, ctx, ctx.scratch.setdefault(self.name, {}), set())
        if doom is not None:
            return Verdict("cancel", r.DEPENDENCY_FAILED, doom)
        unmet = [(d, s) for d in request.depends_on if (s := _status(d, ctx)) != SUCCEEDED]
        if not unmet:
            return None
        dep, status = unmet[0]
        tail = f" and {len(unmet) - 1} more" if len(unmet) > 1 else ""
        text = f"waiting for dependency {short_id(dep)} ({status}){tail}"
        return Verdict("wait", r.DEPENDENCY, text)


def _status(session_id: str, ctx: PassContext) -> str:
    """What this pass knows: its own decisions, then the gateway's, then PENDING."""
    known = ctx.status.get(session_id)
    if known is not None:
        return known
    given = ctx.snapshot.dependency_status.get(session_id)
    if given is not None:
        return given.upper()
    return "PENDING" if session_id in ctx.pending else "unknown"


def _doom(
    session_id: str, ctx: PassContext, memo: dict[str, str | None], path: set[str]
) -> str | None:
    """Why *session_id* can never start (a failed dependency, transitively), or None."""
    if session_id in memo:
        return memo[session_id]
    request = ctx.pending.get(session_id)
    if request is None:
        return None
    path.add(session_id)
    verdict: str | None = None
    for dep in request.depends_on:
        if dep in path:
            verdict = f"dependency cycle through {short_id(dep)}"
            break
        status = _status(dep, ctx)
        if status in DOOMED:
            verdict = f"dependency {short_id(dep)} ended {status}"
            break
        if dep in ctx.pending and _doom(dep, ctx, memo, path) is not None:
            verdict = f"dependency {short_id(dep)} cannot run"
            break
    path.discard(session_id)
    memo[session_id] = verdict
    return verdict


class StartTimeValidator:
    """``starts at 2026-11-20 14:00 UTC (in 12m)``."""

    name: ClassVar[str] = "start-time"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def check(self, request: SessionRequest, ctx: PassContext) -> Verdict | None:
        if request.starts_at is None:
            return None
        at, now = utc(request.starts_at), utc(ctx.now)
        if at <= now:
            return None
        wait = in_words((at - now).total_seconds())
        return Verdict("wait", r.START_TIME, f"starts at {at:%Y-%m-%d %H:%M} UTC (in {wait})")
