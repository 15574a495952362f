"""/v1/audit: the audit log, for admins (what it records: docs/security.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from gateway.api.deps import Admin, AuditLogs
from gateway.api.routes.usage import Timestamp
from gateway.api.rules import ACTION_PATTERN, AUDIT_CURSOR_PATTERN, USER_NAME_PATTERN
from gateway.api.schemas import Page
from gateway.domain.audit import PAGE_MAX
from gateway.services.audit import AuditFilters, AuditRecord

router = APIRouter(prefix="/v1/audit", tags=["audit"])


class AuditEntryPublic(BaseModel):
    id: int
    at: datetime = Field(description="When the request came (UTC).")
    user: str | None = Field(description="Who, when a credential was accepted (a user's name).")
    credential: str = Field(
        description="How: `key NAME (PREFIX)`, `console, key …`, `node ID`, `join token`, "
        "`trigger signature`, or what was refused (`refused key jg_xxxxxx`); never a secret."
    )
    action: str = Field(description="The route's operation id (`sessions-create`).")
    method: str
    path: str = Field(description="The path asked for, without its query string.")
    target: str = Field(description="The path's parameters, and the id a 201 made.")
    status: int = Field(description="The answer's HTTP status.")
    client: str = Field(description="The client's address.")


class AuditPage(Page):
    items: list[AuditEntryPublic]


def _public(r: AuditRecord) -> AuditEntryPublic:
    return AuditEntryPublic(
        id=r.id,
        at=r.at,
        user=r.actor,
        credential=r.credential,
        action=r.action,
        method=r.method,
        path=r.path,
        target=r.target,
        status=r.status,
        client=r.client,
    )


@router.get("", operation_id="audit-list", response_model=AuditPage)
async def list_audit(
    _: Admin,
    audit: AuditLogs,
    user: Annotated[
        str | None, Query(max_length=64, pattern=USER_NAME_PATTERN, description="Only this user's.")
    ] = None,
    action: Annotated[
        str | None,
        Query(max_length=64, pattern=ACTION_PATTERN, description="Only this operation id."),
    ] = None,
    start: Annotated[
        Timestamp | None,
        Query(alias="from", description="From this time (RFC 3339 with its offset)."),
    ] = None,
    end: Annotated[
        Timestamp | None, Query(alias="to", description="Before this time (RFC 3339).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
    cursor: Annotated[
        str | None,
        Query(pattern=AUDIT_CURSOR_PATTERN, description="The next_cursor of the page before."),
    ] = None,
) -> AuditPage:
    """Every state-changing call, newest first; follow ``next_cursor`` for older ones."""
    rows, after = await audit.search(
        AuditFilters(
            user=user,
            action=action,
            start=start,
            end=end,
            before=int(cursor) if cursor else None,
            limit=limit,
        )
    )
    return AuditPage(
        items=[_public(r) for r in rows], next_cursor=str(after) if after is not None else None
    )
