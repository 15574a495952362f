"""``jobgate login --browser``: the authorization code flow with PKCE through a loopback
redirect (RFC 8252 §7.3), for when a browser is at hand or the provider offers no
device flow.

::

    start_browser() ─▶ a one-shot HTTP server on 127.0.0.1:PORT (a thread)
                    ─▶ the authorization URL: code + PKCE S256, state, nonce,
                       redirect_uri http://127.0.0.1:PORT/callback, the CLI's client id
    the user's browser ─▶ the provider's sign-in ─▶ GET /callback?code=…&state=…
    wait_for_tokens() ─▶ state checked ─▶ token_endpoint (authorization_code grant,
                       the verifier) ─▶ id_token (its nonce checked) + refresh_token

What follows (the ID token traded at the gateway, the profile saved, renewal) is the
device flow's: ``jobgate.sso.login``. The server answers one callback, then stops; any
other path is a 404. Authlib builds the requests (imported only here, when asked).
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jobgate.errors import ApiError
from jobgate.sso import (
    FORM,
    provider_client,
    provider_error,
    provider_request,
    scopes_for,
    token_request,
)

__all__ = ["CALLBACK", "WAIT_S", "BrowserSignIn", "start_browser", "wait_for_tokens"]

CALLBACK = "/callback"
WAIT_S = 300.0  # as long as a provider's sign-in page usually lasts


class _Callback(BaseHTTPRequestHandler):
    """GET /callback once; anything else is a 404."""

    server: _Server
    timeout = 10  # a browser's idle pre-connection does not hold a thread for long

    def do_GET(self) -> None:
        where = urlsplit(self.path)
        if where.path != CALLBACK:
            self._answer(404, "Not found.")
            return
        query = {k: v[0] for k, v in parse_qs(where.query).items()}
        title, status = self.server.sign_in.arrived(query)
        self._answer(status, title)

    def _answer(self, status: int, text: str) -> None:
        page = (
            "<!doctype html><html><head><meta charset=utf-8><title>jobgate</title></head>"
            f"<body><p>{html.escape(text)}</p></body></html>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the query holds the code: never logged


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sign_in: BrowserSignIn


class BrowserSignIn:
    """A sign-in in progress: the loopback server, and what the callback must match."""

    def __init__(self, provider: dict[str, Any], meta: dict[str, Any]) -> None:
        from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
        from authlib.oauth2.rfc7636 import create_s256_code_challenge

        self.token_endpoint = str(meta["token_endpoint"])
        self.client_id = str(provider["cli_client_id"])
        self.revocation_endpoint = str(meta.get("revocation_endpoint") or "")
        self.state = secrets.token_urlsafe(24)
        self.nonce = secrets.token_urlsafe(24)
        self.verifier = secrets.token_urlsafe(48)  # 64 characters of [A-Za-z0-9_-]
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result: dict[str, str] | None = None
        self._server = _Server(("127.0.0.1", 0), _Callback)
        self._server.sign_in = self
        self.redirect_uri = f"http://127.0.0.1:{self._server.server_address[1]}{CALLBACK}"
        self.url: str = prepare_grant_uri(
            str(meta["authorization_endpoint"]),
            self.client_id,
            "code",
            redirect_uri=self.redirect_uri,
            scope=scopes_for(provider),
            state=self.state,
            nonce=self.nonce,
            code_challenge=create_s256_code_challenge(self.verifier),
            code_challenge_method="S256",
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="jobgate-login", daemon=True
        )
        self._thread.start()

    def arrived(self, query: dict[str, str]) -> tuple[str, int]:
        """The browser came back with *query*: the page to show it, and its status."""
        with self._lock:
            if self._result is not None:
                return "This sign-in is already over; see the terminal.", 400
            self._result = query
        self._done.set()
        if not secrets.compare_digest(query.get("state", ""), self.state):
            return "This sign-in was not started here; see the terminal.", 400
        if "error" in query:
            return f"The sign-in failed: {query['error']}. See the terminal.", 400
        if not query.get("code"):
            return "The provider sent no code; see the terminal.", 400
        return "Signed in to jobgate; you can close this tab.", 200

    def wait(self, timeout_s: float = WAIT_S) -> str:
        """The code the browser brings back, within *timeout_s*; the server stopped."""
        try:
            if not self._done.wait(timeout_s):
                raise ApiError(
                    401,
                    "Unauthenticated",
                    f"no sign-in came back within {timeout_s:.0f} s; run `jobgate login` again",
                )
        finally:
            self.close()
        query = self._result or {}
        if not secrets.compare_digest(query.get("state", ""), self.state):
            raise ApiError(
                401,
                "Unauthenticated",
                "the browser came back with another sign-in's state (not started here); "
                "nothing was saved: run `jobgate login --browser` again",
            )
        if "error" in query:
            said = query.get("error_description", "")
            raise ApiError(
                401,
                "Unauthenticated",
                f"the identity provider refused the sign-in: {query['error']}"
                + (f" ({said})" if said else ""),
            )
        code = query.get("code", "")
        if not code:
            raise ApiError(401, "Unauthenticated", "the identity provider sent no code")
        return code

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def start_browser(provider: dict[str, Any], meta: dict[str, Any]) -> BrowserSignIn:
    """Start the loopback server and build the authorization URL (*meta*: the provider's
    discovery document)."""
    if not meta.get("authorization_endpoint") or not meta.get("token_endpoint"):
        raise ApiError(0, "Usage", f"{provider['name']} offers no authorization code sign-in")
    return BrowserSignIn(provider, meta)


def wait_for_tokens(sign_in: BrowserSignIn, timeout_s: float = WAIT_S) -> dict[str, Any]:
    """Wait for the browser's callback, trade its code (with the PKCE verifier) for the
    provider's tokens, and check the ID token carries this sign-in's nonce."""
    code = sign_in.wait(timeout_s)
    body = token_request(
        "authorization_code",
        code=code,
        redirect_uri=sign_in.redirect_uri,
        code_verifier=sign_in.verifier,
        client_id=sign_in.client_id,
    )
    with provider_client(sign_in.token_endpoint) as http:
        answer = provider_request(http, "POST", sign_in.token_endpoint, content=body, headers=FORM)
    if answer.status_code != 200:
        raise provider_error(answer, "the sign-in's code")
    tokens: dict[str, Any] = answer.json()
    _check_nonce(tokens.get("id_token"), sign_in.nonce)
    return tokens


def _check_nonce(id_token: object, nonce: str) -> None:
    """The ID token was made for this sign-in. Only the payload's base64 is decoded, to
    compare the nonce: nothing else is trusted from it here. The gateway does the real
    validation (signature, issuer, audience, expiry, single use); it cannot know the nonce
    of a CLI's sign-in, so this check is the CLI's."""
    if not isinstance(id_token, str):
        return  # sso.login says the provider sent none
    try:
        payload = id_token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        said = str(claims.get("nonce", "")) if isinstance(claims, dict) else ""
    except (IndexError, ValueError, binascii.Error):
        said = ""
    if not secrets.compare_digest(said.encode(), nonce.encode()):
        raise ApiError(
            401,
            "Unauthenticated",
            "the provider's ID token does not carry this sign-in's nonce; nothing was saved",
        )
