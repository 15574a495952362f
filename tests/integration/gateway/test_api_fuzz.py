"""schemathesis against the running gateway's own /openapi.json, with all its checks.

Property-based requests for every operation (fuzzing and stateful phases: a created
project is then used by the calls that take it), with every check schemathesis has: no
5xx, every status code, content type, header and body the server gives is declared in
the schema, invalid input is rejected, valid input is accepted, deleted resources stay
gone, auth is never ignored.

Valid input is accepted (``positive_data_acceptance``) because the document says the
rules (patterns, enums, ``anyOf``/``not`` for fields that go together, a resource
group's scheduler configuration typed by the plugins the gateway loaded) and the server
answers a request that is well-formed but meets the state as 404 (a user, project,
template, blob or revision that does not exist) or 409 (a directory where a file was
asked for, a share with the folder's owner). What a JSON Schema cannot say is told to
schemathesis in ``schemathesis_hooks.py`` (two fields compared, a plugin's two options
compared, a body's digest, base64 of a path, the webhook address policy); no operation
is allowed a 422 for valid data.

The ``coverage`` phase runs too (boundary values and every documented enum, header and
method, OPTIONS included: a 405's ``Allow`` must list exactly the path's methods).
A fixed seed keeps the run repeatable; the output is printed for the log either way.

The stateful phase runs on its own, with two workers: two clients at once, each
creating and then using what it created, so that requests interleave as those of
clients retrying concurrently do (issue 27). It is small - schemathesis infers few
usable links from this document (some 16 of ~240 covered), and in the runs made for
issue 27 it sent no two creates with one key - so the Idempotency-Key faults are
pinned down by
``test_idempotency.py``, not left to chance here. The other phases stay on one worker:
schemathesis's coverage phase is not safe in threads on CPython 3.11 (``SystemError:
AST constructor recursion depth mismatch``), and one worker keeps them repeatable.
The stateful run adds some 5-10 s.

``schemathesis.toml`` beside this file says what the document cannot: a session ended
with ``DELETE /v1/sessions/{id}`` stays readable (its status, history and logs), so
the deleted-resource check (ST301) is off for the session's own paths only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest
from harness import Stack

HERE = Path(__file__).parent


@pytest.mark.timeout(600)  # the runs' own limit below; ~80 operations take minutes on 2 cores
async def test_the_api_survives_schemathesis_with_every_check(stack: Stack, tmp_path: Path) -> None:
    summary = await schemathesis(
        stack, tmp_path, phases="examples,coverage,fuzzing", workers=1, examples=15, timeout=480
    )
    # it really ran: every operation of the schema was selected and tested
    selected = summary.split("Selected: ", 1)[1].split()[0]  # "32/32"
    tested = summary.split("Tested: ", 1)[1].split()[0]
    assert selected.split("/")[0] == selected.split("/")[1] == tested, summary
    # then two clients at once through the API's links (create, then use what was made)
    summary = await schemathesis(
        stack, tmp_path, phases="stateful", workers=2, examples=60, timeout=110
    )
    assert "✅ Stateful" in summary, summary


async def schemathesis(
    stack: Stack, tmp_path: Path, *, phases: str, workers: int, examples: int, timeout: float
) -> str:
    """One ``st run`` with every check (schemathesis runs all unless told otherwise;
    ``--checks all`` would also override the one exception ``schemathesis.toml`` makes);
    its SUMMARY (the whole output is printed)."""
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    assert st, "schemathesis is part of the test extra (pip install -e '.[test]')"
    proc = await asyncio.create_subprocess_exec(
        st,
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{stack.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {stack.admin_key}",
        "--phases",
        phases,
        "--max-examples",
        str(examples),
        "--seed",
        "1",
        "--workers",
        str(workers),
        "--no-color",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HERE / "schemathesis_hooks.py")},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()  # the process this test started, by its pid
        await proc.wait()
        raise AssertionError(
            f"st run --phases {phases}: still running after {timeout:g}s"
        ) from None
    text = out.decode(errors="replace")
    print(text)
    summary = text[text.rfind("SUMMARY") :]
    assert proc.returncode == 0, summary
    return summary
