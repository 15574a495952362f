"""What a client sends to create, scale and update an inference endpoint.

Every model refuses unknown fields (a typo is a 422 naming it). Cross-field rules (min
above max, both targets) come from :class:`AutoscaleSettings` and are reported on the
field the client sent.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, get_args

from pydantic import ConfigDict, Field, field_validator, model_validator

from contract.blobs import DIGEST_PATTERN
from contract.endpoints import ENDPOINT_NAME_PATTERN, Probe, valid_endpoint_name
from gateway.domain.autoscale import AutoscaleSettings, both_given
from gateway.domain.requests import (
    NAME_PATTERN,
    NO_NUL,
    Arguments,
    Environment,
    FolderMount,
    ImageReference,
    Input,
    SecretMount,
)
from gateway.domain.rollout import RolloutSettings
from plugins.resources import slot_map_schema

__all__ = [
    "EndpointCreate",
    "EndpointRollback",
    "EndpointScale",
    "EndpointUpdate",
    "RevisionSpec",
    "TokenCreate",
    "parse_expiry",
]


class RevisionSpec(Input):
    """What each replica runs: one revision of the endpoint."""

    image: ImageReference | None = Field(
        default=None, description="image reference (runtime default)"
    )
    command: Arguments = Field(default_factory=list)
    port: int = Field(ge=1, le=65535, description="the port the server listens on")
    resources: dict[str, str | int | float] = Field(
        default_factory=dict,
        json_schema_extra=slot_map_schema(),
        description='per replica, e.g. {"cpu": "1", "cuda.shares": "0.5"}',
    )
    env: Environment = Field(default_factory=dict)
    working_dir: str | None = Field(
        default=None, pattern=DIGEST_PATTERN, description="sha256:<hex> of an uploaded tar"
    )
    resource_group: str = Field(default="default", pattern=NAME_PATTERN)
    probe: Probe = Field(default_factory=Probe, description="the readiness probe")
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    folders: list[FolderMount] = Field(
        default_factory=list,
        max_length=32,
        description="data folders (e.g. the model's) each replica mounts; no automount",
    )
    secrets: list[SecretMount] = Field(
        default_factory=list,
        max_length=32,
        description="the owner's secrets each replica receives (docs/secrets.md); names only",
    )


class EndpointCreate(RevisionSpec):
    # a replica runs something that serves: its command, or its image's own (the
    # service says the same, naming the field)
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"command": {"minItems": 1}}, "required": ["command"]},
                {"properties": {"image": {"type": "string"}}, "required": ["image"]},
            ]
        }
    )

    name: str = Field(
        pattern=f"^{ENDPOINT_NAME_PATTERN}$",
        description="a DNS label: lower-case letters, digits, inner '-', at most 40",
    )
    public: bool = Field(default=False, description="callable without a token")
    autoscale: AutoscaleSettings = Field(default_factory=AutoscaleSettings)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not valid_endpoint_name(value):
            raise ValueError("must be a DNS label without '--'")
        return value


class EndpointUpdate(Input):
    """A new revision: the current one with the fields given here changed."""

    image: ImageReference | None = None
    command: Arguments | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    resources: dict[str, str | int | float] | None = Field(
        default=None, json_schema_extra=slot_map_schema()
    )
    env: Environment | None = None
    working_dir: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    resource_group: str | None = Field(default=None, pattern=NAME_PATTERN)
    probe: Probe | None = None
    rollout: RolloutSettings | None = None
    folders: list[FolderMount] | None = Field(default=None, max_length=32)
    secrets: list[SecretMount] | None = Field(default=None, max_length=32)

    def merged(self, current: dict[str, Any]) -> RevisionSpec:
        """The new revision's full spec (each given field checked as on create). A null
        clears a field that may be empty (image, working_dir) and keeps any other."""
        given = self.model_dump(exclude_unset=True)
        kept = {k for k, v in given.items() if v is None and k not in _NULLABLE}
        return RevisionSpec.model_validate(current | {k: given[k] for k in given.keys() - kept})


_NULLABLE = frozenset(
    name
    for name, info in RevisionSpec.model_fields.items()
    if type(None) in get_args(info.annotation)
)


class EndpointScale(Input):
    """A fixed count (``replicas``) or a range (``min_replicas``/``max_replicas``), and
    optionally the other autoscaling settings; what is not given stays."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "anyOf": [
                    both_given("replicas", "min_replicas"),
                    both_given("replicas", "max_replicas"),
                    both_given("target_concurrency", "target_rps"),
                ]
            }
        }
    )

    replicas: int | None = Field(
        default=None, ge=1, le=100, description="a fixed count (min_replicas 0 scales to zero)"
    )
    min_replicas: int | None = Field(default=None, ge=0, le=100)
    max_replicas: int | None = Field(default=None, ge=1, le=100)
    target_concurrency: float | None = Field(default=None, gt=0, le=10_000)
    target_rps: float | None = Field(default=None, gt=0, le=1_000_000)

    @model_validator(mode="after")
    def _check(self) -> EndpointScale:
        if self.replicas is not None and (
            self.min_replicas is not None or self.max_replicas is not None
        ):
            raise ValueError("give replicas, or min_replicas/max_replicas, not both")
        if self.target_concurrency is not None and self.target_rps is not None:
            raise ValueError("give target_concurrency or target_rps, not both")
        return self

    def apply(self, current: AutoscaleSettings) -> AutoscaleSettings:
        values: dict[str, Any] = current.model_dump()
        if self.replicas is not None:
            values |= {"min_replicas": self.replicas, "max_replicas": self.replicas}
        for key in ("min_replicas", "max_replicas"):
            if getattr(self, key) is not None:
                values[key] = getattr(self, key)
        if self.target_concurrency is not None:
            values |= {"target_concurrency": self.target_concurrency, "target_rps": None}
        if self.target_rps is not None:
            values |= {"target_rps": self.target_rps, "target_concurrency": None}
        return AutoscaleSettings.model_validate(values)


class EndpointRollback(Input):
    to: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="a revision (default: the previous)"
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_LIFETIME_S = 10 * 365 * 86_400


def _up_to(n: int) -> str:
    """A regex of the decimal numbers 1..*n* (ASCII digits, leading zeros allowed)."""
    digits = str(n)
    alternatives = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    for i, d in enumerate(int(c) for c in digits):
        low = 1 if i == 0 else 0
        if d > low:
            rest = len(digits) - i - 1
            alternatives.append(
                f"{digits[:i]}[{low}-{d - 1}]" + (f"[0-9]{{{rest}}}" if rest else "")
            )
    alternatives.append(digits)
    return "0*(?:" + "|".join(alternatives) + ")"


#: ``<n><unit>`` of at most 10 years, as the OpenAPI document says it
LIFETIME_PATTERN = (
    "^(?:"
    + "|".join(f"{_up_to(MAX_LIFETIME_S // seconds)}{unit}" for unit, seconds in _UNITS.items())
    + ")$"
)


class TokenCreate(Input):
    name: str = Field(default="", max_length=64, pattern=NO_NUL)
    expires: str | None = Field(
        default=None,
        json_schema_extra={"pattern": LIFETIME_PATTERN},
        description="a lifetime such as 30d, 12h, 90m or 3600s, at most 10 years (never: none)",
    )

    @field_validator("expires")
    @classmethod
    def _expires(cls, value: str | None) -> str | None:
        if value is not None:
            parse_expiry(value)
        return value


def parse_expiry(text: str) -> timedelta:
    """``30d`` → 30 days (s, m, h, d, w); at most 10 years."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not (number.isascii() and number.isdigit()) or int(number) == 0:
        raise ValueError(f"not a lifetime: {text!r} (e.g. 30d, 12h, 90m, 3600s)")
    seconds = int(number) * _UNITS[unit]
    if seconds > MAX_LIFETIME_S:
        raise ValueError("a token lives at most 10 years")
    return timedelta(seconds=seconds)
