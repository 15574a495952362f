"""Single sign-on for the CLI: the device authorization grant (RFC 8628), trading the ID
token for a key and renewing the short-lived key it yields (docs/auth.md). The loopback
redirect of ``jobgate login --browser`` (RFC 8252) is ``jobgate/sso_loopback.py``; it
ends in :func:`login` too.

::

    jobgate login ─▶ GET /v1/auth/sign-in (the gateway's providers, their CLI client id)
                  ─▶ the provider's discovery ─▶ POST device_authorization_endpoint
                  ─▶ "open URL, enter CODE" ─▶ poll token_endpoint (interval, slow_down)
                  ─▶ id_token + refresh_token ─▶ POST /v1/auth/token ─▶ an API key
                  ─▶ the profile (0600): the key, and [sso] with the refresh token
    any command, the key about to expire ─▶ token_endpoint (refresh_token grant)
                  ─▶ POST /v1/auth/token ─▶ a new key, saved; a provider that says no
                     (the user disabled, the grant revoked) ends the sign-in

The requests are built by Authlib (``prepare_token_request``, imported only when a token
is asked for: every command imports this module) and sent with httpx.
Tokens are never printed and never put in an error message.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlencode

import httpx

from jobgate.client import Client, segment, tls_for
from jobgate.errors import ApiError
from jobgate.profile import Profile, SignOn, profile_lock

__all__ = [
    "DEVICE_GRANT",
    "FORM",
    "DeviceCode",
    "Grant",
    "choose",
    "discover",
    "login",
    "provider_client",
    "provider_error",
    "provider_request",
    "renewed",
    "revoke_refresh_token",
    "scopes_for",
    "start_device",
    "token_request",
    "wait_for_tokens",
]

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
RENEW_BEFORE = timedelta(seconds=30)  # renew a key this long before it expires
FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}


class DeviceCode:
    """A device authorization in progress: what the user is shown, and what is polled."""

    def __init__(
        self,
        answer: dict[str, Any],
        token_endpoint: str,
        client_id: str,
        revocation_endpoint: str = "",
    ) -> None:
        self.device_code = str(answer["device_code"])
        self.user_code = str(answer["user_code"])
        self.verification_uri = str(answer.get("verification_uri") or answer["verification_url"])
        self.complete_uri = str(answer.get("verification_uri_complete", ""))
        self.interval = float(answer.get("interval", 5))
        self.expires_at = time.monotonic() + float(answer.get("expires_in", 600))
        self.token_endpoint = token_endpoint
        self.client_id = client_id
        self.revocation_endpoint = revocation_endpoint


def token_request(grant_type: str, **params: str) -> str:
    from authlib.oauth2.rfc6749.parameters import prepare_token_request

    body: str = prepare_token_request(grant_type, **params)
    return body


def provider_client(url: str) -> httpx.Client:
    return httpx.Client(timeout=15.0, verify=tls_for(url))


def provider_error(answer: httpx.Response, what: str) -> ApiError:
    try:
        body = answer.json()
    except ValueError:
        body = {}
    error = body.get("error", answer.status_code) if isinstance(body, dict) else answer.status_code
    said = body.get("error_description", "") if isinstance(body, dict) else ""
    return ApiError(
        401,
        "Unauthenticated",
        f"the identity provider refused {what}: {error}" + (f" ({said})" if said else ""),
    )


def provider_request(http: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        return http.request(method, url, **kwargs)
    except httpx.TransportError as exc:
        raise ApiError(
            0, "Unreachable", f"cannot reach the identity provider at {url} ({exc})"
        ) from None


def choose(providers: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    """The provider to sign in through: *name*, or the only one there is."""
    if not providers:
        raise ApiError(
            0,
            "Usage",
            "this gateway has no identity provider; sign in with an API key "
            "(JOBGATE_API_KEY) or ask an admin to add one (docs/auth.md)",
        )
    if name is None:
        if len(providers) > 1:
            names = ", ".join(p["name"] for p in providers)
            raise ApiError(0, "Usage", f"several providers ({names}): choose one with --provider")
        return providers[0]
    for provider in providers:
        if provider["name"] == name:
            return provider
    raise ApiError(0, "Usage", f"no identity provider named {name!r} on this gateway")


def discover(provider: dict[str, Any]) -> dict[str, Any]:
    """*provider*'s OpenID discovery document."""
    issuer = str(provider["issuer"]).rstrip("/")
    with provider_client(issuer) as http:
        found = provider_request(http, "GET", issuer + "/.well-known/openid-configuration")
    if found.status_code != 200:
        raise ApiError(0, "Unreachable", f"{issuer} has no OpenID discovery document")
    meta: dict[str, Any] = found.json()
    return meta


def scopes_for(provider: dict[str, Any]) -> str:
    """The provider's scopes, with ``offline_access``: a refresh token, so the key can be
    renewed."""
    scopes = str(provider.get("scopes") or "openid")
    if "offline_access" not in scopes.split():
        scopes += " offline_access"
    return scopes


def start_device(provider: dict[str, Any], meta: dict[str, Any] | None = None) -> DeviceCode:
    """Ask *provider* (its discovery document *meta*) for a device code (RFC 8628 §3.1)."""
    meta = discover(provider) if meta is None else meta
    endpoint = meta.get("device_authorization_endpoint")
    if not endpoint:
        raise ApiError(
            0,
            "Usage",
            f"{provider['name']} offers no device sign-in (RFC 8628); "
            "use `jobgate login --browser`",
        )
    client_id = str(provider["cli_client_id"])
    with provider_client(str(endpoint)) as http:
        answer = provider_request(
            http,
            "POST",
            str(endpoint),
            data={"client_id": client_id, "scope": scopes_for(provider)},
            headers={"Accept": "application/json"},
        )
    if answer.status_code != 200:
        raise provider_error(answer, "the device sign-in")
    revocation = str(meta.get("revocation_endpoint") or "")
    return DeviceCode(answer.json(), str(meta["token_endpoint"]), client_id, revocation)


def wait_for_tokens(
    device: DeviceCode, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Poll until the user approved (the tokens), refused or let the code expire."""
    interval = max(device.interval, 1.0)
    body = token_request(DEVICE_GRANT, device_code=device.device_code, client_id=device.client_id)
    with provider_client(device.token_endpoint) as http:
        while time.monotonic() < device.expires_at:
            sleep(interval)
            answer = provider_request(
                http, "POST", device.token_endpoint, content=body, headers=FORM
            )
            if answer.status_code == 200:
                tokens: dict[str, Any] = answer.json()
                return tokens
            error = _error_code(answer)
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                interval += 5  # RFC 8628 §3.5
                continue
            if error == "access_denied":
                raise ApiError(401, "Unauthenticated", "the sign-in was refused at the provider")
            raise provider_error(answer, "the device sign-in")
    raise ApiError(
        401, "Unauthenticated", "the code expired before it was entered; run `jobgate login` again"
    )


def _error_code(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


def _exchange(profile: Profile, provider: str, id_token: str) -> dict[str, Any]:
    """``POST /v1/auth/token``: the ID token is the credential (no key is sent)."""
    api = Client(Profile(profile.url, "", profile.proxy_url))
    try:
        done: dict[str, Any] = api.post(
            "/v1/auth/token", json={"provider": provider, "id_token": id_token}
        )
    finally:
        api.close()
    return done


class Grant(Protocol):
    """A sign-in at the provider (a :class:`DeviceCode`, or the loopback redirect's
    ``jobgate.sso_loopback.BrowserSignIn``): where its refresh token is traded, by whom."""

    token_endpoint: str
    client_id: str
    revocation_endpoint: str  # "" where the provider publishes none (RFC 7009)


def login(
    profile: Profile, provider: dict[str, Any], grant: Grant, tokens: dict[str, Any]
) -> tuple[Profile, dict[str, Any]]:
    """Trade the provider's ID token for a key; the profile to save, and what the gateway said."""
    id_token = tokens.get("id_token")
    if not isinstance(id_token, str):
        raise ApiError(
            401, "Unauthenticated", "the provider sent no ID token (is 'openid' among the scopes?)"
        )
    done = _exchange(profile, str(provider["name"]), id_token)
    sso = SignOn(
        provider=str(provider["name"]),
        token_endpoint=grant.token_endpoint,
        client_id=grant.client_id,
        refresh_token=str(tokens.get("refresh_token") or ""),
        key_name=str(done["key_name"]),
        key_expires_at=str(done["expires_at"]),
        revocation_endpoint=grant.revocation_endpoint,
    )
    return Profile(profile.url, str(done["key"]), profile.proxy_url, sso), done


def _expiring(sso: SignOn) -> bool:
    try:
        expires = datetime.fromisoformat(sso.key_expires_at.replace("Z", "+00:00"))
    except ValueError:
        return True
    return expires - RENEW_BEFORE <= datetime.now(UTC)


#: what a provider says when the refresh token itself is no good (RFC 6749 §5.2): the
#: sign-in is over; anything else (an outage, a 5xx, a 429) leaves it for the next try
REFUSED = frozenset({"invalid_grant", "unauthorized_client", "invalid_client"})


def renewed(profile: Profile, save: Callable[[Profile], object] = Profile.save) -> Profile:
    """*profile*, its key renewed first when a ``jobgate login`` made it and it is about
    to expire. A provider that refuses the refresh token ends the sign-in.

    Commands started together renew once: the first holds a lock on the profile while it
    renews, the others then read the key it saved (a provider that rotates refresh tokens
    takes a second use of one as theft, and revokes them all)."""
    if profile.sso is None or not _expiring(profile.sso):
        return profile
    with profile_lock():
        current = Profile.load()  # as another command may have left it
        if current.sso is None or current.url != profile.url:
            raise ApiError(401, "Unauthenticated", "signed out meanwhile; run `jobgate login`")
        if not _expiring(current.sso):
            return current
        return _renew(current, current.sso, save)


def _renew(profile: Profile, sso: SignOn, save: Callable[[Profile], object]) -> Profile:
    if not sso.refresh_token:
        raise ApiError(401, "Unauthenticated", "the sign-in expired; run `jobgate login` again")
    body = token_request("refresh_token", refresh_token=sso.refresh_token, client_id=sso.client_id)
    with provider_client(sso.token_endpoint) as http:
        answer = provider_request(http, "POST", sso.token_endpoint, content=body, headers=FORM)
    if answer.status_code != 200:
        error = provider_error(answer, "to renew the sign-in")
        if answer.status_code in (400, 401) and _error_code(answer) in REFUSED:
            save(Profile(profile.url, "", profile.proxy_url, None))  # worth nothing now
            raise ApiError(401, "Unauthenticated", f"{error.detail}; run `jobgate login` again")
        raise ApiError(0, "Unreachable", f"{error.detail}; the sign-in is kept: try again")
    tokens = answer.json()
    id_token = tokens.get("id_token")
    if not isinstance(id_token, str) or not id_token:
        raise ApiError(
            401,
            "Unauthenticated",
            "the provider renewed without an ID token (is 'openid' "
            "among the provider's scopes?); run `jobgate login` again",
        )
    done = _exchange(profile, sso.provider, id_token)
    fresh = SignOn(
        sso.provider,
        sso.token_endpoint,
        sso.client_id,
        str(tokens.get("refresh_token") or sso.refresh_token),  # rotated, or the same
        str(done["key_name"]),
        str(done["expires_at"]),
        sso.revocation_endpoint,
    )
    updated = Profile(profile.url, str(done["key"]), profile.proxy_url, fresh)
    save(updated)
    _revoke_key(updated, sso.key_name)  # the key it replaces stops now, not in 15 minutes
    return updated


def _revoke_key(profile: Profile, name: str) -> None:
    """Revoke the sign-in's previous key with the new one (best effort: it expires soon
    anyway, and a gateway that does not answer must not fail the command)."""
    api = Client(profile, timeout=10.0)
    with contextlib.suppress(ApiError):
        api.delete(f"/v1/keys/{segment(name)}")
    api.close()


def revoke_refresh_token(sso: SignOn) -> bool:
    """Ask the provider to revoke the sign-in's refresh token (RFC 7009): whether it
    said yes. A provider without a revocation endpoint, or one that is unreachable, leaves
    the token to expire there (the profile forgets it either way)."""
    if not sso.revocation_endpoint or not sso.refresh_token:
        return False
    body = urlencode(
        {"token": sso.refresh_token, "token_type_hint": "refresh_token", "client_id": sso.client_id}
    )
    try:
        with provider_client(sso.revocation_endpoint) as http:
            answer = http.post(sso.revocation_endpoint, content=body, headers=FORM)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200
