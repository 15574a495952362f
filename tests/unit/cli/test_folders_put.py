"""``jobgate folders put`` interrupted with Ctrl-C: it says how to resume, keeps the
gateway's partial upload and remembers where it is (the next identical put resumes; the
integration test ``test_an_interrupted_put_resumes_on_the_next_run…`` shows that)."""

from __future__ import annotations

import functools
import json
import stat
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from jobgate.cli import app

LOCATION = "/v1/uploads/" + "a" * 32


def test_ctrl_c_keeps_the_partial_upload_and_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        if request.method == "GET":
            return httpx.Response(200, json={"id": "f", "name": "data"})
        if request.method == "POST":
            return httpx.Response(201, headers={"Location": LOCATION}, json={})
        raise KeyboardInterrupt  # Ctrl-C while the bytes go out

    real = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", functools.partial(real, transport=httpx.MockTransport(answer))
    )
    local = tmp_path / "big.bin"
    local.write_bytes(b"x" * 1000)
    env = {
        "JOBGATE_URL": "http://127.0.0.1:9",
        "JOBGATE_API_KEY": "jg_test",
        "JOBGATE_CONFIG": str(tmp_path / "none.toml"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    result = CliRunner().invoke(app, ["folders", "put", "data", str(local)], env=env)
    assert result.exit_code == 130, result.output
    assert "interrupted; the gateway keeps what arrived for 24 h" in result.output
    assert "run the same `jobgate folders put` again to send only the rest" in result.output
    assert "DELETE" not in " ".join(asked)  # the partial upload stays for the next run
    (memo,) = (tmp_path / "cache" / "jobgate" / "uploads").glob("*.json")
    assert stat.S_IMODE(memo.stat().st_mode) == 0o600
    assert json.loads(memo.read_text())["location"] == LOCATION
