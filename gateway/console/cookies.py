"""Console sign-ins: an API key pasted once, exchanged for a server-side session.

::

    POST /sign-in (key) ─▶ authenticate ─▶ SET jobgate:console:{sha256(cookie)}
                                            {"key_hash", "csrf"}  TTL = console_session_s
              ◀── Set-Cookie: jobgate_console=<cookie>; HttpOnly; SameSite=Strict; Path=/
    any request with the cookie ─▶ principal() ─▶ the key's Principal (revocation as for keys)
      unsafe methods also need  X-CSRF-Token == the stored token  and a same-origin Origin
    POST /sign-out ─▶ DEL the key: the cookie is worthless from then on

The browser holds a random 256-bit cookie, never the key; Redis holds the key's hash
(as the database does) under the hash of the cookie. The API's Bearer path does not
come through here.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from contract.keys import console_session_key
from contract.tokens import CONSOLE_COOKIE
from gateway.auth import KeyCache, Principal, authenticate, authenticate_digest, hash_key
from gateway.db.engine import SessionFactory
from gateway.domain.errors import Forbidden, Unauthenticated

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "SAFE_METHODS",
    "Signed",
    "principal",
    "set_cookie",
    "sign_in",
    "sign_out",
    "signed",
]

COOKIE = CONSOLE_COOKIE  # the app proxy strips it from what it forwards
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Signed:
    """A live console sign-in."""

    principal: Principal
    csrf: str
    #: a single sign-on made the key: signing out revokes it
    sso: bool = False


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


async def sign_in(
    redis: Redis,
    db: AsyncSession,
    keys: KeyCache,
    key: str,
    ttl_s: int,
    *,
    sso: bool = False,
) -> tuple[str, Signed]:
    """Check *key* as the API would; return the new cookie value and the sign-in.
    *sso*: a single sign-on made *key* for this sign-in alone (sign-out revokes it)."""
    who = await authenticate(db, key.strip(), keys)
    cookie = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    record = json.dumps({"key_hash": hash_key(key.strip()), "csrf": csrf, "sso": sso})
    await redis.set(console_session_key(_digest(cookie)), record, ex=ttl_s)
    return cookie, Signed(who, csrf, sso)


def set_cookie(response: Response, cookie: str, ttl_s: int, *, https: bool) -> None:
    """Give the browser its sign-in cookie (a key's sign-in and a single sign-on alike)."""
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=ttl_s,
        path="/",
        httponly=True,
        samesite="strict",
        secure=https,
    )


async def sign_out(redis: Redis, cookie: str) -> None:
    await redis.delete(console_session_key(_digest(cookie)))


async def signed(redis: Redis, db: SessionFactory, keys: KeyCache, cookie: str) -> Signed:
    """The sign-in behind *cookie*; Unauthenticated when it ended or its key no longer works."""
    raw = await redis.get(console_session_key(_digest(cookie)))
    if raw is None:
        raise Unauthenticated("the console sign-in ended; sign in again")
    record = json.loads(raw)
    async with db() as session:
        who = await authenticate_digest(session, str(record["key_hash"]), keys)
    return Signed(who, str(record["csrf"]), bool(record.get("sso", False)))


def same_origin(origin: str | None, host: str | None) -> bool:
    """An absent Origin is allowed (the CSRF token still decides); a present one must be ours."""
    if not origin:
        return True
    return host is not None and urlsplit(origin).netloc == host


async def principal(
    redis: Redis,
    db: SessionFactory,
    keys: KeyCache,
    *,
    cookie: str,
    method: str,
    csrf: str | None,
    origin: str | None,
    host: str | None,
) -> Principal:
    """The principal of a cookie-authenticated request, with the CSRF checks for writes."""
    sign = await signed(redis, db, keys, cookie)
    if method.upper() not in SAFE_METHODS:
        if not same_origin(origin, host):
            raise Forbidden("cross-origin request refused (the console is same-origin only)")
        if not csrf or not secrets.compare_digest(csrf.encode(), sign.csrf.encode()):
            raise Forbidden("a console write needs the page's CSRF token (X-CSRF-Token)")
    return sign.principal
