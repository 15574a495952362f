"""Who is asking: a one-time link token, a jobgate API key, or the proxy's auth cookie.

    ?jobgate_token=...   verify (signature, expiry, this session and app) -> after the
                         route check, burn it in Redis (SET NX) -> 303 + Set-Cookie
    Authorization: Bearer jg_...   ask the gateway who holds the key (cached)
    Cookie: jobgate_auth=...       verify; it must name this session

The result is a :class:`Principal` or the page explaining the refusal. Whether the
principal may use the session is :func:`authorized`: its owner, or an administrator.
An API key must also carry the ``sessions`` scope (:data:`OPEN_APPS`), or it is refused
before anything is said about the session; a link (and the cookie it becomes) comes
from the gateway, which asked that scope of the key that asked for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from redis.exceptions import RedisError

from appproxy.frontend.addressing import Target
from appproxy.frontend.cookies import cookie_values, set_cookie_header
from appproxy.frontend.incoming import Incoming
from appproxy.frontend.users import GatewayUnavailable, UserDirectory
from appproxy.pages import (
    FORBIDDEN,
    GATEWAY_UNAVAILABLE,
    KEY_LACKS_SCOPE,
    LINK_EXPIRED,
    NOT_SIGNED_IN,
    Page,
)
from appproxy.routes import RoutesUnavailable
from contract.keys import used_token_key
from contract.routes import TOKEN_QUERY_PARAM, RouteRecord
from contract.tokens import (
    AppToken,
    CookieGrant,
    TokenError,
    issue_cookie,
    verify_app_token,
    verify_cookie,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "OPEN_APPS",
    "Authenticator",
    "Exchange",
    "Outcome",
    "Principal",
    "authorized",
    "take_token",
]

#: the scope an API key needs to open a session's apps (as it needs to ask for a link)
OPEN_APPS: Final = "sessions"

_GRANT_CACHE_SIZE: Final = 10_000
_TOKEN_PREFIX: Final = TOKEN_QUERY_PARAM + "="
_SIGN_IN_EXPIRED: Final = LINK_EXPIRED.with_detail(
    "Your sign-in to this session has expired. Open the app again from jobgate."
)
_WRONG_LINK: Final = LINK_EXPIRED.with_detail(
    "This link was made for another app or session. Open the app again from jobgate."
)
_BAD_KEY: Final = NOT_SIGNED_IN.with_detail("jobgate does not know this API key.")
_OTHER_SESSION: Final = FORBIDDEN.with_detail("This sign-in belongs to another session.")
_NO_SESSIONS_SCOPE: Final = KEY_LACKS_SCOPE.with_detail(
    f"This API key lacks the {OPEN_APPS!r} scope, which opening a session's apps needs. "
    f"Use a key with it (jobgate keys create NAME --scope {OPEN_APPS})."
)


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: str
    admin: bool
    via: Literal["token", "cookie", "bearer"]


@dataclass(frozen=True, slots=True)
class Exchange:
    """An accepted link token: burn it, set the cookie, send the browser on."""

    token: AppToken
    set_cookie: bytes
    location: str


@dataclass(frozen=True, slots=True)
class Outcome:
    principal: Principal | None = None
    refusal: Page | None = None
    exchange: Exchange | None = None


def authorized(principal: Principal, route: RouteRecord) -> bool:
    return principal.admin or principal.user_id == route.owner_id


def take_token(query: str) -> tuple[str | None, str]:
    """The link token in a query string, and the query string without it."""
    if _TOKEN_PREFIX not in query:
        return None, query
    token: str | None = None
    kept: list[str] = []
    for part in query.split("&"):
        if part.startswith(_TOKEN_PREFIX):
            token = part[len(_TOKEN_PREFIX) :]
        elif part:
            kept.append(part)
    return token, "&".join(kept)


class Authenticator:
    """Turns a request's credentials into a :class:`Principal` (or a refusal page)."""

    def __init__(
        self,
        *,
        secret: str,
        users: UserDirectory,
        redis: Redis,
        cookie_lifetime: int,
        always_secure: bool,
    ) -> None:
        self._secret = secret
        self._users = users
        self._redis = redis
        self._lifetime = cookie_lifetime
        self._always_secure = always_secure
        # Verified cookie values: a browser sends the same one with every request, and
        # checking a signature costs more than the rest of the proxy's own work.
        self._grants: dict[str, CookieGrant] = {}

    async def authenticate(self, req: Incoming, target: Target) -> Outcome:
        token, rest = take_token(req.query)
        if token is not None:
            return self._from_token(token, rest, req, target)
        if req.jobgate_key is not None:
            return await self._from_key(req.jobgate_key)
        return self._from_cookie(req, target)

    async def redeem(self, token: AppToken) -> bool:
        """Mark the token used; False when it had been used already.

        Raises :class:`~appproxy.routes.RoutesUnavailable` when Redis cannot say.
        """
        ttl = max(1, token.expires_at - int(time.time()) + 5)
        try:
            claimed = await self._redis.set(used_token_key(token.token_id), b"1", nx=True, ex=ttl)
        except (RedisError, OSError) as exc:
            raise RoutesUnavailable(type(exc).__name__) from exc
        return bool(claimed)

    def _from_token(self, raw: str, rest: str, req: Incoming, target: Target) -> Outcome:
        try:
            token = verify_app_token(self._secret, raw)
        except TokenError:
            return Outcome(refusal=LINK_EXPIRED)
        if token.session_id != target.session_id or token.app != target.app:
            return Outcome(refusal=_WRONG_LINK)
        value = issue_cookie(
            self._secret,
            token.session_id,
            token.user_id,
            admin=token.admin,
            lifetime=self._lifetime,
        )
        secure = self._always_secure or req.scheme == "https"
        cookie = set_cookie_header(
            value, path=target.cookie_path, max_age=self._lifetime, secure=secure
        )
        location = req.raw_path + (f"?{rest}" if rest else "")
        principal = Principal(token.user_id, token.admin, "token")
        return Outcome(principal=principal, exchange=Exchange(token, cookie, location))

    async def _from_key(self, key: str) -> Outcome:
        try:
            user = await self._users.lookup(key)
        except GatewayUnavailable:
            return Outcome(refusal=GATEWAY_UNAVAILABLE)
        if user is None:
            return Outcome(refusal=_BAD_KEY)
        if not user.allows(OPEN_APPS):  # nothing said about the session yet
            return Outcome(refusal=_NO_SESSIONS_SCOPE)
        return Outcome(principal=Principal(user.id, user.admin, "bearer"))

    def _from_cookie(self, req: Incoming, target: Target) -> Outcome:
        refusal = NOT_SIGNED_IN
        for value in cookie_values(req.cookies):
            try:
                grant = self._verified(value)
            except TokenError as exc:
                if exc.reason == "expired" and refusal is NOT_SIGNED_IN:
                    refusal = _SIGN_IN_EXPIRED
                continue
            if grant.session_id == target.session_id:
                return Outcome(principal=Principal(grant.user_id, grant.admin, "cookie"))
            refusal = _OTHER_SESSION
        return Outcome(refusal=refusal)

    def _verified(self, value: str) -> CookieGrant:
        grant = self._grants.get(value)
        if grant is None:
            grant = verify_cookie(self._secret, value)
            if len(self._grants) >= _GRANT_CACHE_SIZE:
                del self._grants[next(iter(self._grants))]  # the oldest
            self._grants[value] = grant
        elif grant.expires_at < time.time():
            del self._grants[value]
            raise TokenError("expired", "the sign-in has expired")
        return grant
