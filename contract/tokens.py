"""Signed app tokens (in links) and auth cookies (in browsers), HMAC-SHA256 over compact JSON.

Both have the same URL- and cookie-safe shape, ``<payload>.<signature>``, each part
unpadded base64url. The payload is a JSON list whose first item is a version number; the
signature covers a *purpose* as well as the payload, so a cookie can never pass as a
token or the other way round.

* An **app token** says "user U may open app A of session S until T" and carries a
  random id; the gateway mints it (:func:`issue_app_token`, 60 s by default) and the
  proxy accepts it once (the one-time check lives in Redis, see
  :mod:`appproxy.frontend.auth`).
* An **auth cookie** says "user U may use session S until T"; the proxy sets it when it
  accepts a token.
* An **app secret** (:func:`app_secret`) is what the proxy presents to a session's apps
  and what they check (Jupyter's token, code-server's password, a terminal's Basic
  credential): a process on the node that reaches an app's port without it is refused.
  It is derived, not stored: ``HMAC(proxy secret, session id)``. The gateway computes it
  for the start job, the proxy for each forwarded request; neither the database nor the
  Redis route holds it, and one session's secret says nothing about another's.

``admin`` records that the gateway let an administrator open someone else's session; the
proxy lets a holder in if it is the session's owner or ``admin`` is set.

    >>> token = issue_app_token("s" * 32, "sess-1", "jupyter", "user-1", now=1000)
    >>> verify_app_token("s" * 32, token, now=1030).app
    'jupyter'
    >>> verify_app_token("s" * 32, token, now=1061)
    Traceback (most recent call last):
    ...
    contract.tokens.TokenError: the link has expired
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CONSOLE_COOKIE",
    "AppToken",
    "CookieGrant",
    "TokenError",
    "app_secret",
    "issue_app_token",
    "issue_cookie",
    "verify_app_token",
    "verify_cookie",
]

#: the gateway's web console sign-in cookie. Cookies are scoped by host, not port, so
#: where the console and the proxy share a host (``jobgate up``) browsers send it to the
#: proxy too: the proxy never passes it on to an app.
CONSOLE_COOKIE: Final = "jobgate_console"

_VERSION: Final = 1
_TOKEN: Final = b"jobgate/app-token"
_COOKIE: Final = b"jobgate/app-cookie"
_APP_SECRET: Final = b"jobgate/app-secret"
_MAX_LENGTH: Final = 2048  # anything longer was not made here
_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class TokenError(ValueError):
    """A token or cookie that does not let anyone in; ``reason`` is a stable code.

    Reasons: ``malformed`` (not ours at all), ``signature`` (altered, or signed with
    another secret), ``expired``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AppToken:
    session_id: str
    app: str
    user_id: str
    admin: bool
    expires_at: int  # epoch seconds
    token_id: str  # random; the proxy remembers it to refuse a second use


@dataclass(frozen=True, slots=True)
class CookieGrant:
    session_id: str
    user_id: str
    admin: bool
    expires_at: int


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if not key:
        raise ValueError("the proxy secret is empty")
    return key


def _mac(secret: str | bytes, purpose: bytes, payload: str) -> bytes:
    message = purpose + b"\n" + payload.encode("ascii")
    return hmac.new(_key(secret), message, hashlib.sha256).digest()


def app_secret(secret: str | bytes, session_id: str) -> str:
    """The session's app secret: 64 hex digits, the same wherever *secret* is the same.

    >>> app_secret("s" * 32, "sess-1") == app_secret("s" * 32, "sess-1")
    True
    >>> app_secret("s" * 32, "sess-1") != app_secret("s" * 32, "sess-2")
    True
    """
    return _mac(secret, _APP_SECRET, session_id).hex()


def _seal(secret: str | bytes, purpose: bytes, fields: list[object]) -> str:
    payload = _b64encode(json.dumps([_VERSION, *fields], separators=(",", ":")).encode())
    return f"{payload}.{_b64encode(_mac(secret, purpose, payload))}"


def _open(secret: str | bytes, purpose: bytes, value: str, arity: int) -> list[object]:
    """The fields of a sealed value, after checking its shape and signature."""
    if len(value) > _MAX_LENGTH or not _SHAPE.fullmatch(value):
        raise TokenError("malformed", "not a jobgate token")
    payload, signature = value.split(".")
    try:
        given = _b64decode(signature)
    except (binascii.Error, ValueError) as exc:
        raise TokenError("malformed", "not a jobgate token") from exc
    expected = _mac(secret, purpose, payload)
    if not hmac.compare_digest(given, expected):
        raise TokenError("signature", "the token's signature does not match")
    try:
        fields = json.loads(_b64decode(payload))
    except (binascii.Error, ValueError) as exc:  # signed by us, so only a bug gets here
        raise TokenError("malformed", "not a jobgate token") from exc
    if not isinstance(fields, list) or len(fields) != arity + 1 or fields[0] != _VERSION:
        raise TokenError("malformed", "a jobgate token of another version")
    return fields[1:]


def _check_expiry(expires_at: object, now: float | None) -> int:
    if not isinstance(expires_at, int):
        raise TokenError("malformed", "not a jobgate token")
    if (time.time() if now is None else now) > expires_at:
        raise TokenError("expired", "the link has expired")
    return expires_at


def _strings(*values: object) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in values):
        raise TokenError("malformed", "not a jobgate token")
    return tuple(str(v) for v in values)


def issue_app_token(
    secret: str | bytes,
    session_id: str,
    app: str,
    user_id: str,
    ttl: int = 60,
    *,
    admin: bool = False,
    now: float | None = None,
) -> str:
    """A one-time token that lets ``user_id`` open ``app`` of ``session_id`` for ``ttl`` s."""
    if ttl <= 0:
        raise ValueError("ttl must be positive")
    expires = int(time.time() if now is None else now) + ttl
    token_id = secrets.token_urlsafe(12)
    return _seal(secret, _TOKEN, [session_id, app, user_id, int(admin), expires, token_id])


def verify_app_token(secret: str | bytes, token: str, *, now: float | None = None) -> AppToken:
    """The token's claims, or :class:`TokenError`; the one-time check is the caller's."""
    session_id, app, user_id, admin, expires, token_id = _open(secret, _TOKEN, token, 6)
    expires_at = _check_expiry(expires, now)
    session_id, app, user_id, token_id = _strings(session_id, app, user_id, token_id)
    return AppToken(session_id, app, user_id, admin == 1, expires_at, token_id)


def issue_cookie(
    secret: str | bytes,
    session_id: str,
    user_id: str,
    *,
    admin: bool,
    lifetime: int,
    now: float | None = None,
) -> str:
    """The value of the auth cookie for ``user_id`` in ``session_id``."""
    expires = int(time.time() if now is None else now) + lifetime
    return _seal(secret, _COOKIE, [session_id, user_id, int(admin), expires])


def verify_cookie(secret: str | bytes, value: str, *, now: float | None = None) -> CookieGrant:
    """The cookie's claims, or :class:`TokenError`."""
    session_id, user_id, admin, expires = _open(secret, _COOKIE, value, 4)
    expires_at = _check_expiry(expires, now)
    session_id, user_id = _strings(session_id, user_id)
    return CookieGrant(session_id, user_id, admin == 1, expires_at)
