"""schemathesis against the running gateway's own /openapi.json.

Property-based requests for every operation (fuzzing and stateful phases: a created
project is then used by the calls that take it), with schemathesis' checks: no 5xx,
every status code, content type, header and body the server gives is declared in the
schema, invalid input is rejected, deleted resources stay gone, auth is never ignored.

Two checks are left out, each for a reason that is the schema's expressiveness, not
the server's behaviour (the issue tracker carries the work to close them):

* ``positive_data_acceptance``: cross-field rules the JSON schema cannot say (a batch
  session needs a command; an image needs apps or service_ports) make some
  schema-valid bodies a 422.
* ``allow_header_conformance``: a 405 lists the methods of the route that matched
  the path; Starlette does not merge routes registered separately for one path.

The ``coverage`` phase is off: on Python 3.11 it fails inside hypothesis' source
inspection ("AST constructor recursion depth mismatch"), before any request is sent.
A fixed seed keeps the run repeatable; the output is printed for the log either way.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from harness import Stack

EXCLUDED = "positive_data_acceptance"


async def test_the_api_survives_schemathesis_with_every_other_check(
    stack: Stack, tmp_path: Path
) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    assert st, "schemathesis is part of the test extra (pip install -e '.[test]')"
    proc = await asyncio.create_subprocess_exec(
        st,
        "run",
        f"{stack.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {stack.admin_key}",
        "--checks",
        "all",
        "--exclude-checks",
        EXCLUDED,
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        "25",
        "--seed",
        "1",
        "--workers",
        "1",
        "--no-color",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    text = out.decode(errors="replace")
    print(text)
    summary = text[text.rfind("SUMMARY") :]
    assert proc.returncode == 0, summary
    # it really ran: every operation of the schema was selected and tested
    selected = summary.split("Selected: ", 1)[1].split()[0]  # "32/32"
    tested = summary.split("Tested: ", 1)[1].split()[0]
    assert selected.split("/")[0] == selected.split("/")[1] == tested, summary
