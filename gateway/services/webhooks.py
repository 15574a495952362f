"""Outbound webhooks: subscriptions and their deliveries (the deliverer is
``gateway/loops/deliverer.py``).

A webhook belongs to its creator. Without a project it receives the events of the
creator's own sessions; with one, the events of every session of that project (the
creator must be a member, or an admin).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Project, ProjectMember, Webhook, WebhookDelivery, WebhookEvent
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound
from gateway.domain.signatures import new_secret
from gateway.domain.webhooks import EVENT_TYPES, SCHEDULE_FROM, check_url

__all__ = ["DeliveryView", "Webhook", "WebhookService"]


@dataclass(frozen=True, slots=True)
class DeliveryView:
    delivery: WebhookDelivery
    event_type: str


class WebhookService:
    def __init__(self, db: SessionFactory, settings: GatewaySettings) -> None:
        self.db = db
        self.settings = settings

    async def create(
        self, principal: Principal, url: str, events: list[str], project: str | None
    ) -> tuple[Webhook, str | None]:
        refusal = check_url(url, self.settings.webhook_networks)
        if refusal:
            raise Invalid(refusal, field="url")
        unknown = [e for e in events if e not in EVENT_TYPES]
        if unknown:
            raise Invalid(
                f"unknown event {unknown[0]!r} (known: {', '.join(EVENT_TYPES)})", field="events"
            )
        async with self.db() as db, db.begin():
            project_id = await _project(db, principal, project)
            row = Webhook(
                owner_id=principal.user_id,
                project_id=project_id,
                url=url,
                events={"items": list(dict.fromkeys(events))},
                secret=new_secret(),
            )
            db.add(row)
        return row, project

    async def mine(self, principal: Principal) -> list[tuple[Webhook, str | None]]:
        async with self.db() as db:
            rows = await db.execute(
                select(Webhook, Project.name)
                .outerjoin(Project, Project.id == Webhook.project_id)
                .where(Webhook.owner_id == principal.user_id)
                .order_by(Webhook.created_at)
            )
            return [(w, p) for w, p in rows.all()]

    async def get(self, principal: Principal, webhook_id: str) -> tuple[Webhook, str | None]:
        async with self.db() as db:
            hook = await _find(db, principal, webhook_id)
            project = await db.get(Project, hook.project_id) if hook.project_id else None
            return hook, project.name if project else None

    async def delete(self, principal: Principal, webhook_id: str) -> None:
        async with self.db() as db, db.begin():
            await db.delete(await _find(db, principal, webhook_id))

    async def rotate(self, principal: Principal, webhook_id: str) -> Webhook:
        """A new secret; the old one also signs for ``webhook_rotation_overlap_s``."""
        async with self.db() as db, db.begin():
            hook = await _find(db, principal, webhook_id)
            now = await db_now(db)
            hook.previous_secret = hook.secret
            hook.previous_until = now + timedelta(seconds=self.settings.webhook_rotation_overlap_s)
            hook.secret = new_secret()
        return hook

    async def deliveries(
        self, principal: Principal, webhook_id: str, limit: int
    ) -> list[DeliveryView]:
        async with self.db() as db:
            hook = await _find(db, principal, webhook_id)
            rows = await db.execute(
                select(WebhookDelivery, WebhookEvent.type)
                .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
                .where(WebhookDelivery.webhook_id == hook.id)
                .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id)
                .limit(limit)
            )
            return [DeliveryView(d, t) for d, t in rows.all()]

    async def redeliver(self, principal: Principal, delivery_id: str) -> DeliveryView:
        """Send a delivery again now, with a fresh retry schedule (same webhook-id); its
        attempt count goes on, so it always matches the codes in its log."""
        async with self.db() as db, db.begin():
            row = await db.get(WebhookDelivery, delivery_id, with_for_update=True)
            if row is None or row.webhook_id is None:
                raise NotFound(f"no delivery {delivery_id}")
            hook = await _find(db, principal, row.webhook_id, missing=f"no delivery {delivery_id}")
            if hook.disabled_reason is not None:
                raise Conflict(f"the webhook is disabled: {hook.disabled_reason}")
            event = await db.get(WebhookEvent, row.event_id)
            row.status = "pending"
            row.log = row.log | {SCHEDULE_FROM: row.attempts}  # attempts keep counting
            row.next_attempt_at = await db_now(db)
            row.locked_until = None
            return DeliveryView(row, event.type if event else "")


async def _find(
    db: AsyncSession, principal: Principal, webhook_id: str, missing: str | None = None
) -> Webhook:
    row = await db.get(Webhook, webhook_id)
    if row is None or row.owner_id != principal.user_id:
        raise NotFound(missing or f"no webhook {webhook_id}")
    return row


async def _project(db: AsyncSession, principal: Principal, name: str | None) -> str | None:
    if name is None:
        return None
    project = (await db.execute(select(Project).where(Project.name == name))).scalar_one_or_none()
    if project is None:
        raise NotFound(f"no project {name!r}", field="project")
    member = await db.get(ProjectMember, (project.id, principal.user_id))
    if not principal.is_admin and member is None:
        raise Forbidden(f"{principal.name} is not a member of project {name!r}")
    return project.id
