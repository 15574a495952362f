"""OpenID Connect ID tokens and binding rules (pure: no I/O).

::

    id_token ─▶ header: alg on the allow-list?  (none, HS*: refused)   check "algorithm"
             ─▶ kid in the provider's JWKS?    (no: the caller fetches it again once) "key"
             ─▶ signature (joserfc)                                       check "signature"
             ─▶ iss == the provider's issuer                               check "issuer"
             ─▶ aud holds our client id (and azp, when present, is ours)   check "audience"
             ─▶ exp, nbf, iat within LEEWAY                   check "expiry" / "not-before"
             ─▶ nonce == the one the sign-in sent (console)                check "nonce"
             ─▶ claims

Each refusal is a :class:`TokenRejected` (401) whose ``check`` names the step; its words
never quote the token. Keys come only from the provider's JWKS, and only asymmetric ones:
a JWKS ``oct`` key is dropped, so no token is ever checked with an HMAC keyed by
something public.

A binding rule maps a claim's value to a project and a role (Nomad's binding rules):
:func:`bind` says what one sign-in's claims are given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from joserfc import jws, jwt
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jwk import KeySet

from gateway.domain.errors import Unauthenticated

__all__ = [
    "ALGORITHMS",
    "LEEWAY_S",
    "Bound",
    "Rule",
    "TokenRejected",
    "UnknownKey",
    "bind",
    "key_set",
    "user_name",
    "validate",
]

#: asymmetric signatures only: never "none", never an HMAC (its key would have to be
#: shared with the provider, and a public key must never serve as one)
ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
LEEWAY_S: Final = 60  # clock skew allowed on exp, nbf and iat
MAX_SUBJECT: Final = 255  # as oidc_identities.subject holds (OIDC Core: at most 255 ASCII)
_ASYMMETRIC: Final = frozenset({"RSA", "EC", "OKP"})


class TokenRejected(Unauthenticated):
    """An ID token that fails *check*; the detail says why, without the token."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(detail, check=check, type="urn:jobgate:auth:token-rejected")
        self.check = check


class UnknownKey(TokenRejected):
    """The token names a key the JWKS we hold lacks: fetch the JWKS again, then retry."""

    def __init__(self, kid: str) -> None:
        super().__init__(
            "key", f"the token is signed with a key the provider does not publish (kid {kid!r})"
        )
        self.kid = kid


def key_set(jwks: Mapping[str, Any]) -> KeySet:
    """The provider's signing keys from its JWKS document: asymmetric ones only (an
    ``oct`` key, or one marked for encryption, is dropped)."""
    keys = [
        k
        for k in jwks.get("keys", [])
        if isinstance(k, dict) and k.get("kty") in _ASYMMETRIC and k.get("use", "sig") == "sig"
    ]
    try:
        return KeySet.import_key_set({"keys": keys})
    except (JoseError, ValueError, TypeError) as exc:
        raise TokenRejected("key", f"the provider's JWKS does not parse: {exc}") from None


def validate(
    token: str,
    keys: KeySet,
    *,
    issuer: str,
    audience: str,
    now: float,
    nonce: str | None = None,
) -> dict[str, Any]:
    """The claims of *token* when it passes every check above; else TokenRejected."""
    try:
        header = jws.extract_compact(token.strip().encode()).headers()
    except (JoseError, ValueError, TypeError, UnicodeError):
        raise TokenRejected(
            "format", "the token is not a signed JWT (header.payload.signature)"
        ) from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise TokenRejected(
            "algorithm",
            f"the token's algorithm {str(alg)[:16]!r} is not allowed "
            f"(only {', '.join(sorted(ALGORITHMS))})",
        )
    key = _key_for(keys, header)
    try:
        claims = dict(jwt.decode(token.strip(), key, algorithms=[str(alg)]).claims)
    except BadSignatureError:
        raise TokenRejected(
            "signature", "the token's signature does not verify with the provider's key"
        ) from None
    except (JoseError, ValueError, TypeError):
        raise TokenRejected(
            "signature", "the token does not verify with the provider's key"
        ) from None
    _check_claims(claims, issuer=issuer, audience=audience, now=now, nonce=nonce)
    return claims


def _key_for(keys: KeySet, header: Mapping[str, Any]) -> Any:
    kid = header.get("kid")
    if isinstance(kid, str):
        for key in keys.keys:
            if key.kid == kid:
                return key
        raise UnknownKey(kid[:64])
    if len(keys.keys) == 1:  # a provider with one key may leave kid out
        return keys.keys[0]
    raise UnknownKey("")


def _check_claims(
    claims: Mapping[str, Any], *, issuer: str, audience: str, now: float, nonce: str | None
) -> None:
    if claims.get("iss") != issuer:
        raise TokenRejected("issuer", f"the token was not issued by {issuer}")
    aud = claims.get("aud")
    auds = [aud] if isinstance(aud, str) else list(aud) if isinstance(aud, list) else []
    if audience not in auds:
        raise TokenRejected("audience", f"the token is not meant for this client ({audience})")
    if len(auds) > 1 and claims.get("azp") != audience:
        raise TokenRejected("audience", "the token names several audiences and another party")
    if "azp" in claims and claims["azp"] != audience:
        raise TokenRejected("audience", "the token was issued to another party (azp)")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or not math.isfinite(exp):
        raise TokenRejected("expiry", "the token has no expiry")
    if exp + LEEWAY_S < now:
        raise TokenRejected("expiry", "the token has expired")
    nbf = claims.get("nbf")
    iat = claims.get("iat")
    for name, value in (("nbf", nbf), ("iat", iat)):
        if isinstance(value, int | float) and not math.isfinite(value):
            raise TokenRejected("not-before", f"the token's {name} is not a time")
        if isinstance(value, int | float) and value - LEEWAY_S > now:
            raise TokenRejected("not-before", f"the token's {name} is in the future")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > MAX_SUBJECT:
        raise TokenRejected("subject", f"the token names no subject (1-{MAX_SUBJECT} characters)")
    if nonce is not None and claims.get("nonce") != nonce:
        raise TokenRejected("nonce", "the token's nonce is not the one this sign-in sent")


@dataclass(frozen=True, slots=True)
class Rule:
    """A binding rule: *claim* holding *value* gives *project* (an id, or None) and *role*."""

    claim: str
    value: str
    project_id: str | None
    role: str


@dataclass(frozen=True, slots=True)
class Bound:
    role: str
    project_ids: frozenset[str]


def bind(claims: Mapping[str, Any], rules: Iterable[Rule]) -> Bound:
    """What *claims* are given: ``admin`` when any matching rule says so, else ``user``;
    the projects of every matching rule. A claim matches when it equals the value or,
    as a list (a groups claim), holds it."""
    role, projects = "user", set[str]()
    for rule in rules:
        held = claims.get(rule.claim)
        values = held if isinstance(held, list) else [held]
        if rule.value not in [str(v) for v in values if v is not None]:
            continue
        if rule.role == "admin":
            role = "admin"
        if rule.project_id:
            projects.add(rule.project_id)
    return Bound(role, frozenset(projects))


_NOT_NAME = re.compile(r"[^a-z0-9_.-]+")


def user_name(claims: Mapping[str, Any], claim: str) -> str:
    """A jobgate user name from *claim* (falling back on the e-mail's local part, then
    the subject): lower case, ``[a-z][a-z0-9_.-]``, at most 60 characters (room for a
    suffix when the name is taken)."""
    for raw in (claims.get(claim), str(claims.get("email") or "").split("@")[0], claims.get("sub")):
        if not isinstance(raw, str) or not raw:
            continue
        name = _NOT_NAME.sub("-", raw.strip().lower()).strip("-.")
        if name and not name[0].isalpha():
            name = "u" + name
        if name:
            return name[:60]
    return "user"
