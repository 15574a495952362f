"""One reconcile step of an endpoint's replicas, and its status: pure functions.

::

    live replicas (revision, starting|serving|draining, ready?, in flight, ages)
    + desired count, target revision, last good revision, settings, now
        ─▶ step() ─▶ Step: start (indices), promote (→ serving), drain, stop, rollback
        ─▶ status() ─▶ HEALTHY | DEGRADED | UNAVAILABLE | SCALED_TO_ZERO | DEPLOYING, why
    promised() ─▶ how many should be ready: what served, at most desired (DEGRADED below)

A rolling update starts replicas of the new revision (at most ``max_surge`` above the
desired count), promotes each once the proxy saw it ready, and drains old ones while at
least ``desired - max_unavailable`` replicas stay ready. A draining replica takes no new
requests and is stopped when its in-flight count is 0 (after ``min_drain_s``, so every
proxy has seen the new route) or after ``drain_timeout_s``. A new revision none of whose
replicas became ready within ``ready_timeout_s`` is rolled back, naming why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Replica", "RolloutSettings", "Status", "Step", "promised", "status", "step"]

Status = Literal["HEALTHY", "DEGRADED", "UNAVAILABLE", "SCALED_TO_ZERO", "DEPLOYING"]


class RolloutSettings(BaseModel):
    """How a revision replaces another, and the proxy's per-replica limits."""

    # max_surge 0 (it defaults to 1) with max_unavailable 0 (its default) cannot progress
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "not": {
                "properties": {"max_surge": {"const": 0}, "max_unavailable": {"const": 0}},
                "required": ["max_surge"],
            }
        },
    )

    max_surge: int = Field(default=1, ge=0, le=100)
    max_unavailable: int = Field(default=0, ge=0, le=100)
    ready_timeout_s: float = Field(default=300.0, ge=1, le=7200)
    drain_timeout_s: float = Field(default=30.0, ge=0, le=3600)
    min_drain_s: float = Field(default=2.0, ge=0, le=60)
    concurrency_per_replica: int = Field(default=32, ge=1, le=10_000)
    queue_limit: int = Field(default=128, ge=0, le=100_000)
    wake_timeout_s: float = Field(default=60.0, gt=0, le=600)

    @model_validator(mode="after")
    def _check(self) -> RolloutSettings:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("max_surge and max_unavailable cannot both be 0")
        return self


@dataclass(frozen=True, slots=True)
class Replica:
    session_id: str
    index: int
    revision: int
    state: str  # starting | serving | draining
    ready: bool  # the proxy's latest verdict
    in_flight: int  # summed over the proxies' load reports
    since: float  # epoch seconds it was created
    state_at: float  # epoch seconds of its latest state change
    why: str = ""  # why it is not ready: pending reason, probe failure, …


@dataclass
class Step:
    start: list[int] = field(default_factory=list)  # replica indices, target revision
    promote: list[str] = field(default_factory=list)  # session ids → serving
    drain: list[str] = field(default_factory=list)  # session ids → draining
    stop: list[str] = field(default_factory=list)  # session ids to terminate
    rollback: str | None = None  # why the target revision is given up

    @property
    def empty(self) -> bool:
        return not (self.start or self.promote or self.drain or self.stop or self.rollback)


def _free_indices(taken: set[int], count: int) -> list[int]:
    out: list[int] = []
    i = 0
    while len(out) < count:
        if i not in taken:
            out.append(i)
        i += 1
    return out


def step(
    replicas: list[Replica],
    *,
    revision: int,
    stable_revision: int | None,
    desired: int,
    settings: RolloutSettings,
    now: float,
    may_start: bool = True,
) -> Step:
    """What to do now to move the live replicas towards *desired* of *revision*."""
    out = Step()
    for r in replicas:
        if r.state != "draining":
            continue
        drained = r.in_flight == 0 and now - r.state_at >= settings.min_drain_s
        if drained or now - r.state_at >= settings.drain_timeout_s:
            out.stop.append(r.session_id)
    live = [r for r in replicas if r.state != "draining"]
    new = [r for r in live if r.revision == revision]
    old = [r for r in live if r.revision != revision]
    out.promote = [r.session_id for r in new if r.state == "starting" and r.ready]
    new_ready = sum(1 for r in new if r.ready)

    if stable_revision is not None and revision != stable_revision and new_ready == 0:
        late = [r for r in new if now - r.since >= settings.ready_timeout_s]
        if late:
            r = min(late, key=lambda x: x.index)
            why = f": {r.why}" if r.why else ""
            out.rollback = (
                f"revision {revision}: replica {r.index} not ready after "
                f"{settings.ready_timeout_s:g}s{why}; back to revision {stable_revision}"
            )
            return out

    if old:
        room = desired + settings.max_surge - len(new) - len(old)
        count = max(0, min(desired - len(new), room))
        old_ready = [r for r in old if r.ready]
        min_available = max(desired - settings.max_unavailable, 0)
        spare = new_ready + len(old_ready) - min_available
        # unready old replicas serve nothing: drain them once a new one is on its way
        doomed = [r for r in old if not r.ready] if new or desired == 0 else []
        # then ready ones, while enough replicas stay ready (and beyond what is desired)
        extra = len(new) + len(old) - len(doomed) - (desired + settings.max_surge)
        for r in sorted(old_ready, key=lambda x: -x.index):
            if spare > 0 or extra > 0 or desired == 0:
                doomed.append(r)
                spare -= 1
                extra -= 1
        out.drain = [r.session_id for r in doomed]
    else:
        count = max(0, desired - len(new))
        excess = len(new) - desired
        if excess > 0:
            order = sorted(new, key=lambda x: (x.ready, -x.index))
            out.drain = [r.session_id for r in order[:excess]]
    if may_start and count:
        out.start = _free_indices({r.index for r in replicas}, count)
    return out


def promised(replicas: list[Replica], *, desired: int, previous: int | None = None) -> int:
    """How many replicas should be ready now: as many as served (a promoted replica
    served, and still counts while its probe fails), or *previous* (what was promised on
    the last tick, so one that died is still missed), never more than *desired*. A
    scale-up raises it only as its new replicas become ready; a scale-down lowers it."""
    live = [r for r in replicas if r.state != "draining"]
    served = sum(1 for r in live if r.state == "serving" or r.ready)
    return min(desired, max(served, previous or 0))


def status(
    replicas: list[Replica],
    *,
    desired: int,
    revision: int,
    failure: str = "",
    promise: int | None = None,
) -> tuple[Status, str]:
    """One word and the reason, never ambiguous: DEGRADED only while some replica serves,
    and only when fewer serve than did (*promise*, :func:`promised`), never while new
    ones are still starting (a scale-up is no outage)."""
    live = sorted((r for r in replicas if r.state != "draining"), key=lambda r: r.index)
    ready = [r for r in live if r.ready]
    if promise is None:
        promise = promised(replicas, desired=desired)
    if desired == 0 and not live:
        return "SCALED_TO_ZERO", "no replicas; the next request starts one"
    old = [r for r in live if r.revision != revision]
    new_ready = sum(1 for r in ready if r.revision == revision)
    not_ready = "; ".join(
        f"replica {r.index}: {r.why or 'not ready yet'}" for r in live if not r.ready
    )
    if old:
        return "DEPLOYING", (
            f"rolling out revision {revision}: {new_ready}/{desired} ready, "
            f"{len(old)} replica(s) of an older revision left"
        )
    if not ready:
        if failure:
            return "UNAVAILABLE", f"no replica is ready: {failure}"
        if promise > 0:
            lost = not_ready or f"{promise} replica(s) lost"
            return "UNAVAILABLE", f"no replica is ready ({promise} served): {lost}"
        if desired > len(live) or not live:
            return "DEPLOYING", f"starting {desired} replica(s)" + (
                f"; {not_ready}" if not_ready else ""
            )
        return "DEPLOYING", f"revision {revision}: 0/{desired} ready; {not_ready}"
    if len(ready) >= desired:
        return "HEALTHY", f"{len(ready)}/{desired} replicas ready"
    unstarted = desired - len(live)
    if len(ready) < promise:
        missing = "; ".join(
            x
            for x in (not_ready, failure, f"{unstarted} replica(s) to start" if unstarted else "")
            if x
        )
        return "DEGRADED", f"{len(ready)}/{desired} replicas ready ({promise} served); {missing}"
    starting = "; ".join(
        x for x in (not_ready, f"{unstarted} not started yet" if unstarted else "") if x
    )
    return "HEALTHY", f"{len(ready)}/{desired} replicas ready, scaling up: {starting}"
