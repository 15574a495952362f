"""Every CLI path built from a name the user typed keeps that name in its own segment
(``jobgate.client.segment``): a ``/``, ``?``, ``#``, ``.`` or ``..`` in it never reaches
another route. Each case runs the real command against a transport that records the
path it asked for (and answers 404)."""

from __future__ import annotations

import functools
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from jobgate.cli import app
from jobgate.client import ApiError, segment, segments

SID = "0f8fad5b-d9cb-469f-a165-70867728950e"  # a whole id: used as it is
NAME36 = ("../../../v1/users/x/keys/" + "y" * 36)[:36]  # 36 characters, but a name

CASES = {
    "node": (["nodes", "show", "../users"], "/v1/nodes/..%2Fusers"),
    "node action": (["nodes", "drain", ".."], "/v1/nodes/%2E%2E/drain"),
    "user key": (["admin", "users", "key", "a/b"], "/v1/users/a%2Fb/keys"),
    "project member": (
        ["admin", "projects", "remove-member", "p?x", "u#y"],
        "/v1/projects/p%3Fx/members/u%23y",
    ),
    "policy": (["admin", "policies", "rm", "user", ".."], "/v1/policies/user/%2E%2E"),
    "group": (["admin", "groups", "set", "g/h", "--description", "d"], "/v1/resource-groups/g%2Fh"),
    "image": (["images", "rm", "docker.io/library/x:1"], "/v1/images/docker.io%2Flibrary%2Fx%3A1"),
    "session by id": (["sessions", "show", SID], f"/v1/sessions/{SID}"),
    "session by a 36-character name": (["sessions", "show", NAME36], "/v1/sessions"),
    "app": (["apps", "open", SID, "a/b"], f"/v1/sessions/{SID}/apps/a%2Fb"),
    "endpoint token": (
        ["endpoints", "tokens", "revoke", "demo", "../x"],
        "/v1/endpoints/demo/tokens/..%2Fx",
    ),
    "folder path": (
        ["folders", "rm-path", "data", "a/../../b"],
        "/v1/folders/data/files/a/%2E%2E/%2E%2E/b",
    ),
}


EMPTY = {
    "endpoint": ["endpoints", "show", ""],
    "node": ["nodes", "drain", ""],
    "session": ["sessions", "show", ""],
}


@pytest.mark.parametrize("args", EMPTY.values(), ids=EMPTY.keys())
def test_an_empty_name_is_refused_before_any_call(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked, result = _run(args, tmp_path, monkeypatch)
    assert asked == []
    assert isinstance(result.exception, ApiError), result.output
    assert (result.exception.title, result.exception.detail) == ("Usage", "a name cannot be empty")


@pytest.mark.parametrize(("args", "path"), CASES.values(), ids=CASES.keys())
def test_a_typed_name_stays_in_its_own_path_segment(
    args: list[str], path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked, _ = _run(args, tmp_path, monkeypatch)
    assert asked == [path]


def _run(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Result]:
    """Run the CLI against a transport that records each path asked for (and 404s)."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.raw_path.decode().split("?")[0])
        problem = {"title": "Not found", "status": 404, "detail": "no such thing"}
        return httpx.Response(404, json=problem)

    real = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", functools.partial(real, transport=httpx.MockTransport(answer))
    )
    env = {
        "JOBGATE_URL": "http://127.0.0.1:9",
        "JOBGATE_API_KEY": "jg_test",
        "JOBGATE_CONFIG": str(tmp_path / "none.toml"),
    }
    result = CliRunner().invoke(app, args, env=env)
    return asked, result


def test_dot_names_are_encoded_and_other_names_kept() -> None:
    assert (segment("."), segment(".."), segment("..."), segment(".local")) == (
        "%2E",
        "%2E%2E",
        "...",
        ".local",
    )
    assert segments("dir/../x y") == "dir/%2E%2E/x%20y"
    client = httpx.Client(base_url="http://127.0.0.1:9")
    assert client.build_request("GET", f"/v1/endpoints/{segment('..')}").url.path == (
        "/v1/endpoints/.."
    )  # sent encoded (raw path /v1/endpoints/%2E%2E), not resolved to /v1
    client.close()
