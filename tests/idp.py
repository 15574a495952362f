"""A real OpenID Connect provider for tests, on a loopback port.

The gateway's single sign-on is tested against this rather than against a fake of what
the gateway expects: the protocol is done by Authlib's server components (the
authorization code grant with PKCE and OpenID Connect ID tokens, the refresh token
grant, the device authorization grant of RFC 8628, the UserInfo endpoint), served by
Flask on werkzeug's server in a thread. What is ours is the storage (dicts behind a
lock), the sign-in and device-verification pages and the knobs tests turn: users and
their groups, disabling them, rotating the signing key and forging tokens
(:meth:`TestIdP.sign`).

    with TestIdP() as idp:
        idp.add_client("jobgate", secret="s3cret", redirect_uris=[callback])
        idp.set_user("alice", email="alice@example.org", groups=["ml"])
        ... discovery at idp.issuer + "/.well-known/openid-configuration"
"""

from __future__ import annotations

import base64
import html
import json
import secrets
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, cast
from urllib.parse import urljoin, urlsplit

import httpx
from authlib.integrations.flask_oauth2 import AuthorizationServer, ResourceProtector
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidGrantError,
    InvalidRequestError,
    TokenMixin,
    UnauthorizedClientError,
    grants,
    list_to_scope,
    scope_to_list,
)
from authlib.oauth2.rfc6750 import BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import (
    DEVICE_CODE_GRANT_TYPE,
    DeviceAuthorizationEndpoint,
    DeviceCodeGrant,
    DeviceCredentialDict,
)
from authlib.oidc.core import UserInfo, UserInfoEndpoint
from authlib.oidc.core.grants import OpenIDCode, OpenIDToken
from flask import Flask, request
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import OctKey, RSAKey
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

__all__ = ["SCOPES", "SignInRefused", "TestIdP"]

SCOPES = ["openid", "profile", "email", "groups", "offline_access"]
_PUBLIC_AUTH = ["none"]
_SECRET_AUTH = ["client_secret_basic", "client_secret_post"]
_GRANT_TYPES = ["authorization_code", "refresh_token"]  # every client's; device flow on request
_CLAIMS = ["sub", "preferred_username", "email", "groups"]


def _loopback(redirect_uri: str) -> bool:
    """A native app's loopback redirect (RFC 8252 §7.3): ``http`` to 127.0.0.1, [::1] or
    localhost, on any port (given explicitly), to the path ``/callback`` exactly; no query,
    no fragment, no user."""
    try:
        parts = urlsplit(redirect_uri)
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme == "http"
        and parts.hostname in ("127.0.0.1", "::1", "localhost")
        and port is not None
        and parts.path == "/callback"
        and not parts.query
        and not parts.fragment
        and not parts.username
    )


class SignInRefused(Exception):
    """A sign-in or device approval the IdP's page refused (wrong password, disabled)."""


@dataclass
class _User:
    sub: str
    name: str | None
    email: str | None
    groups: list[str]
    password: str
    disabled: bool

    def get_user_id(self) -> str:
        return self.sub

    def claims(self) -> UserInfo:
        info = UserInfo(sub=self.sub, preferred_username=self.name or self.sub)
        if self.email:
            info["email"] = self.email
        info["groups"] = list(self.groups)
        return info


@dataclass
class _Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    secret: str | None
    redirect_uris: list[str]
    device: bool
    loopback: bool = False
    client_metadata: dict[str, Any] = field(default_factory=dict)  # read by UserInfoEndpoint

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return list_to_scope([s for s in scope_to_list(scope) or [] if s in SCOPES])  # type: ignore[no-any-return]

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris or (self.loopback and _loopback(redirect_uri))

    def check_client_secret(self, client_secret: str) -> bool:
        return self.secret is not None and secrets.compare_digest(self.secret, client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in (_PUBLIC_AUTH if self.secret is None else _SECRET_AUTH)

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in _GRANT_TYPES or (self.device and grant_type == DEVICE_CODE_GRANT_TYPE)


@dataclass
class _Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    client_id: str
    redirect_uri: str | None
    scope: str
    sub: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str | None:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None

    def expired(self) -> bool:
        return time.time() > self.auth_time + 600


@dataclass
class _Token(TokenMixin):  # type: ignore[misc]
    idp: TestIdP
    access_token: str
    refresh_token: str | None
    client_id: str
    scope: str
    sub: str
    expires_in: int
    issued_at: float = field(default_factory=time.time)

    def check_client(self, client: _Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() > self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return False

    def get_user(self) -> _User | None:
        return self.idp._users.get(self.sub)

    def get_client(self) -> _Client | None:
        return self.idp._clients.get(self.client_id)


class _IdTokens:
    """What every grant's ID token shares: signed with the current key, our claims."""

    def __init__(self, idp: TestIdP) -> None:
        self.idp = idp

    def resolve_client_private_key(self, client: _Client) -> RSAKey:
        return self.idp._keys[0]

    def get_client_algorithm(self, client: _Client) -> str:
        return "RS256"

    def get_encode_header(self, client: _Client) -> dict[str, str]:
        return {"alg": "RS256", "kid": self.idp._keys[0].kid or ""}

    def get_client_claims(self, client: _Client) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.idp.issuer, "aud": client.client_id, "iat": now,
                "exp": now + self.idp.token_ttl_s}  # fmt: skip

    def generate_user_info(self, user: _User, scope: str) -> UserInfo:
        return self.idp._current(user.sub).claims()


class _OpenIDCode(_IdTokens, OpenIDCode):  # type: ignore[misc]
    require_nonce = False  # passed through when given

    def exists_nonce(self, nonce: str, request: Any) -> bool:
        client_id = request.payload.client_id
        with self.idp._lock:
            codes = list(self.idp._codes.values())
        return any(c.nonce == nonce and c.client_id == client_id for c in codes)


class _OpenIDToken(_IdTokens, OpenIDToken):  # type: ignore[misc]
    """The ID token on refresh and device grants (OpenIDCode is the code grant's)."""


class _PKCE(CodeChallenge):  # type: ignore[misc]
    """PKCE, S256 only; public clients must use it."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if grant.request.client.secret is None and not data.get("code_challenge"):
            raise InvalidRequestError("PKCE (code_challenge, S256) is required")
        if data.get("code_challenge") and data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256")
        super().validate_code_challenge(grant, redirect_uri)


class _AuthorizationCodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = [*_SECRET_AUTH, *_PUBLIC_AUTH]

    def save_authorization_code(self, code: str, request: Any) -> None:
        data = request.payload.data
        item = _Code(code, request.client.client_id, request.payload.redirect_uri,
                     request.scope or "", request.user.sub, data.get("nonce"),
                     data.get("code_challenge"), data.get("code_challenge_method"))  # fmt: skip
        with self.server.idp._lock:
            self.server.idp._codes[code] = item

    def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
        with self.server.idp._lock:
            item: _Code | None = self.server.idp._codes.get(code)
        if item is None or item.client_id != client.client_id or item.expired():
            return None
        return item

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        with self.server.idp._lock:
            self.server.idp._codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: _Code) -> _User | None:
        user: _User | None = self.server.idp._enabled(authorization_code.sub)
        return user


class _RefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = [*_SECRET_AUTH, *_PUBLIC_AUTH]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
        with self.server.idp._lock:
            token: _Token | None = self.server.idp._refresh.get(refresh_token)
        return token

    def authenticate_user(self, refresh_token: _Token) -> _User:
        user: _User | None = self.server.idp._enabled(refresh_token.sub)
        if user is None:
            raise InvalidGrantError("The user is disabled or gone.")
        return user

    def revoke_old_credential(self, refresh_token: _Token) -> None:
        with self.server.idp._lock:  # rotation: each refresh token works once
            self.server.idp._refresh.pop(refresh_token.refresh_token or "", None)


class _DeviceCodeGrant(DeviceCodeGrant):  # type: ignore[misc]
    def query_device_credential(self, device_code: str) -> DeviceCredentialDict | None:
        with self.server.idp._lock:
            found: DeviceCredentialDict | None = self.server.idp._devices.get(device_code)
        return found

    def query_user_grant(self, user_code: str) -> tuple[_User, bool] | None:
        with self.server.idp._lock:
            decision = self.server.idp._device_decisions.get(user_code)
        if decision is None:
            return None
        sub, approved = decision
        user = self.server.idp._users[sub]
        return user, approved and not user.disabled

    def should_slow_down(self, credential: DeviceCredentialDict) -> bool:
        return False

    def create_token_response(self) -> Any:
        response = super().create_token_response()
        with self.server.idp._lock:  # a device code is good for one set of tokens
            self.server.idp._devices.pop(self.request.payload.data["device_code"], None)
        return response


class _DeviceEndpoint(DeviceAuthorizationEndpoint):  # type: ignore[misc]
    INTERVAL = 1

    def __init__(self, server: _Server) -> None:
        super().__init__(server)
        self.EXPIRES_IN = server.idp.device_ttl_s

    def authenticate_client(self, request: Any) -> _Client:
        client: _Client = super().authenticate_client(request)
        if not client.check_grant_type(DEVICE_CODE_GRANT_TYPE):
            raise UnauthorizedClientError("The client may not use the device flow.")
        return client

    def get_verification_uri(self) -> str:
        return f"{self.server.idp.issuer}/device/verify"

    def save_device_credential(self, client_id: str, scope: str, data: dict[str, Any]) -> None:
        expires_at = time.time() + self.EXPIRES_IN
        item = DeviceCredentialDict(client_id=client_id, scope=scope, expires_at=expires_at, **data)
        with self.server.idp._lock:
            self.server.idp._devices[data["device_code"]] = item


class _Revocation(RevocationEndpoint):  # type: ignore[misc]
    """RFC 7009: a client revokes its own tokens (a public client by its id alone)."""

    CLIENT_AUTH_METHODS = [*_SECRET_AUTH, *_PUBLIC_AUTH]

    def query_token(self, token_string: str, token_type_hint: str | None) -> _Token | None:
        idp: TestIdP = self.server.idp
        with idp._lock:
            return idp._refresh.get(token_string) or idp._tokens.get(token_string)

    def revoke_token(self, token: _Token, request: Any) -> None:
        idp: TestIdP = self.server.idp
        with idp._lock:  # the pair goes: its access token and its refresh token
            idp._tokens.pop(token.access_token, None)
            idp._refresh.pop(token.refresh_token or "", None)


class _UserInfoEndpoint(UserInfoEndpoint):  # type: ignore[misc]
    def __init__(self, idp: TestIdP, protector: ResourceProtector) -> None:
        super().__init__(resource_protector=protector)
        self.idp = idp

    def generate_user_info(self, user: _User, scope: str) -> UserInfo:
        return self.idp._current(user.sub).claims()


class _BearerTokens(BearerTokenValidator):  # type: ignore[misc]
    def __init__(self, idp: TestIdP) -> None:
        super().__init__()
        self.idp = idp

    def authenticate_token(self, token_string: str) -> _Token | None:
        with self.idp._lock:
            return self.idp._tokens.get(token_string)


class _Server(AuthorizationServer):  # type: ignore[misc]
    idp: TestIdP


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class _Forms(HTMLParser):
    """The first form of a page: its action and its inputs' names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.error = ""
        self._in_error = False

    @classmethod
    def parse(cls, page: str) -> _Forms:
        forms = cls()
        forms.feed(page)
        return forms

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {k: v or "" for k, v in attrs}
        if tag == "form" and self.action is None:
            self.action = attr.get("action", "")
        elif tag == "input" and attr.get("name"):
            self.fields[attr["name"]] = attr.get("value", "")
        self._in_error = attr.get("class") == "error"

    def handle_endtag(self, tag: str) -> None:
        self._in_error = False

    def handle_data(self, data: str) -> None:
        if self._in_error:
            self.error += data


def _page(title: str, action: str, hidden: dict[str, str], visible: str, error: str) -> str:
    fields = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in hidden.items()
    )
    note = f'<p class="error">{html.escape(error)}</p>' if error else ""
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>"
        f'{note}<form method="post" action="{action}">{fields}{visible}</form></body></html>'
    )


_CREDENTIALS = (
    '<label>Username <input name="username" autocomplete="username"></label>'
    '<label>Password <input name="password" type="password"></label>'
)


class TestIdP:
    """An OpenID Connect provider on ``127.0.0.1``: start it, add clients and users."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.issuer = ""
        self.token_ttl_s = 300
        self.device_ttl_s = 600
        self.offer_device_flow = True  # False: discovery names no device endpoint
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._users: dict[str, _User] = {}
        self._codes: dict[str, _Code] = {}
        self._tokens: dict[str, _Token] = {}  # by access token
        self._refresh: dict[str, _Token] = {}  # by refresh token
        self._devices: dict[str, DeviceCredentialDict] = {}  # by device code
        self._device_decisions: dict[str, tuple[str, bool]] = {}  # user code: (sub, approved)
        self._keys: list[RSAKey] = [self._new_key()]
        self._oauth: _Server  # set by start()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    # ---- running ------------------------------------------------------------------------

    def start(self) -> TestIdP:
        self._server = make_server(
            "127.0.0.1", 0, self._app(), threaded=True, request_handler=_QuietHandler
        )
        self.issuer = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="test-idp", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._server.server_close()
            self._server = self._thread = None

    def __enter__(self) -> TestIdP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- clients, users, keys -------------------------------------------------------------

    def add_client(
        self,
        client_id: str,
        *,
        secret: str | None = None,
        redirect_uris: list[str] | None = None,
        device: bool = False,
        loopback: bool = False,
    ) -> None:
        """A public client (no *secret*: PKCE S256 required) or a confidential one; with
        *device* it may use the device flow, with *loopback* redirect to
        ``http://127.0.0.1:ANY-PORT/callback`` (also ``[::1]`` and ``localhost``)."""
        uris = list(redirect_uris or [])
        with self._lock:
            self._clients[client_id] = _Client(client_id, secret, uris, device, loopback)

    def set_user(
        self,
        sub: str,
        *,
        name: str | None = None,
        email: str | None = None,
        groups: list[str] | None = None,
        password: str = "pw",
        disabled: bool = False,
    ) -> None:
        """Create or update a user. On update, a ``None`` name, email or groups keeps the
        current value; password and disabled are always set. New claims show in the next
        token issued, refreshes included."""
        with self._lock:
            old = self._users.get(sub)
            if old is not None:
                name = old.name if name is None else name
                email = old.email if email is None else email
                groups = old.groups if groups is None else groups
            self._users[sub] = _User(sub, name, email, list(groups or []), password, disabled)

    def disable(self, sub: str) -> None:
        """Refuse the user's sign-ins, refreshes and device approvals from now on."""
        with self._lock:
            self._users[sub].disabled = True

    def rotate_keys(self, *, keep_old: bool = False) -> str:
        """A new current signing key; the old ones stay in the JWKS only if *keep_old*."""
        key = self._new_key()
        with self._lock:
            self._keys = [key, *self._keys] if keep_old else [key]
        return key.kid or ""

    def public_jwk(self) -> dict[str, Any]:
        """The current signing key's public half, as published in the JWKS."""
        return self._keys[0].as_dict(private=False, use="sig", alg="RS256")

    def sign(
        self,
        claims: dict[str, Any],
        *,
        kid: str | None = None,
        alg: str = "RS256",
        key: object | None = None,
        header: dict[str, Any] | None = None,
    ) -> str:
        """Forge a JWT: *claims* signed with the current key, or with *key* (a joserfc key,
        or bytes/str as an HMAC secret for ``HS*``). ``alg="none"`` gives an unsigned one.
        The ``kid`` header is the current key's unless *kid* or *header* says otherwise."""
        head = {"alg": alg, "kid": kid or self._keys[0].kid, **(header or {})}
        head = {k: v for k, v in head.items() if v is not None}  # header={"kid": None}: none
        if alg == "none":
            parts = [json.dumps(head).encode(), json.dumps(claims).encode()]
            encoded = [base64.urlsafe_b64encode(p).rstrip(b"=").decode() for p in parts]
            return ".".join([*encoded, ""])
        with warnings.catch_warnings():  # weak keys and odd algorithms are the point here
            warnings.simplefilter("ignore", SecurityWarning)
            if isinstance(key, str | bytes):
                key = OctKey.import_key(key)
            signed: str = jwt.encode(head, claims, cast(Any, key or self._keys[0]), [alg])
        return signed

    # ---- what a user does in the browser, over httpx ----------------------------------

    def sign_in(self, authorize_url: str, sub: str, password: str = "pw") -> str:
        """Open *authorize_url*, fill the sign-in form and return where the IdP redirects
        (the client's redirect_uri with code and state). Raises SignInRefused."""
        with httpx.Client() as client:
            page = client.get(authorize_url)
            response = self._submit(client, page, username=sub, password=password)
        if response.status_code != 302:
            raise SignInRefused(_Forms.parse(response.text).error or response.text)
        return response.headers["location"]

    def approve_device(self, user_code: str, sub: str, password: str = "pw") -> None:
        """Approve a device's sign-in on the verification page. Raises SignInRefused."""
        self._device_page(user_code, sub, password, "approve")

    def deny_device(self, user_code: str, sub: str, password: str = "pw") -> None:
        """Deny it there: the device then gets ``access_denied``."""
        self._device_page(user_code, sub, password, "deny")

    def _device_page(self, user_code: str, sub: str, password: str, action: str) -> None:
        with httpx.Client() as client:
            page = client.get(f"{self.issuer}/device/verify", params={"user_code": user_code})
            response = self._submit(client, page, username=sub, password=password, action=action)
        if response.status_code != 200 or 'class="done"' not in response.text:
            raise SignInRefused(_Forms.parse(response.text).error or response.text)

    @staticmethod
    def _submit(client: httpx.Client, page: httpx.Response, **values: str) -> httpx.Response:
        page.raise_for_status()
        form = _Forms.parse(page.text)
        if form.action is None:
            raise AssertionError(f"no form on {page.url}: {page.text}")
        url = urljoin(str(page.url), form.action)
        return client.post(url, data={**form.fields, **values})

    # ---- internals --------------------------------------------------------------------

    @staticmethod
    def _new_key() -> RSAKey:
        key = RSAKey.generate_key(2048, auto_kid=True)
        return key

    def _current(self, sub: str) -> _User:
        with self._lock:
            return self._users[sub]

    def _enabled(self, sub: str) -> _User | None:
        with self._lock:
            user = self._users.get(sub)
        return None if user is None or user.disabled else user

    def _check_password(self, username: str, password: str) -> tuple[_User | None, str]:
        user = self._enabled(username)
        if user is None or not secrets.compare_digest(user.password, password):
            return None, "Wrong username or password, or the account is disabled."
        return user, ""

    def _save_token(self, token: dict[str, Any], req: Any) -> None:
        item = _Token(self, token["access_token"], token.get("refresh_token"),
                      req.client.client_id, token.get("scope", ""), req.user.sub,
                      token["expires_in"])  # fmt: skip
        with self._lock:
            self._tokens[item.access_token] = item
            if item.refresh_token:
                self._refresh[item.refresh_token] = item

    def _discovery(self) -> dict[str, Any]:
        base = self.issuer
        meta: dict[str, Any] = {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "userinfo_endpoint": f"{base}/userinfo",
            "revocation_endpoint": f"{base}/revoke",
            "jwks_uri": f"{base}/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": [*_GRANT_TYPES, DEVICE_CODE_GRANT_TYPE],
            "code_challenge_methods_supported": ["S256"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": SCOPES,
            "subject_types_supported": ["public"],
            "token_endpoint_auth_methods_supported": [*_SECRET_AUTH, *_PUBLIC_AUTH],
            "claims_supported": [*_CLAIMS, "iss", "aud", "exp", "iat", "nonce"],
        }
        if self.offer_device_flow:
            meta["device_authorization_endpoint"] = f"{base}/device"
        return meta

    def _jwks(self) -> dict[str, Any]:
        with self._lock:
            keys = list(self._keys)
        return {"keys": [k.as_dict(private=False, use="sig", alg="RS256") for k in keys]}

    def _authorize(self) -> Any:
        """The sign-in page; a correct POST redirects to the client with the code."""
        try:
            grant = self._oauth.get_consent_grant(end_user=None)
        except OAuth2Error as error:
            return self._oauth.handle_error_response(None, error)
        problem = ""
        if request.method == "POST":
            form = request.form
            user, problem = self._check_password(form.get("username", ""), form.get("password", ""))
            if user is not None:
                return self._oauth.create_authorization_response(grant=grant, grant_user=user)
        query = {k: v for k, v in request.values.items() if k not in ("username", "password")}
        button = '<button type="submit">Sign in</button>'
        return _page("Sign in", "/authorize", query, _CREDENTIALS + button, problem)

    def _device_verify(self) -> str:
        """The device verification page: a code, a user, approve or deny."""
        user_code = request.values.get("user_code", "").strip().upper()
        problem = ""
        if request.method == "POST":
            form = request.form
            user, problem = self._check_password(form.get("username", ""), form.get("password", ""))
            with self._lock:
                live = [d for d in self._devices.values() if not d.is_expired()]
                if user is not None and user_code not in [d["user_code"] for d in live]:
                    problem = "Unknown or expired code."
                elif user is not None:
                    approved = form.get("action", "approve") == "approve"
                    self._device_decisions[user_code] = (user.sub, approved)
                    word = "approved" if approved else "denied"
                    return f'<!doctype html><p class="done">Device {word}.</p>'
        code = f'<label>Code <input name="user_code" value="{html.escape(user_code)}"></label>'
        buttons = (
            '<button type="submit" name="action" value="approve">Approve</button>'
            '<button type="submit" name="action" value="deny">Deny</button>'
        )
        page = code + _CREDENTIALS + buttons
        return _page("Device sign-in", "/device/verify", {}, page, problem)

    def _authorization_server(self, app: Flask) -> _Server:
        """Authlib's server: its grants, their extensions and endpoints, on our storage."""
        grant_types = ("authorization_code", "refresh_token", DEVICE_CODE_GRANT_TYPE)
        app.config.update(
            OAUTH2_SCOPES_SUPPORTED=SCOPES,
            OAUTH2_REFRESH_TOKEN_GENERATOR=True,
            OAUTH2_TOKEN_EXPIRES_IN=dict.fromkeys(grant_types, self.token_ttl_s),
        )
        server = _Server(app, query_client=self._clients.get, save_token=self._save_token)
        server.idp = self
        server.register_grant(_AuthorizationCodeGrant, [_PKCE(required=True), _OpenIDCode(self)])
        server.register_grant(_RefreshTokenGrant, [_OpenIDToken(self)])
        server.register_grant(_DeviceCodeGrant, [_OpenIDToken(self)])
        server.register_endpoint(_DeviceEndpoint(server))
        server.register_endpoint(_Revocation)
        protector = ResourceProtector()
        protector.register_token_validator(_BearerTokens(self))
        server.register_endpoint(_UserInfoEndpoint(self, protector))
        return server

    def _app(self) -> Flask:
        app = Flask(__name__)
        server = self._oauth = self._authorization_server(app)
        routes: list[tuple[str, list[str], Callable[[], Any]]] = [
            ("/.well-known/openid-configuration", ["GET"], self._discovery),
            ("/jwks", ["GET"], self._jwks),
            ("/authorize", ["GET", "POST"], self._authorize),
            ("/token", ["POST"], server.create_token_response),
            ("/device", ["POST"], lambda: server.create_endpoint_response("device_authorization")),
            ("/device/verify", ["GET", "POST"], self._device_verify),
            ("/revoke", ["POST"], lambda: server.create_endpoint_response("revocation")),
            ("/userinfo", ["GET", "POST"], lambda: server.create_endpoint_response("userinfo")),
        ]
        for path, methods, view in routes:
            app.add_url_rule(path, path, view, methods=methods)
        return app
