"""Session logs: append chunks from workers, read them whole, follow them live (SSE).

Workers upload each stream's bytes with their byte offset. The gateway keeps, per
kernel and stream, how many bytes it holds (``kernels.log_offsets``) and stores only
what is new, so an upload repeated after a worker restart never duplicates output.
Output past ``max_log_bytes`` per session is dropped, with one note saying so.
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
from gateway.services.views import get_owned

__all__ = ["LogChunkIn", "LogService"]

KEEPALIVE_S = 15.0
LIMIT_NOTE = b"\n[jobgate: log limit reached; further output of this session is not kept]\n"


@dataclass(frozen=True, slots=True)
class LogChunkIn:
    stream: str
    offset: int
    data: bytes


@dataclass(slots=True)
class _Delivered:
    """What a reader has already shown, so entries from two sources are never repeated."""

    offsets: dict[tuple[str, str], int]
    last_row: int = 0


class _Decoders:
    """Incremental UTF-8 decoding per (kernel, stream): a chunk may end mid-character."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], codecs.IncrementalDecoder] = {}

    def decode(self, kernel: str, stream: str, data: bytes) -> str:
        key = (kernel, stream)
        decoder = self._by_key.get(key)
        if decoder is None:
            decoder = self._by_key[key] = codecs.getincrementaldecoder("utf-8")("replace")
        return decoder.decode(data)


def _sse(event: str, payload: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


class LogService:
    def __init__(self, db: SessionFactory, redis: Redis, max_bytes: int) -> None:
        self.db = db
        self.redis = redis
        self.max_bytes = max_bytes

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
            if attempt is not None and attempt != kernel.attempt:  # fencing
                raise NotFound(f"attempt {attempt} of kernel {kernel_id} was moved elsewhere")
            offsets = {k: int(v) for k, v in kernel.log_offsets.items()}
            kept = sum(v for k, v in offsets.items() if not k.startswith("_"))
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
                        rows.append(_row(kernel, "system", 0, LIMIT_NOTE, now))
                    continue
                kept += len(data)
                rows.append(_row(kernel, chunk.stream, start, data, now))
            kernel.log_offsets = offsets
            db.add_all(rows)
            await db.flush()
            events = [(session_id, _log_event(r)) for r in rows]
        await live.publish_many(self.redis, events)
        return {k: v for k, v in offsets.items() if not k.startswith("_")}

    # -- read whole -------------------------------------------------------------------
    async def read(
        self, principal: Principal, session_id: str, streams: set[str] | None
    ) -> list[dict[str, Any]]:
        """All entries, decoded: ``[{"stream", "kernel", "data", "at"}]``."""
        decoders = _Decoders()
        async with self.db() as db:
            await get_owned(db, principal, session_id)
            rows = await _rows_after(db, session_id, 0)
        return [
            {
                "stream": r.stream,
                "kernel": r.kernel_id,
                "data": decoders.decode(r.kernel_id, r.stream, r.data),
                "at": r.created_at.isoformat(),
            }
            for r in rows
            if streams is None or r.stream in streams
        ]

    # -- follow (SSE) -----------------------------------------------------------------
    async def follow(self, principal: Principal, session_id: str) -> AsyncIterator[str]:
        """SSE frames: the current status, every log entry, status changes, then ``end``."""
        cursor = await live.last_id(self.redis, session_id)
        async with self.db() as db:
            session = await get_owned(db, principal, session_id)
            rows = await _rows_after(db, session_id, 0)
        seen = _Delivered(offsets={})
        decoders = _Decoders()
        yield _sse("status", _status(session))
        for frame in self._rows(rows, seen, decoders):
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
                    live_frame = self._live_log(event, seen, decoders)
                    if live_frame:
                        yield live_frame
                elif kind in ("status", "progress"):
                    yield _sse(kind, event)
                    if kind == "status":
                        status = SessionStatus(event["status"])
        # the worker uploads all output before it reports the exit: sweep for stragglers
        async with self.db() as db:
            rows = await _rows_after(db, session_id, seen.last_row)
        final = await self._session(session_id)
        for frame in self._rows(rows, seen, decoders):
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
        self, rows: Iterable[SessionLog], seen: _Delivered, decoders: _Decoders
    ) -> Iterable[str]:
        for r in rows:
            seen.last_row = max(seen.last_row, r.id)
            data = _unseen(seen, r.kernel_id, r.stream, r.offset, r.data)
            if data:
                yield _sse(
                    "log",
                    {
                        "stream": r.stream,
                        "kernel": r.kernel_id,
                        "data": decoders.decode(r.kernel_id, r.stream, data),
                    },
                )

    def _live_log(self, event: dict[str, Any], seen: _Delivered, decoders: _Decoders) -> str | None:
        seen.last_row = max(seen.last_row, int(event["row"]))
        raw = base64.b64decode(event["data"])
        data = _unseen(seen, event["kernel"], event["stream"], int(event["offset"]), raw)
        if not data:
            return None
        text = decoders.decode(event["kernel"], event["stream"], data)
        return _sse("log", {"stream": event["stream"], "kernel": event["kernel"], "data": text})


def _unseen(seen: _Delivered, kernel: str, stream: str, offset: int, data: bytes) -> bytes:
    if stream == "system":
        key = (kernel, f"system:{offset}:{len(data)}")
        if key in seen.offsets:
            return b""
        seen.offsets[key] = 1
        return data
    key = (kernel, stream)
    end = seen.offsets.get(key, 0)
    if offset + len(data) <= end:
        return b""
    seen.offsets[key] = offset + len(data)
    return data[max(0, end - offset) :]


def _row(kernel: Kernel, stream: str, offset: int, data: bytes, now: Any) -> SessionLog:
    return SessionLog(
        session_id=kernel.session_id,
        kernel_id=kernel.id,
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


async def _rows_after(db: AsyncSession, session_id: str, after: int) -> list[SessionLog]:
    query = (
        select(SessionLog)
        .where(SessionLog.session_id == session_id, SessionLog.id > after)
        .order_by(SessionLog.id)
    )
    return list((await db.execute(query)).scalars())
