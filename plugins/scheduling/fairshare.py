"""Fair share, pure: decayed usage, Slurm's classic factor, the multifactor priority.

The ``fair-share`` sequencer (:mod:`.sequencers`) orders the queue by these numbers; the
gateway computes the decayed usage from the accounting records (``usage`` table) every
``refresh_s`` seconds and hands it over as plain data (:class:`FairShareView`), so every
function here is a pure function of its arguments (docs/fair-share.md)::

    billing rate   = sum over slots of amount x weight  (cpu 1, mem 0.25 per GiB,
                                                          any other slot: accelerator_weight)
    decayed usage  = sum over records of the rate integrated with 2^(-age/half_life)
    project factor = 2^(-(U/S))     U: its fraction of all decayed usage, S: of all shares
    user factor    = 2^(-(UE/S_u))  Slurm classic: UE = U_u + (UE_project - U_u) / n,
                                    S_u = S / n for the n users of the project
    priority       = w_fs x factor + w_prio x priority/100 + w_age x min(age/max_age, 1)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DAY",
    "FairShareSettings",
    "FairShareView",
    "billing_rate",
    "decayed",
    "factor",
    "multifactor",
    "pair_factors",
    "project_factors",
    "user_factor",
]

DAY = 86_400.0
GIB = 2.0**30
#: a billing weight: usage units per unit of a slot per second
Weight = Annotated[float, Field(ge=0, le=1e9)]


class FairShareSettings(BaseModel):
    """The options of the ``fair-share`` sequencer (Slurm's names in the comments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: seconds after which past usage counts half (PriorityDecayHalfLife, 7 days)
    half_life_s: float = Field(default=7 * DAY, gt=0, le=3650 * DAY)
    #: PriorityWeightFairshare: the fair-share factor (0..1) is multiplied by this
    weight_fair_share: float = Field(default=10_000, ge=0, le=1e9)
    #: PriorityWeightQOS-like: a session's own priority (0-100) / 100 times this
    weight_priority: float = Field(default=1_000, ge=0, le=1e9)
    #: PriorityWeightAge: time waited / max_age_s (at most 1) times this
    weight_age: float = Field(default=1_000, ge=0, le=1e9)
    #: PriorityMaxAge: waiting longer adds nothing more (7 days)
    max_age_s: float = Field(default=7 * DAY, gt=0, le=3650 * DAY)
    #: TRESBillingWeights: usage units per slot amount per second (mem: per GiB)
    billing: dict[Annotated[str, Field(min_length=1, max_length=64)], Weight] = Field(
        default_factory=lambda: {"cpu": 1.0, "mem": 0.25}, max_length=64
    )
    #: the weight of any slot that ``billing`` does not name (accelerators: one GPU
    #: counts as 8 cores)
    accelerator_weight: float = Field(default=8.0, ge=0, le=1e9)
    #: how often the scheduler re-reads the records (seconds; usage is cached between)
    refresh_s: float = Field(default=60.0, ge=1, le=86_400)

    def weight(self, slot: str) -> float:
        """Usage units per unit of *slot* per second (mem's unit: bytes)."""
        found = self.billing.get(slot)
        if found is None:
            return self.accelerator_weight
        return found / GIB if slot == "mem" else found


@dataclass(frozen=True, slots=True)
class FairShareView:
    """What the gateway hands the sequencer: decayed usage and shares, at ``as_of``.

    Keys are ids; ``""`` is "no project". A project absent from ``shares`` has share 1.
    """

    #: project id -> decayed usage (billing units x seconds)
    projects: Mapping[str, float] = field(default_factory=dict)
    #: (project id, user id) -> decayed usage
    users: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: project id -> its share (> 0)
    shares: Mapping[str, float] = field(default_factory=dict)
    as_of: datetime | None = None


def billing_rate(slots: Mapping[str, object], settings: FairShareSettings) -> float:
    """Usage units per second of holding *slots* (slot -> amount)."""
    return sum(float(str(amount)) * settings.weight(slot) for slot, amount in slots.items())


def decayed(
    rate: float, started: datetime, ended: datetime | None, now: datetime, half_life_s: float
) -> float:
    """``rate`` held from *started* to *ended* (None: still held), each second weighted by
    ``2^(-age/half_life)`` at *now*: the integral in closed form."""
    end = now if ended is None or ended > now else ended
    if rate <= 0 or end <= started:
        return 0.0
    k = math.log(2) / half_life_s
    age_end = (now - end).total_seconds()
    age_start = (now - started).total_seconds()
    return rate * (math.exp(-k * age_end) - math.exp(-k * age_start)) / k


def factor(usage: float, total_usage: float, share: float, total_shares: float) -> float:
    """Slurm's classic fair-share factor ``2^(-U/S)``: U and S normalised to fractions.

    1 for no usage, 0.5 at exactly its share, towards 0 above it. No usage anywhere: 1.
    """
    if total_usage <= 0 or usage <= 0:
        return 1.0
    if share <= 0 or total_shares <= 0:
        return 0.0
    return float(2.0 ** (-(usage / total_usage) / (share / total_shares)))


def project_factors(
    view: FairShareView, also: Iterable[str] = ()
) -> dict[str, tuple[float, float, float]]:
    """project -> (normalised share, normalised usage, factor) for every project *view*
    knows and those in *also* (a project without a share has 1)."""
    projects = set(view.projects) | set(view.shares) | set(also)
    shares = {p: view.shares.get(p, 1.0) for p in projects}
    total_shares = sum(shares.values())
    total = sum(view.projects.values())
    out = {}
    for p in projects:
        used = view.projects.get(p, 0.0)
        out[p] = (
            shares[p] / total_shares if total_shares > 0 else 0.0,
            used / total if total > 0 else 0.0,
            factor(used, total, shares[p], total_shares),
        )
    return out


def user_factor(
    user_usage: float,
    project_usage: float,
    total_usage: float,
    share: float,
    total_shares: float,
    users: int,
) -> float:
    """A user's factor within a project of *users* equal-share users (Slurm classic):
    effective usage ``UE = U_u + (U_p - U_u) / n`` against share ``S_p / n``; one user
    alone has the project's factor."""
    if total_usage <= 0:
        return 1.0
    if share <= 0 or total_shares <= 0:
        return 0.0
    n = max(1, users)
    mine = user_usage / total_usage
    effective = mine + (project_usage / total_usage - mine) / n
    return float(2.0 ** (-effective / (share / total_shares / n)))


def pair_factors(
    view: FairShareView, wanted: Iterable[tuple[str, str]]
) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """For each wanted (project, user): the user's factor within the project (the
    number the queue is ordered by); and each of their projects' own factor."""
    wanted = set(wanted)
    projects = project_factors(view, {p for p, _ in wanted})
    total = sum(view.projects.values())
    users: dict[str, set[str]] = {}
    for p, u in (*view.users, *wanted):
        users.setdefault(p, set()).add(u)
    pairs = {
        (p, u): user_factor(
            view.users.get((p, u), 0.0),
            view.projects.get(p, 0.0),
            total,
            projects[p][0],
            1.0,
            len(users[p]),
        )
        for p, u in wanted
    }
    return pairs, {p: projects[p][2] for p, _ in wanted}


def multifactor(
    fair_share: float, priority: int, age_s: float, settings: FairShareSettings
) -> float:
    """Slurm's multifactor sum of the three terms jobgate has (docs/fair-share.md)."""
    age = min(max(age_s, 0.0) / settings.max_age_s, 1.0)
    return (
        settings.weight_fair_share * fair_share
        + settings.weight_priority * priority / 100
        + settings.weight_age * age
    )
