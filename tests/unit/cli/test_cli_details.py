"""Details as a person reads them: no Python ``None``/``True`` in what a command prints,
and the progress line never says a status twice."""

from __future__ import annotations

import functools
import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from jobgate.cli import app
from jobgate.progress import Progress

NODE: dict[str, Any] = {
    "id": "n1",
    "hostname": "n1",
    "address": None,
    "status": "ready",
    "admin_state": "ready",
    "runtime": "process",
    "resource_group": "default",
    "arch": "x86_64",
    "cgroup": None,
    "limits_enforced": False,
    "bind_mounts": True,
    "fraction_enforcement": None,
    "runtime_detail": None,
    "labels": {},
    "last_seen_at": "2026-11-25T11:40:03Z",
    "registered_at": "2026-11-25T11:00:00Z",
    "capacity": {"cpu": "4", "mem": str(8 * 1024**3)},
    "occupied": {},
    "free": {"cpu": "4"},
    "stats": [],
    "devices": [
        {
            "id": "mock0",
            "model": "Mock GPU",
            "memory": 1024**3,
            "numa_node": None,
            "slot": "cuda.shares",
            "capacity": "1",
            "health": "healthy",
        }
    ],
}


def _cli(args: list[str], answer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    real = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", functools.partial(real, transport=httpx.MockTransport(reply))
    )
    env = {
        "JOBGATE_URL": "http://127.0.0.1:9",
        "JOBGATE_API_KEY": "jg_test",
        "JOBGATE_CONFIG": str(tmp_path / "none.toml"),
    }
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_nodes_show_prints_a_dash_for_what_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _cli(["nodes", "show", "n1"], NODE, tmp_path, monkeypatch)
    assert "None" not in text
    assert "True" not in text
    assert "False" not in text
    assert "device mock0: Mock GPU 1GiB numa - cuda.shares=1 healthy" in text
    assert "limits_enforced       no" in text
    assert "address               -" in text


def test_a_pending_line_says_pending_once() -> None:
    stream = io.StringIO()
    progress = Progress("1a2b3c4d-0000-4000-8000-000000000000", stream=stream)
    progress.status({"status": "PENDING", "pending_reason": "no node fits: 1 node lacks cpu"})
    progress.note("pending: no node fits: 2 nodes lack cpu")
    assert stream.getvalue().splitlines() == [
        "jobgate: PENDING (no node fits: 1 node lacks cpu)",
        "jobgate: PENDING (no node fits: 2 nodes lack cpu)",
    ]
