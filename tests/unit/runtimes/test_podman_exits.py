"""Exit codes -> ExitStatus: out of memory only on evidence, stops on request, signals."""

from __future__ import annotations

import pytest

from plugins.runtimes.base import ExitStatus
from plugins.runtimes.podman.exits import exit_status

MIB64 = 64 << 20


@pytest.mark.parametrize(
    ("code", "stop", "limit", "oom_flag", "expected"),
    [
        pytest.param(0, False, None, False, ExitStatus(0), id="success"),
        pytest.param(3, False, MIB64, False, ExitStatus(3), id="plain-failure"),
        pytest.param(
            137,
            False,
            MIB64,
            True,
            ExitStatus(137, True, "out of memory (limit 64MiB)"),
            id="oom-counted",
        ),
        pytest.param(
            137,
            False,
            MIB64,
            False,
            ExitStatus(137, False, "killed by signal 9 (SIGKILL)"),
            id="kill-9-under-a-limit-is-no-oom",
        ),
        pytest.param(
            137,
            False,
            (3 << 29),
            True,
            ExitStatus(137, True, "out of memory (limit 1.5GiB)"),
            id="oom-fraction",
        ),
        pytest.param(
            137,
            False,
            None,
            False,
            ExitStatus(137, False, "killed by signal 9 (SIGKILL)"),
            id="kill-no-limit",
        ),
        pytest.param(
            137,
            True,
            MIB64,
            False,
            ExitStatus(137, False, "stopped on request (SIGKILL)"),
            id="stop-then-kill",
        ),
        pytest.param(
            143,
            True,
            MIB64,
            False,
            ExitStatus(143, False, "stopped on request (SIGTERM)"),
            id="stop-term",
        ),
        pytest.param(
            0, True, None, False, ExitStatus(0, False, "stopped on request"), id="stop-clean-exit"
        ),
        pytest.param(
            139,
            False,
            None,
            False,
            ExitStatus(139, False, "killed by signal 11 (SIGSEGV)"),
            id="segfault",
        ),
        pytest.param(
            1, False, None, True, ExitStatus(1, True, "out of memory"), id="podman-says-oom"
        ),
        pytest.param(255, False, None, False, ExitStatus(255), id="high-code-not-signal"),
    ],
)
def test_exit_status(
    code: int, stop: bool, limit: int | None, oom_flag: bool, expected: ExitStatus
) -> None:
    assert exit_status(code, stop_requested=stop, mem_limit=limit, oom_flag=oom_flag) == expected
