"""Session logs: append chunks from workers, read them whole, follow them live (SSE).

Workers upload each stream's bytes with their byte offset and the kernel attempt that
printed them. The gateway keeps, per kernel, attempt and stream, how many bytes it holds
(``kernels.log_offsets``: ``{"<attempt>": {stream: bytes}}``) and stores only what is
new, so an upload repeated after a worker restart never duplicates output. A superseded
attempt's output (its node came back, or its worker was down meanwhile) is kept under
that attempt; an attempt the gateway never placed is refused. Output past
``max_log_bytes`` per attempt is dropped, with one note saying so.

Readers see each kernel's latest attempt, or the one attempt they ask for.

The values of the user secrets a session receives are replaced by ``***`` before
anything is stored or published (``gateway/domain/masking.py``); the end of a chunk
that may be the start of a value is held in the kernel's row (``_held:<stream>`` of
that attempt's offsets) and stored in front of the stream's next chunk.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway import live
from gateway.auth import Principal
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Session, SessionLog
from gateway.domain.errors import NotFound
from gateway.domain.status import TERMINAL, SessionStatus
from gateway.services.secrets import SecretService
from gateway.services.views import get_owned

__all__ = ["LogChunkIn", "LogService"]

KEEPALIVE_S = 15.0
#: a stream's held bytes (the start of a secret's value, maybe) in the offsets
HELD = "_held:"
LIMIT_NOTE = b"\n[jobgate: log limit reached; further output of this session is not kept]\n"


@dataclass(frozen=True, slots=True)
class LogChunkIn:
    stream: str
    offset: int
    data: bytes


#: (kernel, attempt, stream): one stream of output, its offsets from 0
_Key = tuple[str, int, str]


@dataclass(frozen=True, slots=True)
class _Attempts:
    """Which attempts a reader sees: the one asked for, or each kernel's latest (which,
    for a follower, moves on when a newer attempt's output comes)."""

    asked: int | None
    latest: dict[str, int]  # kernel -> its latest attempt

    def shows(self, kernel: str, attempt: int) -> bool:
        if self.asked is not None:
            return attempt == self.asked
        if attempt < self.latest.get(kernel, 1):
            return False  # a superseded attempt's: there is newer output
        self.latest[kernel] = attempt
        return True


@dataclass(slots=True)
class _Delivered:
    """What a reader has already shown, so entries from two sources are never repeated."""

    offsets: dict[_Key, int]
    last_row: int = 0


class _Decoders:
    """Incremental UTF-8 decoding per stream: a chunk may end mid-character."""

    def __init__(self) -> None:
        self._by_key: dict[_Key, codecs.IncrementalDecoder] = {}

    def decode(self, kernel: str, attempt: int, stream: str, data: bytes) -> str:
        key = (kernel, attempt, stream)
        decoder = self._by_key.get(key)
        if decoder is None:
            decoder = self._by_key[key] = codecs.getincrementaldecoder("utf-8")("replace")
        return decoder.decode(data)


def _sse(event: str, payload: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


class LogService:
    def __init__(
        self,
        db: SessionFactory,
        redis: Redis,
        max_bytes: int,
        secrets: SecretService | None = None,
    ) -> None:
        self.db = db
        self.redis = redis
        self.max_bytes = max_bytes
        self.secrets = secrets

    # -- append (from workers) --------------------------------------------------------
    async def append(
        self,
        kernel_id: str,
        session_id: str,
        chunks: Iterable[LogChunkIn],
        attempt: int | None = None,
    ) -> dict[str, int]:
        events: list[tuple[str, dict[str, Any]]] = []
        async with self.db() as db, db.begin():
            kernel = (
                await db.execute(
                    select(Kernel).where(Kernel.id == kernel_id).with_for_update(key_share=True)
                )
            ).scalar_one_or_none()
            if kernel is None or kernel.session_id != session_id:
                raise NotFound(f"no kernel {kernel_id} in session {session_id}")
            attempt = kernel.attempt if attempt is None else attempt  # None: an older worker
            if attempt > kernel.attempt:
                raise NotFound(
                    f"kernel {kernel_id} has no attempt {attempt} (its latest is {kernel.attempt})"
                )
            held = dict(kernel.log_offsets)
            stored = dict(held.get(str(attempt), {}))
            tails = {k: stored.pop(k) for k in list(stored) if k.startswith(HELD)}
            offsets = {k: int(v) for k, v in stored.items()}
            kept = sum(v for k, v in offsets.items() if not k.startswith("_"))
            masker = (
                await self.secrets.masker_for_session(db, session_id)
                if self.secrets is not None
                else None
            )
            now = await db_now(db)
            rows: list[SessionLog] = []
            for chunk in chunks:
                end = offsets.get(chunk.stream, 0)
                if chunk.offset + len(chunk.data) <= end:
                    continue  # already held
                data = chunk.data[max(0, end - chunk.offset) :]
                start = max(end, chunk.offset)
                offsets[chunk.stream] = chunk.offset + len(chunk.data)
                if kept + len(data) > self.max_bytes:
                    if not offsets.get("_truncated"):
                        offsets["_truncated"] = 1
                        rows.append(_row(kernel, attempt, "system", 0, LIMIT_NOTE, now))
                    continue
                kept += len(data)
                if masker:
                    tail = base64.b64decode(tails.pop(HELD + chunk.stream, ""))
                    start -= len(tail)
                    data, tail = masker.mask(tail, data)
                    if tail:
                        tails[HELD + chunk.stream] = base64.b64encode(tail).decode()
                    if not data:
                        continue
                rows.append(_row(kernel, attempt, chunk.stream, start, data, now))
            held[str(attempt)] = offsets | tails
            kernel.log_offsets = held
            db.add_all(rows)
            await db.flush()
            events = [(session_id, _log_event(r)) for r in rows]
        await live.publish_many(self.redis, events)
        return {k: v for k, v in offsets.items() if not k.startswith("_")}

    # -- read whole -------------------------------------------------------------------
    async def read(
        self,
        principal: Principal,
        session_id: str,
        streams: set[str] | None,
        attempt: int | None = None,
    ) -> list[dict[str, Any]]:
        """All entries of each kernel's latest attempt, or of *attempt*, decoded:
        ``[{"stream", "kernel", "attempt", "data", "at"}]``."""
        decoders = _Decoders()
        async with self.db() as db:
            await get_owned(db, principal, session_id)
            which = await _attempts(db, session_id, attempt)
            rows = await _rows_after(db, session_id, 0, which)
        return [
            {
                "stream": r.stream,
                "kernel": r.kernel_id,
                "attempt": r.attempt,
                "data": decoders.decode(r.kernel_id, r.attempt, r.stream, r.data),
                "at": r.created_at.isoformat(),
            }
            for r in rows
            if which.shows(r.kernel_id, r.attempt) and (streams is None or r.stream in streams)
        ]

    # -- follow (SSE) -----------------------------------------------------------------
    async def follow(
        self, principal: Principal, session_id: str, attempt: int | None = None
    ) -> AsyncIterator[str]:
        """SSE frames: the current status, every log entry, status changes, then ``end``.
        Entries are those of each kernel's latest attempt (a new attempt's output, once
        it comes, replaces the one before), or of *attempt* only."""
        cursor = await live.last_id(self.redis, session_id)
        async with self.db() as db:
            session = await get_owned(db, principal, session_id)
            which = await _attempts(db, session_id, attempt)
            rows = await _rows_after(db, session_id, 0, which)
        seen = _Delivered(offsets={})
        decoders = _Decoders()
        yield _sse("status", _status(session))
        for frame in self._rows(rows, seen, decoders, which):
            yield frame
        status = SessionStatus(session.status)
        idle = 0.0
        while status not in TERMINAL:
            entries = await live.read(self.redis, session_id, cursor, block_ms=1000)
            if not entries:
                idle += 1.0
                session = await self._session(session_id)
                status = SessionStatus(session.status)
                if status in TERMINAL:
                    yield _sse("status", _status(session))
                if idle >= KEEPALIVE_S:
                    idle = 0.0
                    yield ": keepalive\n\n"
                continue
            idle = 0.0
            for entry_id, event in entries:
                cursor = entry_id
                kind = event.pop("type", None)
                if kind == "log":
                    live_frame = self._live_log(event, seen, decoders, which)
                    if live_frame:
                        yield live_frame
                elif kind in ("status", "progress"):
                    yield _sse(kind, event)
                    if kind == "status":
                        status = SessionStatus(event["status"])
        # the worker uploads all output before it reports the exit: sweep for stragglers
        async with self.db() as db:
            rows = await _rows_after(db, session_id, seen.last_row, which)
        final = await self._session(session_id)
        for frame in self._rows(rows, seen, decoders, which):
            yield frame
        yield _sse(
            "end",
            {"status": final.status, "exit_code": final.exit_code, "reason": final.status_reason},
        )

    async def _session(self, session_id: str) -> Session:
        """The session as it is now (a quiet stream checks whether it ended meanwhile)."""
        async with self.db() as db:
            return (await db.execute(select(Session).where(Session.id == session_id))).scalar_one()

    def _rows(
        self, rows: Iterable[SessionLog], seen: _Delivered, decoders: _Decoders, which: _Attempts
    ) -> Iterable[str]:
        for r in rows:
            seen.last_row = max(seen.last_row, r.id)
            if not which.shows(r.kernel_id, r.attempt):
                continue
            data = _unseen(seen, (r.kernel_id, r.attempt, r.stream), r.offset, r.data)
            if data:
                text = decoders.decode(r.kernel_id, r.attempt, r.stream, data)
                yield _log_frame(r.kernel_id, r.attempt, r.stream, text)

    def _live_log(
        self, event: dict[str, Any], seen: _Delivered, decoders: _Decoders, which: _Attempts
    ) -> str | None:
        seen.last_row = max(seen.last_row, int(event["row"]))
        kernel, stream = str(event["kernel"]), str(event["stream"])
        # (an event published before attempts were recorded is the kernel's latest's)
        attempt = int(event.get("attempt") or which.latest.get(kernel, 1))
        if not which.shows(kernel, attempt):
            return None
        raw = base64.b64decode(event["data"])
        data = _unseen(seen, (kernel, attempt, stream), int(event["offset"]), raw)
        if not data:
            return None
        return _log_frame(kernel, attempt, stream, decoders.decode(kernel, attempt, stream, data))


def _log_frame(kernel: str, attempt: int, stream: str, text: str) -> str:
    return _sse("log", {"stream": stream, "kernel": kernel, "attempt": attempt, "data": text})


def _unseen(seen: _Delivered, key: _Key, offset: int, data: bytes) -> bytes:
    kernel, attempt, stream = key
    if stream == "system":
        note = (kernel, attempt, f"system:{offset}:{len(data)}")
        if note in seen.offsets:
            return b""
        seen.offsets[note] = 1
        return data
    end = seen.offsets.get(key, 0)
    if offset + len(data) <= end:
        return b""
    seen.offsets[key] = offset + len(data)
    return data[max(0, end - offset) :]


def _row(
    kernel: Kernel, attempt: int, stream: str, offset: int, data: bytes, now: Any
) -> SessionLog:
    return SessionLog(
        session_id=kernel.session_id,
        kernel_id=kernel.id,
        attempt=attempt,
        stream=stream,
        offset=offset,
        data=data,
        created_at=now,
    )


def _log_event(row: SessionLog) -> dict[str, Any]:
    return {
        "type": "log",
        "row": row.id,
        "kernel": row.kernel_id,
        "attempt": row.attempt,
        "stream": row.stream,
        "offset": row.offset,
        "data": base64.b64encode(row.data).decode(),
    }


def _status(session: Session) -> dict[str, Any]:
    return {
        "status": session.status,
        "reason": session.status_reason,
        "pending_reason": session.pending_reason if session.status == "PENDING" else None,
        "exit_code": session.exit_code,
    }


async def _attempts(db: AsyncSession, session_id: str, asked: int | None) -> _Attempts:
    """What a reader of *session_id* sees; 404 for an attempt it never had."""
    query = select(Kernel.id, Kernel.attempt).where(Kernel.session_id == session_id)
    latest = {kernel: attempt for kernel, attempt in (await db.execute(query)).all()}
    last = max(latest.values(), default=1)
    if asked is not None and asked > last:
        raise NotFound(f"session {session_id} has no attempt {asked}: its latest is {last}")
    return _Attempts(asked, latest)


async def _rows_after(
    db: AsyncSession, session_id: str, after: int, which: _Attempts
) -> list[SessionLog]:
    """The rows past row *after* that *which* may show (it picks among them)."""
    query = (
        select(SessionLog)
        .where(SessionLog.session_id == session_id, SessionLog.id > after)
        .order_by(SessionLog.id)
    )
    if which.asked is not None:
        query = query.where(SessionLog.attempt == which.asked)
    elif which.latest:
        query = query.where(SessionLog.attempt >= min(which.latest.values()))
    return list((await db.execute(query)).scalars())
