"""Single sign-on through OpenID Connect providers (docs/auth.md).

::

    CLI  jobgate login ─▶ the provider's device flow (RFC 8628) ─▶ id_token
                       ─▶ POST /v1/auth/token {provider, id_token} ─┐
    console  /console/sign-in/oidc/P ─▶ the provider (code + PKCE S256, state, nonce)
             /console/sign-in/oidc/P/callback ─▶ code ─▶ token endpoint ─▶ id_token ─┤
                                                                              ▼
      exchange(): validate (gateway/domain/oidc.py; the JWKS fetched again on an unknown
      kid; each ID token once) ─▶ the subject's user (made at the first sign-in, never
      an existing local user) ─▶ binding rules: role and projects ─▶ a jobgate API key
      that expires soon

A sign-in yields an ordinary API key (``oidc-PROVIDER-xxxxxx``): everything downstream
(scopes, the app proxy, revocation, the audit log) treats it as any key. The CLI keeps
the provider's refresh token and trades a fresh ID token for a fresh key when its key
expires, so a user disabled at the provider loses access within one key's life, and a
groups change takes effect at the next token.

The protocol's requests are built by Authlib (the authorization URL, the token request,
the S256 challenge) and sent with httpx, the one HTTP client of the gateway: Authlib's
own httpx integration now asks for the separate ``httpx2`` package.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri, prepare_token_request
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc.jwk import KeySet
from redis.asyncio import Redis
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import sso_used_key
from gateway.auth import KeyCache, issue_key
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    ApiKey,
    OidcBinding,
    OidcIdentity,
    OidcProvider,
    Project,
    ProjectMember,
    User,
    utcnow,
)
from gateway.domain import oidc
from gateway.domain.errors import Conflict, Invalid, NotFound, Unauthenticated
from gateway.domain.sealing import (
    MasterKey,
    Sealed,
    SealingError,
    associated_data,
    open_value,
    rewrap,
    seal,
)

__all__ = [
    "SSO_KEY_PREFIX",
    "BindingSpec",
    "OidcProvider",
    "OidcService",
    "ProviderSpec",
    "SignedIn",
    "rekey_providers",
]

SSO_KEY_PREFIX = "oidc-"  # the name of every key a sign-in makes: oidc-PROVIDER-xxxxxx
DISCOVERY_TTL_S = 3600.0
JWKS_MIN_INTERVAL_S = 1.0  # an unknown kid fetches the JWKS again, at most this often
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    issuer: str
    client_id: str
    client_secret: str | None = None  # None: keep the stored one; "": a public client
    cli_client_id: str = ""
    display_name: str = ""
    scopes: str = "openid profile email"
    username_claim: str = "preferred_username"
    groups_claim: str = "groups"


@dataclass(frozen=True, slots=True)
class BindingSpec:
    value: str
    claim: str = ""  # "": the provider's groups claim
    project: str | None = None
    role: str = "user"


@dataclass(frozen=True, slots=True)
class SignedIn:
    key: str
    key_name: str
    expires_at: datetime
    user: str
    role: str
    projects: list[str]
    created: bool  # the user was made by this sign-in


@dataclass
class _Issuer:
    """What we know of one provider's endpoints and keys."""

    metadata: dict[str, Any]
    fetched: float
    keys: KeySet | None = None
    keys_fetched: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def held(self, refresh: bool) -> KeySet | None:
        """The keys held, when they will do: always, but for a refresh (a kid we lack)
        once JWKS_MIN_INTERVAL_S has passed since they were fetched."""
        if self.keys is None:
            return None
        if refresh and time.monotonic() - self.keys_fetched >= JWKS_MIN_INTERVAL_S:
            return None
        return self.keys


def _secret_aad(provider_id: str, name: str) -> bytes:
    return associated_data(provider_id, "oidc-provider:" + name)


async def rekey_providers(db: AsyncSession, old: MasterKey, new: MasterKey) -> tuple[int, int]:
    """Every provider's client secret's data key wrapped again by *new*, in the caller's
    transaction (``jobgate admin secrets rekey``, with the user secrets): (rewrapped,
    already under *new*). One that *old* does not open stops it all (SealingError)."""
    done = kept = 0
    rows = await db.execute(
        select(OidcProvider)
        .where(OidcProvider.secret_ciphertext.is_not(None))
        .order_by(OidcProvider.id)
        .with_for_update()
    )
    for row in rows.scalars():
        if row.secret_key_id == new.key_id:
            kept += 1
            continue
        assert row.secret_ciphertext is not None
        assert row.secret_wrapped_key is not None
        sealed = Sealed(row.secret_ciphertext, row.secret_wrapped_key, row.secret_key_id or "")
        sealed = rewrap(old, new, _secret_aad(row.id, row.name), sealed)
        row.secret_wrapped_key, row.secret_key_id = sealed.wrapped_key, sealed.key_id
        done += 1
    return done, kept


def check_issuer(issuer: str) -> str:
    """An issuer URL: https, or http on a loopback host (a provider on this machine)."""
    try:
        parts = urlsplit(issuer)
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise Invalid("the issuer is not a URL", field="issuer") from None
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise Invalid("the issuer must be an https:// URL (http only on loopback)", field="issuer")
    if parts.query or parts.fragment:
        raise Invalid("the issuer must not carry a query or fragment", field="issuer")
    return issuer.rstrip("/")


class OidcService:
    def __init__(
        self,
        db: SessionFactory,
        keys: KeyCache,
        master: MasterKey | None,
        redis: Redis,
        *,
        key_ttl_s: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.db = db
        self.keys = keys
        self.master = master
        self.redis = redis
        self.key_ttl_s = key_ttl_s
        self._transport = transport
        self._issuers: dict[str, _Issuer] = {}

    # ---- admin: providers and binding rules ------------------------------------------
    async def put_provider(self, name: str, spec: ProviderSpec) -> tuple[OidcProvider, bool]:
        issuer = check_issuer(spec.issuer)
        if "openid" not in spec.scopes.split() or not spec.scopes.isprintable():
            raise Invalid("scopes must be space-separated and hold openid", field="scopes")
        async with self.db() as db, db.begin():
            row = await _provider(db, name, missing_ok=True)
            created = row is None
            if row is None:
                row = OidcProvider(name=name, issuer=issuer, client_id=spec.client_id)
                db.add(row)
                await db.flush()
            if row.issuer != issuer:  # a subject is unique per issuer only: the links go
                await db.execute(delete(OidcIdentity).where(OidcIdentity.provider_id == row.id))
            row.issuer, row.client_id = issuer, spec.client_id
            row.cli_client_id, row.display_name = spec.cli_client_id, spec.display_name
            row.scopes, row.username_claim = spec.scopes, spec.username_claim
            row.groups_claim = spec.groups_claim
            if spec.client_secret is not None:
                self._store_secret(row, spec.client_secret)
        self._issuers.pop(issuer, None)
        return row, created

    def _store_secret(self, row: OidcProvider, secret: str) -> None:
        if not secret:
            row.secret_ciphertext = row.secret_wrapped_key = row.secret_key_id = None
            return
        if self.master is None:
            raise Conflict(
                "secrets are not configured: set JOBGATE_SECRETS_KEY to keep a client "
                "secret (docs/secrets.md)",
                field="client_secret",
            )
        sealed = seal(self.master, _secret_aad(row.id, row.name), secret.encode())
        row.secret_ciphertext, row.secret_wrapped_key = sealed.ciphertext, sealed.wrapped_key
        row.secret_key_id = sealed.key_id

    def _secret(self, row: OidcProvider) -> str | None:
        if row.secret_ciphertext is None or row.secret_wrapped_key is None:
            return None
        if self.master is None:
            raise Unauthenticated("the provider's client secret cannot be opened: no secrets key")
        sealed = Sealed(row.secret_ciphertext, row.secret_wrapped_key, row.secret_key_id or "")
        try:
            return open_value(self.master, _secret_aad(row.id, row.name), sealed).decode()
        except SealingError:
            raise Conflict(
                f"provider {row.name!r}'s client secret does not open with the secrets key "
                "(was the key changed without `jobgate admin secrets rekey`?)"
            ) from None

    async def providers(self) -> list[OidcProvider]:
        async with self.db() as db:
            return list(
                (await db.execute(select(OidcProvider).order_by(OidcProvider.name))).scalars()
            )

    async def provider(self, name: str) -> OidcProvider:
        async with self.db() as db:
            row = await _provider(db, name)
            assert row is not None
            return row

    async def delete_provider(self, name: str) -> None:
        async with self.db() as db, db.begin():
            row = await _provider(db, name)
            await db.delete(row)

    async def put_binding(
        self, provider: str, name: str, spec: BindingSpec
    ) -> tuple[OidcBinding, bool]:
        if spec.role not in ("user", "admin"):
            raise Invalid("role must be user or admin", field="role")
        if spec.project is None and spec.role == "user":
            raise Invalid(
                "a binding rule gives a project, the admin role, or both", field="project"
            )
        async with self.db() as db, db.begin():
            prov = await _provider(db, provider)
            assert prov is not None
            project_id = None
            if spec.project is not None:
                project_id = (
                    await db.execute(select(Project.id).where(Project.name == spec.project))
                ).scalar_one_or_none()
                if project_id is None:
                    raise NotFound(f"no project named {spec.project!r}", field="project")
            row = (
                await db.execute(
                    select(OidcBinding).where(
                        OidcBinding.provider_id == prov.id, OidcBinding.name == name
                    )
                )
            ).scalar_one_or_none()
            created = row is None
            if row is None:
                row = OidcBinding(provider_id=prov.id, name=name, claim="", value="")
                db.add(row)
            row.claim = spec.claim or prov.groups_claim
            row.value, row.project_id, row.role = spec.value, project_id, spec.role
            await db.flush()
        return row, created

    async def bindings(self, provider: str) -> list[tuple[OidcBinding, str | None]]:
        async with self.db() as db:
            prov = await _provider(db, provider)
            assert prov is not None
            rows = await db.execute(
                select(OidcBinding, Project.name)
                .outerjoin(Project, Project.id == OidcBinding.project_id)
                .where(OidcBinding.provider_id == prov.id)
                .order_by(OidcBinding.name)
            )
            return [(b, p) for b, p in rows]

    async def delete_binding(self, provider: str, name: str) -> None:
        async with self.db() as db, db.begin():
            prov = await _provider(db, provider)
            assert prov is not None
            gone = await db.execute(
                delete(OidcBinding).where(
                    OidcBinding.provider_id == prov.id, OidcBinding.name == name
                )
            )
            if not getattr(gone, "rowcount", 0):
                raise NotFound(f"provider {provider!r} has no binding rule named {name!r}")

    # ---- signing in -------------------------------------------------------------------
    async def exchange(self, provider: str, id_token: str) -> SignedIn:
        """Validate *id_token* from *provider*; the user it names, bound anew, and a
        fresh API key of theirs that expires in ``key_ttl_s``."""
        prov = await self._known(provider)
        claims = await self._validate(prov, id_token, None)
        await self._spend(id_token, claims)
        return await self._sign_in(prov, claims, self.key_ttl_s)

    async def _spend(self, id_token: str, claims: dict[str, Any]) -> None:
        """Each ID token signs in once (until it expires, Redis remembers its hash)."""
        ttl = max(1, int(float(claims["exp"]) + oidc.LEEWAY_S - time.time()))
        # the signed part only: an ECDSA signature has a second valid form (s, n - s), so
        # the whole token would let one sign-in happen twice
        signed = id_token.strip().rpartition(".")[0]
        digest = hashlib.sha256(signed.encode()).hexdigest()
        if not await self.redis.set(sso_used_key(digest), b"1", nx=True, ex=ttl):
            raise oidc.TokenRejected("replay", "this ID token was already used to sign in")

    async def _known(self, provider: str) -> OidcProvider:
        async with self.db() as db:
            row = await _provider(db, provider, missing_ok=True)
        if row is None:
            raise oidc.TokenRejected(
                "provider",
                f"no identity provider named {provider!r}",
            )
        return row

    async def _validate(
        self, prov: OidcProvider, id_token: str, nonce: str | None
    ) -> dict[str, Any]:
        audiences = {prov.client_id, prov.cli_client_id or prov.client_id}
        keys = await self._keys(prov.issuer, refresh=False)
        for attempt in (0, 1):
            try:
                return _validate_any(id_token, keys, prov.issuer, audiences, nonce)
            except oidc.UnknownKey:
                if attempt:
                    raise
                keys = await self._keys(prov.issuer, refresh=True)  # rotated at the provider?
        raise AssertionError("unreachable")

    async def _sign_in(self, prov: OidcProvider, claims: dict[str, Any], ttl_s: int) -> SignedIn:
        try:
            return await self._sign_in_once(prov, claims, ttl_s)
        except IntegrityError:  # a first sign-in raced another (same subject, or name)
            return await self._sign_in_once(prov, claims, ttl_s)

    async def _sign_in_once(
        self, prov: OidcProvider, claims: dict[str, Any], ttl_s: int
    ) -> SignedIn:
        now = utcnow()
        via = f"oidc:{prov.name}"
        async with self.db() as db, db.begin():
            rules = [
                oidc.Rule(b.claim, b.value, b.project_id, b.role)
                for b in (
                    await db.execute(select(OidcBinding).where(OidcBinding.provider_id == prov.id))
                ).scalars()
            ]
            bound = oidc.bind(claims, rules)
            identity = await db.get(OidcIdentity, (prov.id, claims["sub"]))
            user = None if identity is None else await db.get(User, identity.user_id)
            created = user is None
            if user is None:
                user = User(name=await _free_name(db, oidc.user_name(claims, prov.username_claim)))
                user.role = bound.role
                db.add(user)
                await db.flush()
                # (a deleted user's identity went with it: the subject starts afresh)
                db.add(OidcIdentity(provider_id=prov.id, subject=claims["sub"], user_id=user.id))
            elif user.disabled:
                raise oidc.TokenRejected(
                    "user",
                    f"the user {user.name!r} is disabled in jobgate",
                )
            else:
                assert identity is not None
                identity.last_sign_in_at = now
                user.role = bound.role
            projects = await _bind_projects(db, user.id, via, bound.project_ids)
            stem = _key_stem(prov.name)
            await db.execute(  # this provider's sign-in keys of this user, expired a day ago
                delete(ApiKey).where(
                    ApiKey.user_id == user.id,
                    ApiKey.name.startswith(stem, autoescape=True),
                    func.length(ApiKey.name) == len(stem) + KEY_SUFFIX,
                    ApiKey.expires_at < now - timedelta(days=1),
                )
            )
            expires = now + timedelta(seconds=ttl_s)
            suffix = secrets.token_hex(KEY_SUFFIX // 2)
            row, key = await issue_key(db, user, stem + suffix, expires_at=expires)
            return SignedIn(key, row.name, expires, user.name, user.role, projects, created)

    # ---- the console's code flow ------------------------------------------------------
    async def authorization_url(
        self, provider: str, redirect_uri: str
    ) -> tuple[str, dict[str, str]]:
        """Where to send the browser, and what its callback must match (state, nonce, the
        PKCE verifier: kept server-side, never in the browser)."""
        prov = await self._known(provider)
        meta = await self._metadata(prov.issuer)
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        verifier = secrets.token_urlsafe(48)
        url = prepare_grant_uri(
            _endpoint(meta, "authorization_endpoint"),
            prov.client_id,
            "code",
            redirect_uri=redirect_uri,
            scope=prov.scopes,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        pending = {
            "provider": prov.name,
            "nonce": nonce,
            "verifier": verifier,
            "state": state,
            "redirect_uri": redirect_uri,
        }
        return url, pending

    async def finish(self, pending: dict[str, str], code: str, ttl_s: int) -> SignedIn:
        """The callback: trade *code* for tokens (Authlib, PKCE), validate, sign in."""
        prov = await self._known(pending["provider"])
        meta = await self._metadata(prov.issuer)
        secret = self._secret(prov)
        body = prepare_token_request(
            "authorization_code",
            code=code,
            redirect_uri=pending["redirect_uri"],
            code_verifier=pending["verifier"],
            client_id=prov.client_id,
            **({"client_secret": secret} if secret else {}),
        )
        token = await self._post_form(_endpoint(meta, "token_endpoint"), body)
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise oidc.TokenRejected("format", "the provider sent no ID token")
        claims = await self._validate(prov, id_token, pending["nonce"])
        await self._spend(id_token, claims)
        return await self._sign_in(prov, claims, ttl_s)

    async def _post_form(self, url: str, body: str) -> dict[str, Any]:
        """A token request (client_secret_post, or a public client's id alone)."""
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        }
        answer, doc = await self._call("POST", url, content=body, headers=headers)
        if answer.status_code != 200 or not isinstance(doc, dict):
            said = doc if isinstance(doc, dict) else {}
            error, described = said.get("error", answer.status_code), said.get("error_description")
            raise oidc.TokenRejected(
                "code",
                f"the provider refused the sign-in: {error}"
                + (f": {described}" if described else ""),
            )
        return doc

    # ---- what the provider publishes -------------------------------------------------
    async def _call(self, method: str, url: str, **kwargs: Any) -> tuple[httpx.Response, Any]:
        """One request to the provider: its answer and decoded JSON body."""
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, transport=self._transport) as http:
                answer = await http.request(method, url, **kwargs)
            return answer, answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise oidc.TokenRejected(
                "provider",
                f"the identity provider cannot be reached ({url}): {type(exc).__name__}",
            ) from None

    async def _fetch(self, url: str) -> dict[str, Any]:
        answer, doc = await self._call("GET", url)
        if answer.status_code != 200 or not isinstance(doc, dict):
            raise oidc.TokenRejected(
                "provider", f"{url} answered {answer.status_code}, not a JSON object"
            )
        return doc

    async def _metadata(self, issuer: str) -> dict[str, Any]:
        known = self._issuers.get(issuer)
        if known is not None and time.monotonic() - known.fetched < DISCOVERY_TTL_S:
            return known.metadata
        meta = await self._fetch(issuer + "/.well-known/openid-configuration")
        if str(meta.get("issuer", "")).rstrip("/") != issuer:
            raise oidc.TokenRejected(
                "issuer",
                f"the provider's discovery document names another issuer than {issuer}",
            )
        self._issuers[issuer] = _Issuer(meta, time.monotonic())
        return meta

    async def _keys(self, issuer: str, *, refresh: bool) -> KeySet:
        """The provider's keys: those held, or (*refresh*: a token named a kid we lack)
        fetched again - at most once per JWKS_MIN_INTERVAL_S, never waiting for it: a
        flood of made-up kids gets the held keys (and its refusal) at once, and ordinary
        sign-ins never queue behind it."""
        meta = await self._metadata(issuer)
        known = self._issuers[issuer]
        if (held := known.held(refresh)) is not None:
            return held
        async with known.lock:
            if (held := known.held(refresh)) is not None:
                return held  # fetched meanwhile by the one that held the lock
            known.keys = oidc.key_set(await self._fetch(_endpoint(meta, "jwks_uri")))
            known.keys_fetched = time.monotonic()
            return known.keys

    async def public(self) -> list[dict[str, Any]]:
        """What a sign-in page and ``jobgate login`` need to know (no secrets)."""
        return [
            {
                "name": p.name,
                "display_name": p.display_name or p.name,
                "issuer": p.issuer,
                "cli_client_id": p.cli_client_id or p.client_id,
                "scopes": p.scopes,
            }
            for p in await self.providers()
        ]


KEY_SUFFIX = 6  # hex digits after the stem


def _key_stem(provider: str) -> str:
    return f"{SSO_KEY_PREFIX}{provider[:40]}-"


def _endpoint(meta: dict[str, Any], name: str) -> str:
    """An endpoint the provider's discovery document must name."""
    url = meta.get(name)
    if not isinstance(url, str) or not url:
        raise oidc.TokenRejected(
            "provider",
            f"the provider's discovery document names no {name}",
        )
    return url


def _validate_any(
    token: str, keys: KeySet, issuer: str, audiences: set[str], nonce: str | None
) -> dict[str, Any]:
    """Validate for whichever of our client ids the token names (the console's and the
    CLI's clients may differ): the audience check is the last to give up."""
    failure: oidc.TokenRejected | None = None
    for audience in sorted(audiences):
        try:
            return oidc.validate(
                token, keys, issuer=issuer, audience=audience, now=time.time(), nonce=nonce
            )
        except oidc.TokenRejected as exc:
            if exc.check != "audience":
                raise
            failure = exc
    assert failure is not None
    raise failure


async def _provider(
    db: AsyncSession, name: str, *, missing_ok: bool = False
) -> OidcProvider | None:
    row = (
        await db.execute(select(OidcProvider).where(OidcProvider.name == name))
    ).scalar_one_or_none()
    if row is None and not missing_ok:
        raise NotFound(f"no identity provider named {name!r}")
    return row


async def _free_name(db: AsyncSession, wanted: str) -> str:
    """*wanted*, or *wanted*-2, -3 …: a sign-in never becomes an existing user."""
    taken = set(
        (
            await db.execute(select(User.name).where(User.name.startswith(wanted, autoescape=True)))
        ).scalars()
    )
    if wanted not in taken:
        return wanted
    n = 2
    while f"{wanted}-{n}" in taken:
        n += 1
    return f"{wanted}-{n}"


async def _bind_projects(
    db: AsyncSession, user_id: str, via: str, wanted: frozenset[str]
) -> list[str]:
    """Make the user's memberships that *via* gave equal *wanted*: add the missing, drop
    the ones whose rule no longer matches; an admin's own additions stay. Returns the
    names of the projects the user is now a member of."""
    have = {
        m.project_id: m
        for m in (
            await db.execute(select(ProjectMember).where(ProjectMember.user_id == user_id))
        ).scalars()
    }
    for project_id, member in have.items():
        if member.via == via and project_id not in wanted:
            await db.delete(member)
    for project_id in wanted - have.keys():
        db.add(ProjectMember(project_id=project_id, user_id=user_id, via=via))
    await db.flush()
    names = await db.execute(
        select(Project.name)
        .join(ProjectMember, ProjectMember.project_id == Project.id)
        .where(ProjectMember.user_id == user_id)
        .order_by(Project.name)
    )
    return list(names.scalars())
