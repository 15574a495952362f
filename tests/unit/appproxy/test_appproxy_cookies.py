"""Reading, hiding and setting the proxy's auth cookie."""

from __future__ import annotations

import pytest

from appproxy.frontend.cookies import (
    cookie_values,
    set_cookie_header,
    strip_cookie,
    strip_jobgate_cookies,
)


@pytest.mark.parametrize(
    ("name", "headers", "values"),
    [
        ("alone", [b"jobgate_auth=abc"], ["abc"]),
        ("among others", [b"a=1; jobgate_auth=abc; b=2"], ["abc"]),
        ("two (path-scoped duplicates)", [b"jobgate_auth=x; jobgate_auth=y"], ["x", "y"]),
        ("split over headers", [b"a=1", b"jobgate_auth=z"], ["z"]),
        ("quoted", [b'jobgate_auth="q"'], ["q"]),
        ("odd neighbours", [b"=;;junk; jobgate_auth=k; x"], ["k"]),
        ("similar name", [b"jobgate_auth2=no; xjobgate_auth=no"], []),
        ("none", [], []),
    ],
)
def test_cookie_values(name: str, headers: list[bytes], values: list[str]) -> None:
    assert cookie_values(headers) == values, name


@pytest.mark.parametrize(
    ("name", "header", "kept"),
    [
        ("only ours", b"jobgate_auth=abc", None),
        ("ours in the middle", b"a=1; jobgate_auth=abc; b=2", b"a=1; b=2"),
        ("ours twice", b"jobgate_auth=x;a=1;jobgate_auth=y", b"a=1"),
        ("not there", b"a=1; b=2", b"a=1; b=2"),
        ("similar name kept", b"jobgate_auth_x=1; jobgate_auth=2", b"jobgate_auth_x=1"),
    ],
)
def test_strip_cookie(name: str, header: bytes, kept: bytes | None) -> None:
    assert strip_cookie(header) == kept, name


@pytest.mark.parametrize(
    ("name", "header", "kept"),
    [
        ("the console's sign-in", b"a=1; jobgate_console=c", b"a=1"),
        ("both of jobgate's", b"jobgate_console=c; jobgate_auth=x", None),
        ("the app's own kept", b"jobgate_console=c; _xsrf=t; jobgate_auth=x", b"_xsrf=t"),
    ],
)
def test_apps_never_see_jobgate_cookies(name: str, header: bytes, kept: bytes | None) -> None:
    """Console and proxy share a host in ``jobgate up``; cookies ignore ports."""
    assert strip_jobgate_cookies(header) == kept, name


def test_set_cookie_attributes() -> None:
    plain = set_cookie_header("v", path="/s/abc/", max_age=600, secure=False).decode()
    secure = set_cookie_header("v", path="/", max_age=600, secure=True).decode()
    assert plain == "jobgate_auth=v; Path=/s/abc/; Max-Age=600; HttpOnly; SameSite=Lax"
    assert secure.endswith("; Secure")
    assert "Path=/;" in secure
