"""What a client sends to create, scale and update an inference endpoint.

Every model refuses unknown fields (a typo is a 422 naming it). Cross-field rules (min
above max, both targets) come from :class:`AutoscaleSettings` and are reported on the
field the client sent.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from contract.blobs import DIGEST_PATTERN
from contract.endpoints import ENDPOINT_NAME_PATTERN, Probe, valid_endpoint_name
from gateway.domain.autoscale import AutoscaleSettings
from gateway.domain.requests import (
    NAME_PATTERN,
    Arguments,
    Environment,
    FolderMount,
    ImageReference,
    Input,
)
from gateway.domain.rollout import RolloutSettings

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
        default_factory=dict, description='per replica, e.g. {"cpu": "1", "cuda.shares": "0.5"}'
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

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if value and not value[0].strip():
            raise ValueError("the command's first word is empty")
        return value

    @field_validator("probe")
    @classmethod
    def _probe(cls, value: Probe) -> Probe:
        if not value.path.startswith("/") or any(c in value.path for c in " \x00\r\n"):
            raise ValueError("probe.path must be an absolute URL path")
        return value


class EndpointCreate(RevisionSpec):
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

    image: str | None = None
    command: list[str] | None = Field(default=None, max_length=4096)
    port: int | None = Field(default=None, ge=1, le=65535)
    resources: dict[str, str | int | float] | None = None
    env: dict[str, str] | None = None
    working_dir: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    resource_group: str | None = Field(default=None, pattern=NAME_PATTERN)
    probe: Probe | None = None
    rollout: RolloutSettings | None = None
    folders: list[FolderMount] | None = Field(default=None, max_length=32)

    def merged(self, current: dict[str, Any]) -> RevisionSpec:
        """The new revision's full spec (each given field checked as on create)."""
        return RevisionSpec.model_validate(current | self.model_dump(exclude_unset=True))


class EndpointScale(Input):
    """A fixed count (``replicas``) or a range (``min_replicas``/``max_replicas``), and
    optionally the other autoscaling settings; what is not given stays."""

    replicas: int | None = Field(default=None, ge=0, le=100)
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
        if self.replicas == 0:
            raise ValueError("replicas must be at least 1 (use min_replicas 0 to scale to zero)")
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


class TokenCreate(Input):
    name: str = Field(default="", max_length=64)
    expires: str | None = Field(
        default=None, description="a lifetime such as 30d, 12h, 90m or 3600s (never: none)"
    )

    @field_validator("expires")
    @classmethod
    def _expires(cls, value: str | None) -> str | None:
        if value is not None:
            parse_expiry(value)
        return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_expiry(text: str) -> timedelta:
    """``30d`` → 30 days (s, m, h, d, w); at most 10 years."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit() or int(number) == 0:
        raise ValueError(f"not a lifetime: {text!r} (e.g. 30d, 12h, 90m, 3600s)")
    seconds = int(number) * _UNITS[unit]
    if seconds > 10 * 365 * 86_400:
        raise ValueError("a token lives at most 10 years")
    return timedelta(seconds=seconds)
