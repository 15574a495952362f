"""The test identity provider (tests/idp.py) speaks OpenID Connect as a client sees it.

The gateway's single sign-on tests trust this provider, so here it is held to the
protocol over real HTTP: discovery, the code flow with PKCE and nonce, ID tokens that
verify against the published JWKS, refreshes that carry changed groups and stop for
disabled users, the device flow and key rotation.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from idp import SignInRefused, TestIdP
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError
from joserfc.jwk import KeySet
from joserfc.jws import extract_compact

CALLBACK = "http://127.0.0.1:9/callback"  # never contacted: the redirect is read, not followed


@pytest.fixture(scope="module")
def idp() -> Iterator[TestIdP]:
    with TestIdP() as provider:
        provider.add_client("web", secret="s3cret", redirect_uris=[CALLBACK])
        provider.add_client("cli", redirect_uris=[CALLBACK], device=True)
        yield provider


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(idp: TestIdP, client_id: str, challenge: str, nonce: str = "n-1") -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "scope": "openid profile email groups offline_access",
        "state": "st-1",
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    return f"{idp.issuer}/authorize?{urlencode(query)}"


def verified(idp: TestIdP, token: str, audience: str) -> dict[str, Any]:
    """The ID token's claims, checked against the published JWKS as a relying party would."""
    keys = KeySet.import_key_set(httpx.get(f"{idp.issuer}/jwks").json())
    decoded = jwt.decode(token, keys, algorithms=["RS256"])
    jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": idp.issuer}, aud={"essential": True, "value": audience}
    ).validate(decoded.claims)
    return decoded.claims


def code_tokens(idp: TestIdP, sub: str, nonce: str = "n-1") -> dict[str, Any]:
    verifier, challenge = pkce()
    location = idp.sign_in(authorize_url(idp, "web", challenge, nonce), sub)
    code = parse_qs(urlsplit(location).query)["code"][0]
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK}
    response = httpx.post(
        f"{idp.issuer}/token", data={**form, "code_verifier": verifier}, auth=("web", "s3cret")
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def refresh(idp: TestIdP, refresh_token: str) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    return httpx.post(f"{idp.issuer}/token", data=form, auth=("web", "s3cret"))


def test_discovery_names_every_endpoint(idp: TestIdP) -> None:
    doc = httpx.get(f"{idp.issuer}/.well-known/openid-configuration").json()
    assert doc["issuer"] == idp.issuer
    for name, path in [("authorization_endpoint", "/authorize"), ("token_endpoint", "/token"),
                       ("userinfo_endpoint", "/userinfo"), ("jwks_uri", "/jwks"),
                       ("device_authorization_endpoint", "/device")]:  # fmt: skip
        assert doc[name] == idp.issuer + path
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["id_token_signing_alg_values_supported"] == ["RS256"]
    assert "urn:ietf:params:oauth:grant-type:device_code" in doc["grant_types_supported"]
    assert {"client_secret_basic", "client_secret_post", "none"} <= set(
        doc["token_endpoint_auth_methods_supported"]
    )


def test_code_flow_with_pkce_gives_a_verifiable_id_token(idp: TestIdP) -> None:
    idp.set_user("alice", email="alice@example.org", groups=["ml"])
    verifier, challenge = pkce()
    url = authorize_url(idp, "cli", challenge, nonce="nonce-42")
    page = httpx.get(url)
    assert page.status_code == 200
    assert 'name="username"' in page.text
    assert 'type="password"' in page.text
    with pytest.raises(SignInRefused):
        idp.sign_in(url, "alice", password="wrong")

    location = idp.sign_in(url, "alice")
    query = parse_qs(urlsplit(location).query)
    assert location.startswith(CALLBACK)
    assert query["state"] == ["st-1"]
    form = {"grant_type": "authorization_code", "code": query["code"][0],
            "redirect_uri": CALLBACK, "client_id": "cli"}  # fmt: skip
    wrong = httpx.post(f"{idp.issuer}/token", data={**form, "code_verifier": "x" * 43})
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "invalid_grant"

    # the failed exchange did not burn the code; the right verifier gets the tokens
    tokens = httpx.post(f"{idp.issuer}/token", data={**form, "code_verifier": verifier}).json()
    claims = verified(idp, tokens["id_token"], "cli")
    assert claims["sub"] == "alice"
    assert claims["nonce"] == "nonce-42"
    assert claims["preferred_username"] == "alice"
    assert claims["email"] == "alice@example.org"
    assert claims["groups"] == ["ml"]
    assert claims["exp"] > time.time()
    again = httpx.post(f"{idp.issuer}/token", data={**form, "code_verifier": verifier})
    assert again.json()["error"] == "invalid_grant"  # a code works once

    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    info = httpx.get(f"{idp.issuer}/userinfo", headers=bearer)
    assert info.json()["groups"] == ["ml"]


def test_public_client_must_use_pkce(idp: TestIdP) -> None:
    query = {"response_type": "code", "client_id": "cli", "redirect_uri": CALLBACK,
             "scope": "openid", "state": "s"}  # fmt: skip
    response = httpx.get(f"{idp.issuer}/authorize?{urlencode(query)}")
    assert response.status_code == 302
    assert parse_qs(urlsplit(response.headers["location"]).query)["error"] == ["invalid_request"]


def test_refresh_carries_new_groups_and_stops_for_disabled_users(idp: TestIdP) -> None:
    idp.set_user("bob", groups=["a"])
    tokens = code_tokens(idp, "bob")
    assert verified(idp, tokens["id_token"], "web")["groups"] == ["a"]

    idp.set_user("bob", groups=["a", "b"])
    renewed = refresh(idp, tokens["refresh_token"])
    assert renewed.status_code == 200, renewed.text
    assert verified(idp, renewed.json()["id_token"], "web")["groups"] == ["a", "b"]
    reused = refresh(idp, tokens["refresh_token"])  # rotated: each refresh token works once
    assert reused.json()["error"] == "invalid_grant"

    idp.disable("bob")
    refused = refresh(idp, renewed.json()["refresh_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    with pytest.raises(SignInRefused):
        idp.sign_in(authorize_url(idp, "web", pkce()[1]), "bob")


def test_device_flow(idp: TestIdP) -> None:
    idp.set_user("carol", groups=["ops"])
    start = httpx.post(f"{idp.issuer}/device", data={"client_id": "cli", "scope": "openid groups"})
    assert start.status_code == 200, start.text
    grant = start.json()
    assert grant["verification_uri"] == f"{idp.issuer}/device/verify"
    assert grant["interval"] == 1
    assert grant["expires_in"] == 600
    poll = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": grant["device_code"], "client_id": "cli"}  # fmt: skip

    pending = httpx.post(f"{idp.issuer}/token", data=poll)
    assert pending.status_code == 400
    assert pending.json()["error"] == "authorization_pending"
    idp.approve_device(grant["user_code"], "carol")
    tokens = httpx.post(f"{idp.issuer}/token", data=poll).json()
    assert verified(idp, tokens["id_token"], "cli")["groups"] == ["ops"]
    assert tokens["refresh_token"]

    denied = httpx.post(f"{idp.issuer}/device", data={"client_id": "cli", "scope": "openid"}).json()
    idp.deny_device(denied["user_code"], "carol")
    poll["device_code"] = denied["device_code"]
    assert httpx.post(f"{idp.issuer}/token", data=poll).json()["error"] == "access_denied"

    idp.disable("carol")
    late = httpx.post(f"{idp.issuer}/device", data={"client_id": "cli", "scope": "openid"}).json()
    with pytest.raises(SignInRefused):
        idp.approve_device(late["user_code"], "carol")


def test_rotate_keys(idp: TestIdP) -> None:
    idp.set_user("dave")
    old_kid = idp.public_jwk()["kid"]
    old_token = code_tokens(idp, "dave")["id_token"]

    kept = idp.rotate_keys(keep_old=True)
    kids = [k["kid"] for k in httpx.get(f"{idp.issuer}/jwks").json()["keys"]]
    assert kids == [kept, old_kid]
    assert verified(idp, old_token, "web")["sub"] == "dave"
    assert jwt.decode(code_tokens(idp, "dave")["id_token"], KeySet.import_key_set(
        {"keys": [idp.public_jwk()]})).claims["sub"] == "dave"  # fmt: skip

    new_kid = idp.rotate_keys()
    assert [k["kid"] for k in httpx.get(f"{idp.issuer}/jwks").json()["keys"]] == [new_kid]
    with pytest.raises(InvalidKeyIdError):
        verified(idp, old_token, "web")


def test_forged_tokens_carry_what_the_test_asks(idp: TestIdP) -> None:
    token = idp.sign({"sub": "mallory", "iss": idp.issuer}, kid="other")
    assert extract_compact(token.encode()).protected["kid"] == "other"
    unsigned = idp.sign({"sub": "mallory"}, alg="none")
    assert unsigned.endswith(".")
    assert unsigned.count(".") == 2


def test_loopback_redirects_on_any_port_for_clients_that_allow_them(idp: TestIdP) -> None:
    """RFC 8252 §7.3: ``add_client(..., loopback=True)`` takes ``http`` to 127.0.0.1, [::1]
    or localhost on any port, to ``/callback`` exactly; other clients only what they
    registered."""
    idp.add_client("native", loopback=True)
    _, challenge = pkce()

    def page(client_id: str, redirect_uri: str) -> int:
        query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
                 "scope": "openid", "state": "s", "code_challenge": challenge,
                 "code_challenge_method": "S256"}  # fmt: skip
        return httpx.get(f"{idp.issuer}/authorize?{urlencode(query)}").status_code

    for good in ("http://127.0.0.1:53121/callback", "http://[::1]:8/callback",
                 "http://localhost:65000/callback"):  # fmt: skip
        assert page("native", good) == 200, good
    for bad in ("https://127.0.0.1:53121/callback", "http://127.0.0.2:53121/callback",
                "http://127.0.0.1:53121/other", "http://127.0.0.1:53121/callback?x=1",
                "http://evil.example:80/callback", "http://127.0.0.1/callback",
                "http://u@127.0.0.1:5/callback"):  # fmt: skip
        assert page("native", bad) == 400, bad
    assert page("cli", "http://127.0.0.1:53121/callback") == 400  # registered port 9 only
    assert page("cli", CALLBACK) == 200
