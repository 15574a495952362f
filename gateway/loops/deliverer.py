"""The webhook deliverer: the outbox of events to signed HTTP POSTs, with retries.

::

    a session ends ─▶ db/transitions.py: webhook_events row (same transaction)
    Deliverer.fan_out   events not yet fanned out (claimed, SKIP LOCKED)
                        ─▶ a webhook_deliveries row per matching webhook (type, owner or
                           project) and one for the session's callback_url; none: dropped
    Deliverer.send_due  pending deliveries whose time came (claimed with a lease:
                        locked_until) ─▶ resolve the host, refuse non-public addresses
                        (unless allowed) ─▶ POST to that address, redirects not followed
                        ─▶ 2xx succeeded | 410 the webhook is disabled | else the next
                           attempt on the schedule (Retry-After honoured) or failed
    Deliverer.prune     every minute: finished deliveries whose last attempt is older
                        than JOBGATE_WEBHOOK_RETENTION_DAYS, then the events none of
                        whose deliveries are left (batches claimed SKIP LOCKED)

Every step is a row change, so a restarted process loses nothing: an event not fanned
out is still there; a claimed delivery whose process died is claimed again when its
lease runs out (at least once: receivers dedupe on ``webhook-id``, the event's id).
Several gateway processes may each run a deliverer: rows are claimed
``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite serialises writers anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import Select, delete, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Project,
    Session,
    User,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    utcnow,
)
from gateway.domain.signatures import signature_header
from gateway.domain.webhooks import (
    SCHEDULE_FROM,
    address_refusal,
    host_refusal,
    next_delay,
    retry_after_s,
)

__all__ = ["Deliverer", "Refused", "resolve"]

log = logging.getLogger(__name__)
BATCH = 100
CONCURRENCY = 8
LOG_KEEP = 20
#: retention: a prune runs this often and deletes at most PRUNE_BATCHES batches per table
PRUNE_EVERY_S = 60.0
PRUNE_BATCH = 500
PRUNE_BATCHES = 20
FINISHED = ("succeeded", "failed", "cancelled")
USER_AGENT = "jobgate-webhooks/1"


class Refused(Exception):
    """The target may not be reached (its address is not allowed, or does not resolve)."""


async def resolve(url: str, allowed: list[Any]) -> tuple[str, int]:
    """The one address a delivery to *url* goes to, checked: (ip, port)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise Refused(f"not a URL: {exc}") from None
    why = host_refusal(host)
    if why is not None:
        raise Refused(why)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"cannot resolve {host}: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not addresses:
        raise Refused(f"{host} has no address")
    for address in addresses:  # every address must be allowed: no DNS games
        why = address_refusal(address, allowed)
        if why is not None:
            raise Refused(f"refused: {host} resolves to {why}")
    return str(addresses[0]), port


@dataclass
class _Job:
    delivery_id: str
    webhook_id: str | None
    url: str
    msg_id: str
    body: bytes
    secrets: list[str]
    attempts: int


@dataclass
class _Result:
    status_code: int | None
    error: str
    retry_after: float | None
    ms: int


class Deliverer:
    def __init__(self, db: SessionFactory, settings: GatewaySettings) -> None:
        self.db = db
        self.settings = settings
        self.client = httpx.AsyncClient(
            follow_redirects=False, timeout=settings.webhook_timeout_s, trust_env=False
        )

    async def close(self) -> None:
        await self.client.aclose()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Fan out and send until *stop* is set (or cancelled); failures are logged."""
        stop = stop or asyncio.Event()
        next_prune = time.monotonic()
        while not stop.is_set():
            busy = False
            try:
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_EVERY_S
                    await self.prune()
                if await self.anything_to_do():
                    busy = bool(await self.fan_out()) | bool(await self.send_due())
            except Exception:
                log.exception("webhook deliverer: a round failed; trying again")
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.webhook_poll_s)

    async def anything_to_do(self) -> bool:
        """One cheap read: a new event, or a pending delivery (due or not, claimed or not)."""
        async with self.db() as db:
            new, pending = (
                await db.execute(
                    select(
                        exists().where(WebhookEvent.fanned_out.is_(False)),
                        exists().where(WebhookDelivery.status == "pending"),
                    )
                )
            ).one()
            return bool(new or pending)

    # -- fan out ----------------------------------------------------------------------
    async def fan_out(self) -> int:
        """Turn new events into deliveries; returns how many events it handled."""
        async with self.db() as db, db.begin():
            events = list(
                (
                    await db.execute(
                        select(WebhookEvent)
                        .where(WebhookEvent.fanned_out.is_(False))
                        .order_by(WebhookEvent.created_at)
                        .limit(BATCH)
                        .with_for_update(skip_locked=True)
                    )
                ).scalars()
            )
            if not events:
                return 0
            now = await db_now(db)
            sessions = await _sessions(db, [e.session_id for e in events if e.session_id])
            hooks = list(
                (await db.execute(select(Webhook).where(Webhook.disabled_reason.is_(None))))
                .scalars()
                .all()
            )
            dropped = []
            for event in events:
                session = sessions.get(event.session_id or "")
                if session is not None:
                    row, owner, project = session
                    event.owner_id, event.project_id = row.owner_id, row.project_id
                    event.data = _session_data(row, owner, project) | dict(event.data)
                targets: list[tuple[str | None, str | None, str]] = [
                    (h.id, None, h.url)
                    for h in hooks
                    if event.type in h.events.get("items", [])
                    and (
                        h.project_id == event.project_id
                        if h.project_id
                        else h.owner_id == event.owner_id
                    )
                ]
                if session is not None and session[0].callback_url:
                    targets.append((None, session[0].id, session[0].callback_url))
                event.fanned_out = True
                if not targets:
                    dropped.append(event.id)
                for webhook_id, session_id, url in targets:
                    db.add(
                        WebhookDelivery(
                            event_id=event.id,
                            webhook_id=webhook_id,
                            session_id=session_id,
                            url=url,
                            status="pending",
                            attempts=0,
                            next_attempt_at=now,
                            last_error="",
                            log={"items": []},
                            created_at=now,
                        )
                    )
            await db.flush()
            if dropped:  # nobody listens: nothing to keep
                await db.execute(delete(WebhookEvent).where(WebhookEvent.id.in_(dropped)))
            return len(events)

    # -- retention --------------------------------------------------------------------
    async def prune(self, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES) -> int:
        """Delete what the retention lets go: finished deliveries whose last attempt is
        older than ``webhook_retention_days``, then old events with no delivery left (a
        deleted webhook's, or all of theirs pruned). Each batch is its own transaction
        of at most *batch* rows claimed ``SKIP LOCKED``; at most *batches* per table, the
        rest next time. Returns how many rows it deleted."""
        days = self.settings.webhook_retention_days
        if days <= 0:
            return 0
        async with self.db() as db:
            cutoff = await db_now(db) - timedelta(days=days)
        finished = select(WebhookDelivery.id).where(
            WebhookDelivery.status.in_(FINISHED), WebhookDelivery.next_attempt_at < cutoff
        )
        orphaned = select(WebhookEvent.id).where(
            WebhookEvent.fanned_out.is_(True),
            WebhookEvent.created_at < cutoff,
            ~exists().where(WebhookDelivery.event_id == WebhookEvent.id),
        )
        deleted = 0
        for table, old in ((WebhookDelivery, finished), (WebhookEvent, orphaned)):
            for _ in range(batches):
                gone = await self._delete_batch(table, old.limit(batch))
                deleted += gone
                if gone < batch:
                    break
        return deleted

    async def _delete_batch(
        self, table: type[WebhookDelivery] | type[WebhookEvent], old: Select[str]
    ) -> int:
        async with self.db() as db, db.begin():
            ids = list((await db.execute(old.with_for_update(skip_locked=True))).scalars())
            if ids:
                await db.execute(delete(table).where(table.id.in_(ids)))
            return len(ids)

    # -- send -------------------------------------------------------------------------
    async def send_due(self) -> int:
        """Attempt every delivery whose time came; returns how many it attempted."""
        jobs = await self._claim()
        if not jobs:
            return 0
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(job: _Job) -> None:
            # one delivery that breaks fails alone: the rest of the round still goes out,
            # and it is retried (or given up) on its own schedule
            async with gate:
                started = time.monotonic()
                try:
                    result = await self._attempt(job)
                except Exception as exc:
                    log.exception("webhook delivery %s: the attempt failed", job.delivery_id)
                    ms = int((time.monotonic() - started) * 1000)
                    result = _Result(None, f"{type(exc).__name__}: {exc}"[:500], None, ms)
                try:
                    await self._record(job, result)
                except Exception:  # its lease runs out; it is claimed again then
                    log.exception("webhook delivery %s: recording failed", job.delivery_id)

        await asyncio.gather(*(one(job) for job in jobs))
        return len(jobs)

    async def _claim(self) -> list[_Job]:
        async with self.db() as db, db.begin():
            now = await db_now(db)
            rows = list(
                (
                    await db.execute(
                        select(WebhookDelivery)
                        .where(
                            WebhookDelivery.status == "pending",
                            WebhookDelivery.next_attempt_at <= now,
                            or_(
                                WebhookDelivery.locked_until.is_(None),
                                WebhookDelivery.locked_until < now,
                            ),
                        )
                        .order_by(WebhookDelivery.next_attempt_at)
                        .limit(BATCH)
                        .with_for_update(skip_locked=True)
                    )
                ).scalars()
            )
            if not rows:
                return []
            lease = now + timedelta(seconds=self.settings.webhook_timeout_s * 2 + 30)
            events = {
                e.id: e
                for e in (
                    await db.execute(
                        select(WebhookEvent).where(WebhookEvent.id.in_({r.event_id for r in rows}))
                    )
                ).scalars()
            }
            hooks = {
                h.id: h
                for h in (
                    await db.execute(
                        select(Webhook).where(
                            Webhook.id.in_({r.webhook_id for r in rows if r.webhook_id})
                        )
                    )
                ).scalars()
            }
            callbacks = dict(
                (
                    await db.execute(
                        select(Session.id, Session.callback_secret).where(
                            Session.id.in_({r.session_id for r in rows if r.session_id})
                        )
                    )
                ).all()
            )
            jobs = []
            for row in rows:
                row.locked_until = lease
                event = events[row.event_id]
                secrets = _secrets(hooks.get(row.webhook_id or ""), callbacks, row, now)
                if secrets is None:  # its webhook went away or was disabled meanwhile
                    row.status = "cancelled"
                    continue
                body = _body(event)
                jobs.append(
                    _Job(row.id, row.webhook_id, row.url, event.id, body, secrets, row.attempts)
                )
            return jobs

    async def _attempt(self, job: _Job) -> _Result:
        started = time.monotonic()

        def done(code: int | None, error: str, retry_after: float | None = None) -> _Result:
            return _Result(code, error, retry_after, int((time.monotonic() - started) * 1000))

        try:
            ip, port = await resolve(job.url, self.settings.webhook_networks)
        except Refused as exc:
            return done(None, str(exc))
        parts = urlsplit(job.url)
        host = f"[{ip}]" if ":" in ip else ip
        pinned = urlunsplit((parts.scheme, f"{host}:{port}", parts.path or "/", parts.query, ""))
        stamp = int(time.time())
        headers = {
            "host": parts.netloc.rsplit("@", 1)[-1],
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": job.msg_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": signature_header(job.secrets, job.msg_id, stamp, job.body),
        }
        extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
        try:
            response = await self.client.post(
                pinned, content=job.body, headers=headers, extensions=extensions
            )
        except httpx.HTTPError as exc:
            return done(None, f"{type(exc).__name__}: {exc}"[:500])
        code = response.status_code
        if 200 <= code < 300:
            return done(code, "")
        after = retry_after_s(response.headers.get("retry-after"), utcnow())
        if 300 <= code < 400:
            return done(code, f"redirect to {response.headers.get('location', '?')} not followed")
        return done(code, f"HTTP {code}", after)

    async def _record(self, job: _Job, result: _Result) -> None:
        async with self.db() as db, db.begin():
            now = await db_now(db)
            row = await db.get(WebhookDelivery, job.delivery_id, with_for_update=True)
            if row is None:
                return
            attempts = row.attempts + 1
            entry = {
                "at": now.isoformat(),
                "status_code": result.status_code,
                "error": result.error,
                "ms": result.ms,
            }
            # a redelivery starts a fresh schedule but keeps counting attempts
            tries = attempts - int(row.log.get(SCHEDULE_FROM, 0))
            row.log = row.log | {"items": [*row.log.get("items", []), entry][-LOG_KEEP:]}
            row.attempts = attempts
            row.last_status_code = result.status_code
            row.last_error = result.error
            row.locked_until = None
            code = result.status_code
            if code is not None and 200 <= code < 300:
                row.status = "succeeded"
                return
            if code == 410:
                row.status = "failed"
                if job.webhook_id is not None:
                    why = f"{row.url} answered 410 Gone at {entry['at']}"
                    await _disable(db, job.webhook_id, why)
                return
            delay = next_delay(tries, result.retry_after, self.settings.webhook_retry_scale)
            if delay is None:
                row.status = "failed"
            else:
                row.next_attempt_at = now + timedelta(seconds=delay)


async def _disable(db: AsyncSession, webhook_id: str, reason: str) -> None:
    await db.execute(update(Webhook).where(Webhook.id == webhook_id).values(disabled_reason=reason))
    await db.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.status == "pending")
        .values(status="cancelled", last_error="the webhook was disabled")
    )


def _secrets(
    hook: Webhook | None, callbacks: dict[str, str | None], row: WebhookDelivery, now: datetime
) -> list[str] | None:
    if row.webhook_id is None:
        secret = callbacks.get(row.session_id or "")
        return [secret] if secret else None
    if hook is None or hook.disabled_reason is not None:
        return None
    keys = [hook.secret]
    if hook.previous_secret and hook.previous_until and hook.previous_until > now:
        keys.append(hook.previous_secret)  # rotation: receivers with either secret verify
    return keys


def _body(event: WebhookEvent) -> bytes:
    """The payload: the same bytes on every attempt (the event's own time, not the send's)."""
    payload = {"type": event.type, "timestamp": event.created_at.isoformat(), "data": event.data}
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


async def _sessions(db: AsyncSession, ids: list[str]) -> dict[str, tuple[Session, str, str | None]]:
    if not ids:
        return {}
    rows = await db.execute(
        select(Session, User.name, Project.name)
        .join(User, User.id == Session.owner_id)
        .outerjoin(Project, Project.id == Session.project_id)
        .where(Session.id.in_(ids))
    )
    return {s.id: (s, owner, project) for s, owner, project in rows.all()}


def _session_data(s: Session, owner: str, project: str | None) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "session_id": s.id,
        "name": s.name,
        "type": s.type,
        "status": s.status,
        "reason": s.status_reason,
        "exit_code": s.exit_code,
        "owner": owner,
        "project": project,
        "resource_group": s.resource_group,
        "created_at": iso(s.created_at),
        "started_at": iso(s.started_at),
        "ended_at": iso(s.ended_at),
    }
