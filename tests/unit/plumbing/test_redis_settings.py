"""Redis URLs with escaped passwords reach Redis unescaped (arq's from_dsn does not unescape)."""

from __future__ import annotations

import pytest

from plumbing.arq import redis_settings


@pytest.mark.parametrize(
    ("url", "username", "password", "database"),
    [
        ("redis://127.0.0.1:6379/0", None, None, 0),
        ("redis://:s3cret@127.0.0.1:6379/2", None, "s3cret", 2),
        ("redis://:p%40ss%2Fword%3A1%25@h:1/0", None, "p@ss/word:1%", 0),
        ("redis://ops%40team:a%20b@h:1/3", "ops@team", "a b", 3),
    ],
)
def test_password_and_username_are_unescaped(
    url: str, username: str | None, password: str | None, database: int
) -> None:
    got = redis_settings(url)
    assert (got.username, got.password, got.database) == (username, password, database)
