"""ID token checks and binding rules (gateway/domain/oidc.py), with keys made here: each
check refuses what it should and names itself; bindings add up as documented."""

from __future__ import annotations

import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OctKey, RSAKey

from gateway.domain import oidc

ISSUER, CLIENT = "https://idp.example", "jobgate"
RSA = RSAKey.generate_key(2048, parameters={"kid": "r1"})
EC = ECKey.generate_key("P-256", parameters={"kid": "e1"})


def keys(*found: Any) -> Any:
    return oidc.key_set({"keys": [k.as_dict(private=False) for k in found]})


def token(key: Any = RSA, alg: str = "RS256", **over: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": CLIENT, "sub": "u1", "iat": now, "exp": now + 60} | over
    header = {"alg": alg} | ({"kid": key.kid} if key.kid else {})
    return jwt.encode(header, claims, key, [alg])


def check(raw: str, ks: Any = None, nonce: str | None = None) -> dict[str, Any]:
    return oidc.validate(
        raw, ks or keys(RSA, EC), issuer=ISSUER, audience=CLIENT, now=time.time(), nonce=nonce
    )


def test_rsa_and_ec_tokens_pass_and_give_their_claims() -> None:
    assert check(token())["sub"] == "u1"
    assert check(token(EC, "ES256"), nonce=None)["iss"] == ISSUER
    assert check(token(nonce="n1"), nonce="n1")["nonce"] == "n1"


@pytest.mark.parametrize(
    ("over", "failed"),
    [
        ({"iss": ISSUER + "/"}, "issuer"),
        ({"aud": ["other"]}, "audience"),
        ({"aud": [CLIENT, "other"]}, "audience"),  # several audiences, no azp of ours
        ({"exp": -oidc.LEEWAY_S - 5}, "expiry"),  # times: seconds from now
        ({"nbf": oidc.LEEWAY_S + 60}, "not-before"),
        ({"iat": oidc.LEEWAY_S + 60}, "not-before"),
        ({"sub": ""}, "subject"),
        ({"sub": "s" * 256}, "subject"),
        ({"azp": "other"}, "audience"),  # one audience, but issued to another party
        ({"exp": float("nan")}, "expiry"),
    ],
)
def test_each_claim_check_names_itself(over: dict[str, Any], failed: str) -> None:
    now = int(time.time())
    timed = {k: now + v if k in ("exp", "nbf", "iat") else v for k, v in over.items()}
    with pytest.raises(oidc.TokenRejected) as refused:
        check(token(**timed))
    assert refused.value.check == failed
    assert refused.value.status == 401


def test_within_the_leeway_passes_and_several_audiences_need_our_azp() -> None:
    assert check(token(exp=int(time.time()) - oidc.LEEWAY_S + 20))
    assert check(token(aud=[CLIENT, "other"], azp=CLIENT))


def test_a_nonce_that_differs_or_is_missing_is_refused() -> None:
    for raw in (token(nonce="other"), token()):
        with pytest.raises(oidc.TokenRejected) as refused:
            check(raw, nonce="n1")
        assert refused.value.check == "nonce"


def test_hmac_and_none_are_refused_before_any_key_is_tried() -> None:
    # the provider's public key as the HMAC secret (the classic confusion): joserfc itself
    # refuses to make such a key, so the attacker's bytes are any secret named like it
    forged = token(OctKey.import_key(b"x" * 32, parameters={"kid": "r1"}), "HS256")
    with pytest.raises(oidc.TokenRejected) as refused:
        check(forged)
    assert refused.value.check == "algorithm"


def test_an_oct_key_in_the_jwks_is_dropped() -> None:
    secret = OctKey.generate_key(256, parameters={"kid": "o1"})
    found = oidc.key_set({"keys": [secret.as_dict(private=True), RSA.as_dict(private=False)]})
    assert [k.kid for k in found.keys] == ["r1"]


def test_unknown_kid_asks_for_the_jwks_again_and_a_wrong_key_is_a_bad_signature() -> None:
    stranger = RSAKey.generate_key(2048, parameters={"kid": "r2"})
    with pytest.raises(oidc.UnknownKey) as unknown:
        check(token(stranger))
    assert unknown.value.kid == "r2"
    impostor = RSAKey.generate_key(2048, parameters={"kid": "r1"})
    with pytest.raises(oidc.TokenRejected) as refused:
        check(token(impostor))
    assert refused.value.check == "signature"


def test_garbage_is_a_format_error() -> None:
    for raw in ("", "a.b", "not a token", "x.y.z"):
        with pytest.raises(oidc.TokenRejected) as refused:
            check(raw)
        assert refused.value.check in ("format", "algorithm")


def test_bindings_add_projects_and_any_admin_rule_makes_an_admin() -> None:
    rules = [
        oidc.Rule("groups", "ml", "p-ml", "user"),
        oidc.Rule("groups", "cv", "p-cv", "user"),
        oidc.Rule("groups", "ops", None, "admin"),
        oidc.Rule("department", "research", "p-research", "user"),
    ]
    assert oidc.bind({"groups": ["ml"]}, rules) == oidc.Bound("user", frozenset({"p-ml"}))
    both = oidc.bind({"groups": ["ml", "ops"], "department": "research"}, rules)
    assert both == oidc.Bound("admin", frozenset({"p-ml", "p-research"}))
    assert oidc.bind({}, rules) == oidc.Bound("user", frozenset())
    assert oidc.bind({"groups": "cv"}, rules).project_ids == {"p-cv"}  # a string claim


@pytest.mark.parametrize(
    ("claims", "name"),
    [
        ({"preferred_username": "Alice.Smith"}, "alice.smith"),
        ({"preferred_username": "alice@corp.example"}, "alice-corp.example"),
        ({"email": "Bob@corp.example"}, "bob"),
        ({"sub": "12345"}, "u12345"),
        ({"preferred_username": "  ", "sub": "x_y"}, "x_y"),
        ({}, "user"),
    ],
)
def test_user_names_fit_jobgate_s_pattern(claims: dict[str, Any], name: str) -> None:
    assert oidc.user_name(claims, "preferred_username") == name
