"""Which session and app a URL or host names."""

from __future__ import annotations

import pytest

from appproxy.frontend.addressing import (
    AddSlash,
    Target,
    parse_endpoint_host,
    parse_endpoint_path,
    parse_host,
    parse_path,
)

SID = "0b5e7c1a-7d43-4cf4-9a51-2f0e3c8d9e11"


@pytest.mark.parametrize(
    ("name", "path", "query", "expected"),
    [
        (
            "app root",
            f"/s/{SID}/jupyter/",
            "",
            Target(SID, "jupyter", f"/s/{SID}/jupyter", "/", f"/s/{SID}/"),
        ),
        (
            "deep path kept encoded",
            f"/s/{SID}/code-server/a%2Fb/c",
            "",
            Target(SID, "code-server", f"/s/{SID}/code-server", "/a%2Fb/c", f"/s/{SID}/"),
        ),
        ("no slash after app", f"/s/{SID}/jupyter", "x=1", AddSlash(f"/s/{SID}/jupyter/?x=1")),
        ("no slash, no query", f"/s/{SID}/jupyter", "", AddSlash(f"/s/{SID}/jupyter/")),
        ("session only", f"/s/{SID}/", "", None),
        ("session only, no slash", f"/s/{SID}", "", None),
        ("not under /s/", "/api/x", "", None),
        ("upper-case app", f"/s/{SID}/Jupyter/", "", None),
        ("encoded session", "/s/%2e%2e/jupyter/", "", None),
        ("double dash session", "/s/a--b/jupyter/", "", None),
        ("empty app", f"/s/{SID}//x", "", None),
    ],
)
def test_parse_path(name: str, path: str, query: str, expected: object) -> None:
    assert parse_path(path, query) == expected, name


@pytest.mark.parametrize(
    ("name", "host", "expected_session", "expected_app"),
    [
        ("plain", f"{SID}--jupyter.apps.example.org", SID, "jupyter"),
        ("with port", f"{SID}--code-server.apps.example.org:8443", SID, "code-server"),
        ("upper case host", f"{SID.upper()}--JUPYTER.APPS.EXAMPLE.ORG", SID, "jupyter"),
        ("trailing dot", f"{SID}--jupyter.apps.example.org.", SID, "jupyter"),
        ("app with dashes after the first --", f"{SID}--my--app.apps.example.org", SID, "my--app"),
        ("base domain itself", "apps.example.org", None, None),
        ("no separator", f"{SID}.apps.example.org", None, None),
        ("two labels deep", f"x.{SID}--jupyter.apps.example.org", None, None),
        ("other domain", f"{SID}--jupyter.evil.org", None, None),
        ("suffix trick", f"{SID}--jupyter.evilapps.example.org", None, None),
        ("ipv6 literal", "[::1]:8080", None, None),
    ],
)
def test_parse_host(
    name: str, host: str, expected_session: str | None, expected_app: str | None
) -> None:
    target = parse_host(host, "apps.example.org", "/lab")
    if expected_session is None:
        assert target is None, name
        return
    assert target is not None, name
    assert (target.session_id, target.app) == (expected_session, expected_app), name
    assert (target.prefix, target.rest, target.cookie_path) == ("", "/lab", "/"), name


@pytest.mark.parametrize(
    ("name", "strip", "expected"),
    [("kept", False, f"/s/{SID}/jupyter/api"), ("stripped", True, "/api")],
)
def test_upstream_path(name: str, strip: bool, expected: str) -> None:
    target = parse_path(f"/s/{SID}/jupyter/api", "")
    assert isinstance(target, Target)
    assert target.upstream_path(strip) == expected, name


@pytest.mark.parametrize(
    ("raw_path", "expected"),
    [
        ("/e/iris/invocations", ("iris", "/e/iris", "/invocations")),
        ("/e/iris", ("iris", "/e/iris", "/")),
        ("/e/iris/", ("iris", "/e/iris", "/")),
        ("/e/m-2/a%20b/c", ("m-2", "/e/m-2", "/a%20b/c")),
        ("/e/Iris/x", None),  # names are lower case
        ("/e/a--b/x", None),  # "--" marks a session's app host, never an endpoint
        ("/e/-a/x", None),
        ("/e/", None),
        ("/s/iris/x", None),
    ],
)
def test_endpoint_paths(raw_path: str, expected: tuple[str, str, str] | None) -> None:
    target = parse_endpoint_path(raw_path)
    got = None if target is None else (target.name, target.prefix, target.rest)
    assert got == expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("iris.apps.test", "iris"),
        ("IRIS.apps.test:8443", "iris"),
        ("iris.apps.test.", "iris"),
        ("0f3a--jupyter.apps.test", None),  # a session's app
        ("a.b.apps.test", None),
        ("apps.test", None),
        ("proxy.apps.test", None),  # the proxy's own host (path mode lives there)
        ("iris.other.test", None),
    ],
)
def test_endpoint_hosts(host: str, expected: str | None) -> None:
    target = parse_endpoint_host(host, "apps.test", "/ping", exclude="proxy.apps.test")
    assert (target.name if target else None) == expected
    if target is not None:
        assert (target.prefix, target.rest) == ("", "/ping")
