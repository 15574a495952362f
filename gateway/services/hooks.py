"""Inbound CI triggers: create/list/delete, and what a delivery to /v1/hooks/{id} does.

::

    POST /v1/hooks/{id}  (body read with a limit: BodyLimit, JOBGATE_MAX_HOOK_BYTES)
      ─▶ the trigger ─▶ signature (github | gitlab | standard), constant time
           wrong or missing ─▶ 401; only the trigger's refused count goes up
      ─▶ parse the event ─▶ seen this delivery id? ─▶ "duplicate", names its session
      ─▶ filters (event types, branch globs) ─▶ "filtered" (stored)
      ─▶ run the template as the trigger's owner (Idempotency-Key hook:{id}:{delivery},
         so a race of two identical deliveries starts one session) ─▶ "started"
      a template that refuses the parameters ─▶ "rejected" with why (stored, 422)

Starting is enqueueing: the session is inserted PENDING as ``POST /v1/sessions`` does,
so the answer comes at once.

Retention: ``prune_deliveries`` (every gateway process each minute, ``loops/pruning.py``)
deletes the deliveries received more than ``JOBGATE_HOOK_DELIVERY_RETENTION_DAYS`` ago, in
batches claimed ``SKIP LOCKED`` (a delivery id older than that is no longer known as seen).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import HookDelivery, HookTrigger, JobTemplate, User
from gateway.db.retention import PRUNE_BATCH, PRUNE_BATCHES, prune_older
from gateway.domain.errors import Conflict, Invalid, JobgateError, NotFound, Unauthenticated
from gateway.domain.hooks import (
    EVENT_FIELDS,
    BadPayload,
    HookEvent,
    check_filters,
    parse_event,
    passes,
)
from gateway.domain.signatures import (
    BadSignature,
    new_secret,
    verify_github,
    verify_gitlab,
    verify_standard,
)
from gateway.domain.templates import TemplateRun
from gateway.services.templates import TemplateService, find_template

__all__ = [
    "HookAnswer",
    "HookDelivery",
    "HookService",
    "HookTrigger",
    "TriggerSpec",
    "prune_deliveries",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    name: str
    template: str
    source: str
    events: list[str]
    branches: list[str]


@dataclass(frozen=True, slots=True)
class HookAnswer:
    verdict: str  # started | duplicate | filtered | rejected
    detail: str
    delivery: str
    session_id: str | None = None


def _secret(source: str) -> str:
    # GitHub and GitLab take any string; Standard Webhooks wants whsec_<base64>
    return new_secret() if source == "standard" else secrets.token_urlsafe(32)


class HookService:
    def __init__(self, db: SessionFactory, templates: TemplateService) -> None:
        self.db = db
        self.templates = templates

    # -- triggers ---------------------------------------------------------------------
    async def create(self, principal: Principal, spec: TriggerSpec) -> HookTrigger:
        refused = check_filters(spec.source, spec.events, spec.branches)
        if refused is not None:
            raise Invalid(refused[1], field=refused[0])
        async with self.db() as db:
            try:
                template = await find_template(db, principal, spec.template)
            except NotFound as exc:
                raise NotFound(exc.detail, field="template") from None
        row = HookTrigger(
            name=spec.name,
            owner_id=principal.user_id,
            template_id=template.id,
            source=spec.source,
            events={"items": spec.events},
            branches={"items": spec.branches},
            secret=_secret(spec.source),
            refused=0,
        )
        try:
            async with self.db() as db, db.begin():
                db.add(row)
        except IntegrityError:
            raise Conflict(f"you have a trigger named {spec.name!r}", field="name") from None
        return row

    async def mine(self, principal: Principal) -> list[tuple[HookTrigger, str]]:
        async with self.db() as db:
            rows = await db.execute(
                select(HookTrigger, JobTemplate.name)
                .join(JobTemplate, JobTemplate.id == HookTrigger.template_id)
                .where(HookTrigger.owner_id == principal.user_id)
                .order_by(HookTrigger.name)
            )
            return [(t, name) for t, name in rows.all()]

    async def get(self, principal: Principal, name: str) -> tuple[HookTrigger, str]:
        async with self.db() as db:
            trigger = await _find(db, principal, name)
            template = await db.get(JobTemplate, trigger.template_id)
            return trigger, template.name if template else ""

    async def delete(self, principal: Principal, name: str) -> None:
        async with self.db() as db, db.begin():
            await db.delete(await _find(db, principal, name))

    async def deliveries(self, principal: Principal, name: str, limit: int) -> list[HookDelivery]:
        async with self.db() as db:
            trigger = await _find(db, principal, name)
            rows = await db.execute(
                select(HookDelivery)
                .where(HookDelivery.trigger_id == trigger.id)
                .order_by(HookDelivery.id.desc())
                .limit(limit)
            )
            return list(rows.scalars())

    # -- deliveries -------------------------------------------------------------------
    async def receive(self, trigger_id: str, headers: Mapping[str, str], body: bytes) -> HookAnswer:
        async with self.db() as db:
            trigger = await db.get(HookTrigger, trigger_id)
            if trigger is None:
                raise NotFound(f"no trigger {trigger_id}")
            owner = await db.get(User, trigger.owner_id)
            template = await db.get(JobTemplate, trigger.template_id)
        try:
            delivery = _verify(trigger, headers, body)
        except BadSignature as exc:
            async with self.db() as db, db.begin():
                await db.execute(
                    update(HookTrigger)
                    .where(HookTrigger.id == trigger.id)
                    .values(refused=HookTrigger.refused + 1)
                )
            reason = f"the delivery is not signed with this trigger's secret: {exc}"
            raise Unauthenticated(reason) from None
        try:
            event = parse_event(trigger.source, headers, body)
        except BadPayload as exc:
            raise Invalid(str(exc), field="body") from None
        if delivery:
            event = HookEvent(**{**event.params(), "delivery": delivery})
        if not event.delivery:
            raise Invalid("the delivery has no id", field="body")
        seen = await self._seen(trigger.id, event.delivery)
        if seen is not None:
            return seen
        why = passes(event, trigger.events.get("items", []), trigger.branches.get("items", []))
        if why is not None:
            return await self._store(trigger.id, event, "filtered", why)
        if owner is None or owner.disabled or template is None:
            return await self._store(trigger.id, event, "rejected", "its owner or template is gone")
        principal = Principal(owner.id, owner.name, owner.role)
        declared = {p["name"] for p in template.params.get("items", [])}
        params = {k: v for k, v in event.params().items() if k in declared and k in EVENT_FIELDS}
        try:
            created = await self.templates.run(
                principal,
                template,
                TemplateRun(params=params),
                idempotency_key=f"hook:{trigger.id}:{event.delivery}"[:255],
            )
        except JobgateError as exc:
            answer = await self._store(trigger.id, event, "rejected", exc.detail)
            raise Invalid(
                f"the template refused the delivery: {exc.detail}",
                field=getattr(exc, "field", None),
                verdict=answer.verdict,
                delivery=answer.delivery,
            ) from None
        if not created.created:  # a concurrent copy of this delivery got there first
            return HookAnswer("duplicate", "seen before", event.delivery, created.session.id)
        return await self._store(
            trigger.id, event, "started", f"session {created.session.id}", created.session.id
        )

    async def _seen(self, trigger_id: str, delivery: str) -> HookAnswer | None:
        async with self.db() as db:
            row = (
                await db.execute(
                    select(HookDelivery).where(
                        HookDelivery.trigger_id == trigger_id, HookDelivery.delivery_id == delivery
                    )
                )
            ).scalar_one_or_none()
        if row is None:
            return None
        return HookAnswer("duplicate", f"seen before: {row.verdict}", delivery, row.session_id)

    async def _store(
        self,
        trigger_id: str,
        event: HookEvent,
        verdict: str,
        detail: str,
        session_id: str | None = None,
    ) -> HookAnswer:
        row = HookDelivery(
            trigger_id=trigger_id,
            delivery_id=event.delivery[:255],
            event=event.event[:64],
            ref=event.ref[:255],
            verdict=verdict,
            detail=detail,
            session_id=session_id,
        )
        try:
            async with self.db() as db, db.begin():
                db.add(row)
        except IntegrityError:  # the same delivery, concurrently: the first one speaks
            seen = await self._seen(trigger_id, event.delivery)
            if seen is not None:
                return seen
            raise
        return HookAnswer(verdict, detail, event.delivery, session_id)


async def prune_deliveries(
    db: SessionFactory, days: float, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES
) -> int:
    """Delete the deliveries received more than *days* ago (0: keep them forever), in
    ``SKIP LOCKED`` batches (:mod:`gateway.db.retention`); how many it deleted."""
    return await prune_older(db, HookDelivery.id, HookDelivery.created_at, days, batch, batches)


async def _find(db: AsyncSession, principal: Principal, name: str) -> HookTrigger:
    row = (
        await db.execute(
            select(HookTrigger).where(
                HookTrigger.owner_id == principal.user_id, HookTrigger.name == name
            )
        )
    ).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no trigger {name!r}")
    return row


def _verify(trigger: HookTrigger, headers: Mapping[str, str], body: bytes) -> str:
    """Check the signature; the delivery id when the scheme carries one."""
    if trigger.source == "github":
        verify_github(trigger.secret, headers, body)
        return ""
    if trigger.source == "gitlab":
        verify_gitlab(trigger.secret, headers)
        return ""
    return verify_standard(trigger.secret, headers, body, time.time())
