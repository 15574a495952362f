"""Job templates: create, list, find, delete, and run (a session through SessionService).

A template belongs to the user who made it; names are unique per user. A run submits
the template's session request as that user, exactly as ``POST /v1/sessions`` would
(quotas, feasibility, idempotency), so a run returns at once with a PENDING session.
The secrets a template names are checked for its owner when it is made (an unknown one
is a 422 naming it) and resolved again, by name, at each run, as any create's are.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import JobTemplate
from gateway.domain.errors import Conflict, NotFound
from gateway.domain.templates import TemplateCreate, TemplateRun, param_env, session_request
from gateway.services.sessions import Created, SessionService

__all__ = ["JobTemplate", "TemplateService", "find_template"]


async def find_template(db: AsyncSession, principal: Principal, name: str) -> JobTemplate:
    row = (
        await db.execute(
            select(JobTemplate).where(
                JobTemplate.owner_id == principal.user_id, JobTemplate.name == name
            )
        )
    ).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no template {name!r}")
    return row


class TemplateService:
    def __init__(self, db: SessionFactory, sessions: SessionService) -> None:
        self.db = db
        self.sessions = sessions

    async def create(self, principal: Principal, body: TemplateCreate) -> JobTemplate:
        self.sessions.check_request(body.session)
        if body.session.secrets:
            async with self.db() as db:
                await self.sessions.secret_refs(db, principal, body.session.secrets)
        row = JobTemplate(
            name=body.name,
            owner_id=principal.user_id,
            description=body.description,
            spec=body.session.model_dump(mode="json", exclude_unset=True),
            params={"items": [p.model_dump() for p in body.params]},
        )
        try:
            async with self.db() as db, db.begin():
                db.add(row)
        except IntegrityError:
            raise Conflict(f"you have a template named {body.name!r}", field="name") from None
        return row

    async def mine(self, principal: Principal) -> list[JobTemplate]:
        async with self.db() as db:
            rows = await db.execute(
                select(JobTemplate)
                .where(JobTemplate.owner_id == principal.user_id)
                .order_by(JobTemplate.name)
            )
            return list(rows.scalars())

    async def get(self, principal: Principal, name: str) -> JobTemplate:
        async with self.db() as db:
            return await find_template(db, principal, name)

    async def delete(self, principal: Principal, name: str) -> None:
        async with self.db() as db, db.begin():
            await db.delete(await find_template(db, principal, name))

    async def run(
        self,
        principal: Principal,
        template: JobTemplate,
        run: TemplateRun,
        idempotency_key: str | None,
    ) -> Created:
        env = param_env(template.params.get("items", []), run.params)
        request = session_request(template.name, template.spec, env, run)
        return await self.sessions.create(principal, request, idempotency_key)
