"""App tokens and auth cookies: they carry what was signed, and nothing else gets through."""

from __future__ import annotations

import string

import pytest

from contract.tokens import (
    TokenError,
    issue_app_token,
    issue_cookie,
    verify_app_token,
    verify_cookie,
)

SECRET = "unit-secret-0123456789abcdef"
NOW = 1_700_000_000


def test_token_round_trip() -> None:
    token = issue_app_token(SECRET, "sess-1", "jupyter", "user-1", 60, admin=True, now=NOW)
    claims = verify_app_token(SECRET, token, now=NOW + 59)
    assert (claims.session_id, claims.app, claims.user_id, claims.admin) == (
        "sess-1",
        "jupyter",
        "user-1",
        True,
    )
    assert claims.expires_at == NOW + 60
    assert len(claims.token_id) >= 16


def test_tokens_are_url_safe_and_unique() -> None:
    tokens = {issue_app_token(SECRET, "s", "a", "u", now=NOW) for _ in range(50)}
    assert len(tokens) == 50  # a random id in each: one-time use can tell them apart
    alphabet = set(string.ascii_letters + string.digits + "-_.")
    for token in tokens:
        assert set(token) <= alphabet


def test_cookie_round_trip() -> None:
    value = issue_cookie(SECRET, "sess-1", "user-1", admin=False, lifetime=3600, now=NOW)
    grant = verify_cookie(SECRET, value, now=NOW + 3600)
    assert (grant.session_id, grant.user_id, grant.admin, grant.expires_at) == (
        "sess-1",
        "user-1",
        False,
        NOW + 3600,
    )


def _flip(text: str, index: int) -> str:
    char = text[index]
    return text[:index] + ("A" if char != "A" else "B") + text[index + 1 :]


TOKEN = issue_app_token(SECRET, "sess-1", "jupyter", "user-1", now=NOW)
COOKIE = issue_cookie(SECRET, "sess-1", "user-1", admin=False, lifetime=60, now=NOW)


@pytest.mark.parametrize(
    ("name", "value", "secret", "now", "reason"),
    [
        ("expired", TOKEN, SECRET, NOW + 61, "expired"),
        ("payload altered", _flip(TOKEN, 5), SECRET, NOW, "signature"),
        ("signature altered", _flip(TOKEN, len(TOKEN) - 3), SECRET, NOW, "signature"),
        ("another secret", TOKEN, "another-secret-0123456789", NOW, "signature"),
        ("a cookie is not a token", COOKIE, SECRET, NOW, "signature"),
        ("empty", "", SECRET, NOW, "malformed"),
        ("no dot", TOKEN.replace(".", ""), SECRET, NOW, "malformed"),
        ("two dots", TOKEN + ".x", SECRET, NOW, "malformed"),
        ("not base64url", TOKEN.replace(".", ".+/"), SECRET, NOW, "malformed"),
        ("trailing newline", TOKEN + "\n", SECRET, NOW, "malformed"),
        ("huge", "a" * 5000 + ".b", SECRET, NOW, "malformed"),
    ],
)
def test_token_refusals(name: str, value: str, secret: str, now: int, reason: str) -> None:
    with pytest.raises(TokenError) as refused:
        verify_app_token(secret, value, now=now)
    assert refused.value.reason == reason, name


def test_a_token_is_not_a_cookie() -> None:
    with pytest.raises(TokenError) as refused:
        verify_cookie(SECRET, TOKEN, now=NOW)
    assert refused.value.reason == "signature"


def test_expired_cookie() -> None:
    with pytest.raises(TokenError) as refused:
        verify_cookie(SECRET, COOKIE, now=NOW + 61)
    assert refused.value.reason == "expired"


@pytest.mark.parametrize(
    ("name", "secret", "ttl"),
    [("empty secret", "", 60), ("zero ttl", SECRET, 0), ("negative ttl", SECRET, -5)],
)
def test_issue_refuses_bad_arguments(name: str, secret: str, ttl: int) -> None:
    with pytest.raises(ValueError, match=r"secret|ttl"):
        issue_app_token(secret, "s", "a", "u", ttl)
