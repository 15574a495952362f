"""Exit codes -> ExitStatus: out of memory only on evidence, stops on request, signals."""

from __future__ import annotations

import pytest

from plugins.runtimes.base import ExitStatus
from plugins.runtimes.podman.exits import exit_status, finished_at, out_of_memory

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


@pytest.mark.parametrize(
    ("code", "podman", "before", "after", "oom"),
    [
        pytest.param(137, False, 0, 1, True, id="137-counter-moved-is-oom"),
        pytest.param(137, False, 0, 0, False, id="137-counter-still-is-a-kill"),
        pytest.param(137, False, 2, 2, False, id="137-after-an-earlier-oom-is-a-kill"),
        pytest.param(137, True, 1, 1, False, id="137-podman-flag-but-counter-still"),
        pytest.param(1, False, 0, 1, False, id="a-child-oom-killed-main-exits-1"),
        pytest.param(1, True, 0, 1, True, id="podman-and-counter-agree"),
        pytest.param(137, True, None, None, True, id="no-counter-podman-says-oom"),
        pytest.param(137, False, 0, None, False, id="cgroup-gone-first-podman-silent"),
        pytest.param(137, False, None, None, False, id="no-counter-no-flag"),
    ],
)
def test_out_of_memory_only_when_the_oom_count_moved(
    code: int, podman: bool, before: int | None, after: int | None, oom: bool
) -> None:
    assert out_of_memory(code, podman_flag=podman, kills_before=before, kills_after=after) is oom


@pytest.mark.parametrize(
    ("stop", "before", "after", "reason"),
    [
        pytest.param(False, 0, 1, "out of memory (limit 64MiB)", id="oom"),
        pytest.param(False, 1, 1, "killed by signal 9 (SIGKILL)", id="killed"),
        pytest.param(True, 1, 1, "stopped on request (SIGKILL)", id="stopped"),
    ],
)
def test_a_sigkill_reads_as_what_happened(stop: bool, before: int, after: int, reason: str) -> None:
    """The user's view of a 137: out of memory only when the count moved."""
    oom = out_of_memory(137, podman_flag=False, kills_before=before, kills_after=after)
    assert exit_status(137, stop_requested=stop, mem_limit=MIB64, oom_flag=oom).reason == reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-28T04:13:00.123456789Z", 1795839180.123456),
        ("2026-11-28T05:13:00.5+01:00", 1795839180.5),
        ("0001-01-01T00:00:00Z", None),  # Go's zero time: it never finished
        ("", None),
        (None, None),
    ],
)
def test_finished_at_is_podman_s_record_of_the_end(value: object, expected: float | None) -> None:
    """A container that ended while no worker watched ends when Podman says it did."""
    assert finished_at(value) == expected
