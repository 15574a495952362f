"""``Stack.cli`` (tests/harness.py): a CLI that never ends is killed, not left behind."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import Stack


async def test_a_cli_past_its_timeout_is_killed_before_the_test_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts, never answers: the CLI waits on its request

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    started: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def recording(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await spawn(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(harness.asyncio, "create_subprocess_exec", recording)
    stack = Stack("sqlite+aiosqlite:///unused.db", "redis://127.0.0.1:1", tmp_path)
    stack.port = server.sockets[0].getsockname()[1]
    stack.admin_key = "jg_unused"
    try:
        with pytest.raises(AssertionError, match="still running after 2s"):
            await stack.cli("sessions", "ls", timeout=2)
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()
    [proc] = started
    assert proc.returncode is not None  # ended and reaped
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
