"""The loopback redirect of ``jobgate login --browser`` (jobgate/sso_loopback.py) without a
provider: the authorization URL, the one-shot server (404 elsewhere, state checked, the
provider's error, a bounded wait) and the ID token's nonce. The whole flow against a real
provider and gateway: tests/integration/gateway/test_sso.py."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from jobgate.errors import ApiError
from jobgate.sso_loopback import BrowserSignIn, _check_nonce, start_browser

PROVIDER = {"name": "corp", "cli_client_id": "cli", "scopes": "openid groups"}
META = {"authorization_endpoint": "https://idp.test/auth", "token_endpoint": "https://idp.test/t"}


def _token(claims: object) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.sig"


def _started() -> tuple[BrowserSignIn, dict[str, str]]:
    sign_in = start_browser(PROVIDER, META)
    asked = {k: v[0] for k, v in parse_qs(urlsplit(sign_in.url).query).items()}
    return sign_in, asked


def test_the_url_and_a_good_callback() -> None:
    sign_in, asked = _started()
    assert sign_in.url.startswith("https://idp.test/auth?")
    assert asked["client_id"] == "cli"
    assert asked["scope"] == "openid groups offline_access"
    assert asked["code_challenge_method"] == "S256"
    assert sign_in.verifier not in sign_in.url
    assert (asked["state"], asked["nonce"]) == (sign_in.state, sign_in.nonce)
    assert asked["redirect_uri"] == sign_in.redirect_uri
    assert httpx.get(sign_in.redirect_uri.replace("/callback", "/other")).status_code == 404
    page = httpx.get(sign_in.redirect_uri, params={"code": "c0de", "state": sign_in.state})
    assert page.status_code == 200
    assert "Signed in to jobgate" in page.text
    again = httpx.get(sign_in.redirect_uri, params={"code": "c0de", "state": sign_in.state})
    assert again.status_code == 400  # one callback only
    assert sign_in.wait(5) == "c0de"
    with pytest.raises(httpx.ConnectError):
        httpx.get(sign_in.redirect_uri)  # stopped


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"code": "c", "state": "other"}, "not started here"),
        ({"code": "c"}, "not started here"),
        ({"error": "access_denied", "state": "$"}, "refused the sign-in: access_denied"),
        ({"state": "$"}, "sent no code"),
    ],
)
def test_a_bad_callback_fails_the_sign_in(query: dict[str, str], said: str) -> None:
    sign_in, _ = _started()
    sent = {k: sign_in.state if v == "$" else v for k, v in query.items()}
    assert httpx.get(sign_in.redirect_uri, params=sent).status_code == 400
    with pytest.raises(ApiError, match=said):
        sign_in.wait(5)


def test_the_wait_is_bounded() -> None:
    sign_in, _ = _started()
    with pytest.raises(ApiError, match="no sign-in came back within"):
        sign_in.wait(0.05)


def test_the_nonce_of_the_id_token() -> None:
    _check_nonce(_token({"nonce": "n-1", "sub": "x"}), "n-1")
    _check_nonce(None, "n-1")  # no ID token at all: sso.login says so
    for bad in (_token({"nonce": "n-2"}), _token({"sub": "x"}), _token([1]), "garbage", "a.!.c"):
        with pytest.raises(ApiError, match="nonce"):
            _check_nonce(bad, "n-1")
