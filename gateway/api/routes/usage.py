"""/v1/usage: slot-seconds of the kernels that ran, by user, project or group, per bucket.

Admins see everything; anyone else their own sessions' and their projects' (the rule
and its 403s: gateway/services/usage.py, docs/usage.md).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Final

from fastapi import APIRouter, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gateway.api.deps import CurrentUser, UsageReports
from gateway.domain.usage import Granularity
from gateway.services.usage import By, Filters, Shares, UsageReport

router = APIRouter(prefix="/v1/usage", tags=["usage"])

#: RFC 3339's date-time, offset included (pydantic alone would take "0.5" as a Unix time)
RFC3339: Final = r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"


def _rfc3339(value: object) -> object:
    if isinstance(value, str) and not re.fullmatch(RFC3339, value):
        raise ValueError("must be an RFC 3339 date-time with its offset: 2026-11-23T00:00:00Z")
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]


class UsageBucketPublic(BaseModel):
    start: datetime = Field(description="The bucket's start (UTC; weeks start on Monday).")
    key: str | None = Field(
        description="The user's or project's name, or the resource group (null: no project)."
    )
    slots: dict[str, float] = Field(
        description="Slot -> amount x seconds held in the bucket (units in `units`)."
    )


class UsagePublic(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    by: By
    granularity: Granularity
    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    as_of: datetime = Field(description="Kernels still running are counted up to here.")
    units: dict[str, str] = Field(description="What each slot's numbers count.")
    buckets: list[UsageBucketPublic]


def _public(report: UsageReport) -> UsagePublic:
    return UsagePublic(
        by=report.by,
        granularity=report.granularity,
        start=report.start,
        end=report.end,
        as_of=report.as_of,
        units=report.units,
        buckets=[
            UsageBucketPublic(start=b.start, key=b.key, slots=b.slots) for b in report.buckets
        ],
    )


@router.get("", operation_id="usage-report", response_model=UsagePublic)
async def usage_report(
    principal: CurrentUser,
    usage: UsageReports,
    by: By = "project",
    granularity: Granularity = "day",
    start: Annotated[
        Timestamp | None,
        Query(
            alias="from",
            description="RFC 3339 with its offset (2026-11-23T00:00:00Z); default: the 7 "
            "days, 24 hours or 4 weeks before `to`.",
        ),
    ] = None,
    end: Annotated[
        Timestamp | None,
        Query(alias="to", description="RFC 3339 with its offset; default: now."),
    ] = None,
    user: Annotated[
        str | None, Query(max_length=64, description="Only this user's sessions.")
    ] = None,
    project: Annotated[
        str | None, Query(max_length=64, description="Only this project's sessions.")
    ] = None,
) -> UsagePublic:
    """Resource-seconds per slot of every kernel attempt, from RUNNING to its end (running
    ones up to now), cut into hours, days or weeks and summed by user, project or group."""
    report = await usage.report(
        principal, by, granularity, start, end, Filters(user=user, project=project)
    )
    return _public(report)


class ProjectSharePublic(BaseModel):
    project: str | None = Field(description="The project's name (null: no project).")
    share: float = Field(description="Its configured share (PATCH /v1/projects/{name}).")
    normalized_share: float = Field(description="Its fraction of all shares.")
    usage: float = Field(description="Decayed usage: billing units x seconds.")
    normalized_usage: float = Field(description="Its fraction of all decayed usage.")
    factor: float = Field(description="Fair-share factor 2^(-usage/share), normalised.")


class SharesPublic(BaseModel):
    group: str
    in_effect: bool = Field(description="Whether the group's sequencer is fair-share.")
    half_life_s: float
    as_of: datetime
    projects: list[ProjectSharePublic]


def _shares(found: Shares) -> SharesPublic:
    return SharesPublic(
        group=found.group,
        in_effect=found.in_effect,
        half_life_s=found.half_life_s,
        as_of=found.as_of,
        projects=[
            ProjectSharePublic(
                project=p.project,
                share=p.share,
                normalized_share=p.normalized_share,
                usage=p.usage,
                normalized_usage=p.normalized_usage,
                factor=p.factor,
            )
            for p in found.projects
        ],
    )


@router.get("/shares", operation_id="usage-shares", response_model=SharesPublic)
async def usage_shares(
    principal: CurrentUser,
    usage: UsageReports,
    group: Annotated[
        str, Query(max_length=64, description="The resource group whose options apply.")
    ] = "default",
) -> SharesPublic:
    """Each project's share, decayed usage and fair-share factor (docs/fair-share.md):
    admins see every project, others their own projects."""
    return _shares(await usage.shares(principal, group))
