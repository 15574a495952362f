"""The per-resource-group scheduler configuration (``resource_groups.scheduler`` as JSON).

An empty object is the default pipeline, the one the gateway uses when an operator has
configured nothing::

    {
      "validators": ["quota", "dependencies", "start-time"],
      "sequencer": {"name": "heuristic-fifo", "options": {"max_skips": 3}},
      "filters": ["resource-group", "node-status", "architecture", "labels",
                  "limits-enforced", "mounts", "images", "fraction-enforcement", "fits"],
      "scorers": [{"name": "concentrated", "weight": 1}, {"name": "numa", "weight": 0.25}],
      "gang": "all-or-nothing",
      "sample_size": 8
    }

A plugin is named by its short name (``fifo``); the entry point is ``<kind>.<name>`` in
``jobgate.schedulers.v1`` (``sequencer.fifo``). ``options`` are validated by the plugin's
own ``Settings`` model when the pipeline is built. Bad configuration is refused with a
message naming the field, before any pass runs.

What a group stores is what its operator wrote; :func:`effective_config` is the one
reading of it, for the API (which checks and shows it) and the scheduler's snapshot
alike: short names become ``{"name": ...}``, a field stored as ``null`` means its
default, and the gateway-wide defaults go under what the group leaves unsaid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from ipaddress import ip_network
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from plugins.common import EgressMode

__all__ = [
    "DEFAULT_FILTERS",
    "POSITIVE_DECIMAL",
    "REQUIRED_FILTER",
    "PluginRef",
    "SchedulerConfig",
    "ScorerRef",
    "effective_config",
    "integral_numbers",
]

#: the filters of the default pipeline, cheapest first; ``fits`` is always required
DEFAULT_FILTERS = (
    "resource-group",
    "node-status",
    "architecture",
    "labels",
    "limits-enforced",
    "mounts",
    "images",
    "fraction-enforcement",
    "fits",
)
#: the floors of a group's min_cpu and min_mem: the smallest CPU quota the kernel takes
#: (1 ms per 100 ms period) and the smallest memory limit Podman starts a container under
MIN_CPU = Decimal("0.01")
MIN_MEM = 6 * 1024 * 1024
#: the filter every pipeline has (without it nodes are over-committed)
REQUIRED_FILTER = "fits"
#: a decimal number above 0 written as a string: digits, one optional fraction
POSITIVE_DECIMAL = r"^(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)$"

#: ``share_quantum``: a JSON number above 0, or a plain decimal string (``"0.01"``)
Quantum = Annotated[
    Decimal,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": POSITIVE_DECIMAL},
            ]
        },
        mode="validation",
    ),
]

#: ``min_cpu``: as a Quantum, at least MIN_CPU (0.01)
AT_LEAST_MIN_CPU = r"^(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|0+\.(?:[1-9]|0[1-9])[0-9]*)$"
MinCpu = Annotated[
    Decimal,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": float(MIN_CPU)},
                {"type": "string", "pattern": AT_LEAST_MIN_CPU},
            ]
        },
        mode="validation",
    ),
]


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: ``egress_allow``: an IPv4 address or CIDR (host bits may be set: 10.0.5.7/24 is 10.0.5.0/24)
IPV4_NETWORK = rf"^{_OCTET}(?:\.{_OCTET}){{3}}(?:/(?:3[0-2]|[12]?[0-9]))?$"
Ipv4Network = Annotated[str, Field(pattern=IPV4_NETWORK)]


def _name_only(value: object) -> object:
    """Let operators write ``"fifo"`` for ``{"name": "fifo"}``."""
    return {"name": value} if isinstance(value, str) else value


class PluginRef(BaseModel):
    """One plugin of the pipeline: its short name and the options for its Settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    options: dict[str, Any] = Field(default_factory=dict)


class ScorerRef(PluginRef):
    """A scorer and its weight: a node's score is the weighted sum of every scorer's."""

    weight: float = Field(default=1.0, ge=0, le=1000)


class SchedulerConfig(BaseModel):
    """Which plugins run, in which order, and the knobs of the pass itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    validators: tuple[PluginRef, ...] = (
        PluginRef(name="quota"),
        PluginRef(name="dependencies"),
        PluginRef(name="start-time"),
    )
    sequencer: PluginRef = PluginRef(name="heuristic-fifo")
    filters: tuple[PluginRef, ...] = tuple(PluginRef(name=n) for n in DEFAULT_FILTERS)
    scorers: tuple[ScorerRef, ...] = (
        ScorerRef(name="concentrated", weight=1.0),
        ScorerRef(name="numa", weight=0.25),
    )
    gang: PluginRef = PluginRef(name="all-or-nothing")

    #: feasible nodes scored per container (kube's numFeasibleNodesToFind, Nomad's
    #: limit iterator); 0 scores every feasible node (exact, slow on big clusters)
    sample_size: int = Field(default=8, ge=0, le=100_000)
    #: where the search for feasible nodes starts: "sticky" stays on the first node that
    #: fitted last time (packs), "rotate" moves past the nodes it looked at (spreads),
    #: "auto" asks the heaviest scorer
    scan: Literal["auto", "sticky", "rotate"] = "auto"
    #: sessions the pass evaluates, in queue order; later ones wait with a reason
    max_sessions_per_pass: int | None = Field(default=None, ge=1)
    #: place fractions on nodes whose fraction enforcement is "none"
    allow_unenforced_fractions: bool = False
    #: every session asking for cpu/mem needs a node that enforces limits
    require_limits_enforced: bool = False
    #: the step of a share slot whose devices report no quantum
    share_quantum: Quantum = Field(default=Decimal("0.01"), gt=0)
    #: times a batch session is placed again after its node was lost, when the session
    #: does not say (None: the gateway's ``max_retries``; docs/node-loss.md)
    max_retries: int | None = Field(default=None, ge=0, le=100)
    #: the least cpu (cores) and mem (bytes) one container may ask for; less is refused
    #: at submit. A container's limits are what it reserved, and the floors are what a
    #: runtime can enforce: a CFS quota of 1 ms per 100 ms, Podman's 6 MiB
    min_cpu: MinCpu = Field(default=MIN_CPU, ge=MIN_CPU)
    min_mem: int = Field(default=MIN_MEM, ge=MIN_MEM, le=2**53)
    #: stop the group's running sessions of a user, project or project member whose budget
    #: is spent (docs/fair-share.md, Budgets); off: a spent budget only holds new ones back
    stop_at_budget: bool = False
    #: who may be stopped for whom (docs/fair-share.md, Preemption): "off"; "priority", a
    #: session's priority; "fair-share", its fair-share multifactor priority
    preemption: Literal["off", "priority", "fair-share"] = "off"
    #: seconds between a victim's SIGTERM (after its notice file) and its SIGKILL
    preemption_grace_s: float = Field(default=30.0, ge=0, le=3600)
    #: times one session may be preempted; after that it is no longer preemptible
    max_preemptions: int = Field(default=3, ge=0, le=100)
    #: batch sessions may opt out with ``preemptible: false``; off: every batch session of
    #: the group is preemptible whatever it says (the operator's, not the tenants', call)
    preemption_opt_out: bool = True
    #: pending sessions one pass may preempt for (the first in queue order that wait
    #: for room); each search is bounded (plugins/scheduling/preemption.py)
    max_preemptors_per_pass: int = Field(default=4, ge=1, le=100)
    #: containers one cluster session may ask for (docs/cluster-sessions.md)
    max_cluster_size: int = Field(default=16, ge=1, le=64)
    #: where the group's sessions may connect (:data:`plugins.common.EgressMode`); unsaid,
    #: unsaid gets the gateway's ``default_egress`` (``no-private``; ``jobgate up``: open)
    egress: EgressMode = "no-private"
    #: networks (CIDRs) ``no-private`` still lets sessions reach: a storage server, a
    #: package mirror; ignored by ``open`` and ``none``
    egress_allow: tuple[Ipv4Network, ...] = ()
    #: the cluster modes this group allows
    cluster_modes: tuple[Literal["single-node", "multi-node"], ...] = (
        "single-node",
        "multi-node",
    )

    @field_validator("validators", "filters", "scorers", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return tuple(_name_only(v) for v in value)
        return value

    @field_validator("egress_allow")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for text in value:
            out.append(str(ip_network(text, strict=False)))  # the pattern took it: IPv4
        return tuple(dict.fromkeys(out))

    @field_validator("sequencer", "gang", mode="before")
    @classmethod
    def _one_name(cls, value: object) -> object:
        return _name_only(value)

    @field_validator("share_quantum", "min_cpu", mode="before")
    @classmethod
    def _plain_decimal(cls, value: object) -> object:
        # made a Decimal here: strict validation would not convert what this returns
        if isinstance(value, str):
            if not re.fullmatch(POSITIVE_DECIMAL, value):
                raise ValueError('a decimal above 0 such as "0.01" (digits, one optional fraction)')
            return Decimal(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return Decimal(str(value))
        return value

    @model_validator(mode="after")
    def _sound(self) -> SchedulerConfig:
        names = [f.name for f in self.filters]
        if REQUIRED_FILTER not in names:
            raise ValueError("filters must include 'fits' (without it nodes are over-committed)")
        for what, refs in (
            ("filters", self.filters),
            ("validators", self.validators),
            ("scorers", self.scorers),
        ):
            seen = [r.name for r in refs]
            doubled = sorted({n for n in seen if seen.count(n) > 1})
            if doubled:
                raise ValueError(f"{what} lists {', '.join(doubled)} more than once")
        return self


def effective_config(
    stored: Mapping[str, Any] | None,
    *,
    strict: bool = False,
    allow_unenforced_fractions: bool = False,
    require_limits_enforced: bool = False,
    egress: EgressMode = "no-private",
) -> SchedulerConfig:
    """The configuration in effect for a group that stores *stored*.

    The keyword arguments are the gateway-wide defaults (``JOBGATE_*`` settings) for the
    three policies a group may leave to the gateway. Raises ``ValueError`` (pydantic's
    ValidationError) naming the field when *stored* is not a valid configuration.
    *strict*: JSON types as the schema says them (no ``"8"`` for ``8``, no ``1`` for
    ``true``), what the API checks a new configuration with; reading a stored one is lax.
    """
    raw = {key: value for key, value in (stored or {}).items() if value is not None}
    raw.setdefault("allow_unenforced_fractions", allow_unenforced_fractions)
    raw.setdefault("require_limits_enforced", require_limits_enforced)
    raw.setdefault("egress", egress)
    if strict:
        return SchedulerConfig.model_validate_json(json.dumps(integral_numbers(raw)), strict=True)
    return SchedulerConfig.model_validate(raw)


def integral_numbers(value: Any) -> Any:
    """*value* with every float that has no fraction (``3.0``) an int, at any depth: JSON
    Schema calls ``3.0`` an integer, pydantic's strict mode would not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: integral_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [integral_numbers(v) for v in value]
    return value
