"""`jobgate run`'s progress on stderr: one live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import io
import os
import pty
import re

from jobgate.progress import Progress

SESSION = "1a2b3c4d-0000-4000-8000-000000000000"
EVENTS = [
    {"status": "PENDING", "pending_reason": "2 nodes lack 4 cpu"},
    {"status": "PENDING", "pending_reason": "no node is ready"},
    {"status": "SCHEDULED", "reason": "placed on n1"},
]


def _drive(progress: Progress) -> None:
    for event in EVENTS:
        progress.status(event)
    progress.note("pulling image")
    progress.status({"status": "RUNNING"})
    progress.say("jobgate: the end")
    progress.stop()


def test_on_a_terminal_waiting_is_one_line_rewritten_in_place() -> None:
    master, replica = pty.openpty()
    with os.fdopen(replica, "w") as stream:
        _drive(Progress(SESSION, stream=stream))
    chunks = []
    while True:  # the replica is closed: reading ends with EIO once all is read
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    text = b"".join(chunks).decode()
    waiting, _, after = text.partition("jobgate: RUNNING after ")
    assert "\n" not in waiting  # every update rewrote the same line
    assert "\r\x1b[2Kjobgate: PENDING" in waiting
    assert "\r\x1b[2Kjobgate: SCHEDULED" in waiting
    assert waiting.endswith("\r\x1b[2K")  # cleared before anything else is written
    assert re.fullmatch(
        r"\S+ \(session 1a2b3c4d\)\njobgate: the end\n", after.replace("\r\n", "\n")
    )


def test_elsewhere_one_plain_line_per_change() -> None:
    stream = io.StringIO()
    _drive(Progress(SESSION, stream=stream))
    lines = stream.getvalue().splitlines()
    assert lines[:4] == [
        "jobgate: PENDING (2 nodes lack 4 cpu)",
        "jobgate: PENDING (no node is ready)",
        "jobgate: SCHEDULED (placed on n1)",
        "jobgate: SCHEDULED (pulling image)",
    ]
    assert lines[4].startswith("jobgate: RUNNING after ")
    assert lines[4].endswith(" (session 1a2b3c4d)")
    assert lines[5:] == ["jobgate: the end"]
    assert "\r" not in stream.getvalue()


def test_quiet_says_only_what_it_is_told() -> None:
    stream = io.StringIO()
    _drive(Progress(SESSION, stream=stream, quiet=True))
    assert stream.getvalue() == "jobgate: the end\n"
