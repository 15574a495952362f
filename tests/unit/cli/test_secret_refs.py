"""``--secret`` of ``jobgate run``, ``jobgate sessions create`` and ``jobgate endpoints
create|update`` (docs/secrets.md)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from jobgate.cli import app
from jobgate.commands.run import build_request, secret_ref


@pytest.mark.parametrize(
    ("spec", "ref"),
    [
        ("HF_TOKEN", {"name": "HF_TOKEN"}),
        ("hf:HUGGING_FACE_HUB_TOKEN", {"name": "hf", "env": "HUGGING_FACE_HUB_TOKEN"}),
        ("kube:/run/secrets/kube", {"name": "kube", "path": "/run/secrets/kube"}),
    ],
)
def test_a_secret_as_a_variable_or_a_file(spec: str, ref: dict[str, str]) -> None:
    assert secret_ref(spec) == ref


def test_a_secret_needs_a_name() -> None:
    with pytest.raises(typer.BadParameter):
        secret_ref(":X")


def test_the_request_names_secrets_only_when_given() -> None:
    common = {"image": None, "cpu": None, "mem": None, "resources": [], "env": []}
    assert "secrets" not in build_request(["true"], **common)
    body = build_request(["true"], **common, secrets=["A", "b:/x"])
    assert body["secrets"] == [{"name": "A"}, {"name": "b", "path": "/x"}]


def _sent(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Run ``jobgate ARGS`` against a transport that records each JSON body sent."""
    bodies: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            bodies.append(json.loads(request.content))
        done = {"name": "demo", "revision": 2, "status": "DEPLOYING", "url": "http://x/e/demo/"}
        return httpx.Response(200, json=done | {"status_reason": "", "current": {}})

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
    assert result.exit_code == 0, result.output
    return bodies


def test_endpoints_create_sends_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["endpoints", "create", "demo", "--port", "8000", "--secret", "HF_TOKEN"]
    args += ["--secret", "kube:/run/secrets/kube", "--", "serve"]
    (body,) = _sent(args, tmp_path, monkeypatch)
    assert body["secrets"] == [{"name": "HF_TOKEN"}, {"name": "kube", "path": "/run/secrets/kube"}]
    (plain,) = _sent(["endpoints", "create", "demo", "--", "serve"], tmp_path, monkeypatch)
    assert "secrets" not in plain


def test_endpoints_update_replaces_keeps_or_clears_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (body,) = _sent(
        ["endpoints", "update", "demo", "--secret", "hf:HF_TOKEN"], tmp_path, monkeypatch
    )
    assert body == {"secrets": [{"name": "hf", "env": "HF_TOKEN"}]}
    (kept,) = _sent(["endpoints", "update", "demo", "--port", "9000"], tmp_path, monkeypatch)
    assert "secrets" not in kept  # the current revision's stay
    (cleared,) = _sent(["endpoints", "update", "demo", "--no-secrets"], tmp_path, monkeypatch)
    assert cleared == {"secrets": []}


def test_a_template_names_its_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["templates", "create", "infer", "--secret", "HF_TOKEN", "--", "python3", "x.py"]
    (body,) = _sent(args, tmp_path, monkeypatch)
    assert body["session"]["secrets"] == [{"name": "HF_TOKEN"}]


def test_secret_and_no_secrets_together_are_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "JOBGATE_URL": "http://127.0.0.1:9",
        "JOBGATE_API_KEY": "jg_test",
        "JOBGATE_CONFIG": str(tmp_path / "none.toml"),
    }
    args = ["endpoints", "update", "demo", "--secret", "A", "--no-secrets"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code != 0
    assert "not both" in str(result.exception) + result.output
