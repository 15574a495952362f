"""Clients generate cleanly from /openapi.json, as a user's tooling makes them.

Two generators, of two languages, on the document the gateway serves:

* openapi-python-client (the test extra), with the one setting docs/api.md gives (the
  tus upload's media type is raw bytes): no warning at all, a function for every
  operation, the two raw-body uploads typed ``File``, and the generated package makes a
  real round trip (a session created and read back, a 404 read as the typed ``Problem``);
* openapi-typescript (npm, pinned major, which ./scripts/test.sh installs once under
  ``.test-services/npm``): exit 0, nothing on stderr, a type for every path and
  operation, the uploads' raw bodies, and ``tsc --strict`` accepts the result.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docs_blocks import console_blocks
from harness import Stack
from needs import missing
from pydantic import SecretStr

from gateway.app import create_app
from gateway.config import GatewaySettings

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "api.md"
NPM_DIR = ROOT / ".test-services" / "npm"
PACKAGE = "jobgate_client"
#: the raw-body uploads: operation -> the Content-Type the generated code sends
UPLOADS = {
    "blobs-upload": "application/octet-stream",
    "folders-upload-append": "application/offset+octet-stream",
}


@dataclass
class Document:
    path: Path
    spec: dict[str, Any]

    def operations(self) -> dict[str, str]:
        """operationId -> "METHOD /path", every operation of the document."""
        return {
            op["operationId"]: f"{method.upper()} {path}"
            for path, methods in self.spec["paths"].items()
            for method, op in methods.items()
        }


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> Document:
    """/openapi.json as a gateway with the default settings serves it."""
    tmp = tmp_path_factory.mktemp("openapi")
    settings = GatewaySettings(
        data_dir=tmp,
        database_url=f"sqlite+aiosqlite:///{tmp / 'unused.db'}",
        redis_url="redis://127.0.0.1:1/0",  # never connected: only the document is made
        node_token=SecretStr("jgn_unused"),
        proxy_secret=SecretStr("unused"),
    )
    spec = create_app(settings).openapi()
    path = tmp / "openapi.json"
    path.write_text(json.dumps(spec))
    return Document(path, spec)


def _heredoc(command: str) -> str:
    """The text of ``cat > FILE <<'EOF' ... EOF``."""
    lines = command.splitlines()
    return "\n".join(lines[1:-1]) + "\n"


def _docs_config() -> str:
    """The openapi-python-client config docs/api.md tells a reader to write."""
    for block in console_blocks(DOCS):
        for command in block.commands:
            if command.text.startswith("cat > openapi-python-client.yaml <<"):
                return _heredoc(command.text)
    raise AssertionError(f"{DOCS.name} writes no openapi-python-client.yaml")


@dataclass
class Generated:
    output: str  # what the generator printed, stdout and stderr together
    root: Path  # the directory holding the package
    package: Path


@pytest.fixture(scope="module")
def python_client(document: Document, tmp_path_factory: pytest.TempPathFactory) -> Generated:
    tool = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    assert tool, "openapi-python-client is part of the test extra (pip install -e '.[test]')"
    root = tmp_path_factory.mktemp("python-client")
    config = root / "openapi-python-client.yaml"
    config.write_text(_docs_config())
    done = subprocess.run(
        [
            *(tool, "generate", "--path", str(document.path), "--config", str(config)),
            *("--meta", "none", "--output-path", str(root / PACKAGE)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env=os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return Generated(output, root, root / PACKAGE)


def test_openapi_python_client_generates_every_operation_without_a_warning(
    document: Document, python_client: Generated
) -> None:
    assert python_client.output.strip().splitlines() == [f"Generating {python_client.package}"], (
        python_client.output
    )
    modules = {p.stem: p for p in (python_client.package / "api").glob("*/*.py")}
    for operation, route in document.operations().items():
        module = modules.get(operation.replace("-", "_"))
        assert module is not None, f"{route} ({operation}) was not generated"
        assert "async def asyncio_detailed(" in module.read_text(), route


def test_the_raw_body_uploads_are_binary_in_the_python_client(python_client: Generated) -> None:
    for operation, media in UPLOADS.items():
        name = operation.replace("-", "_")
        (module,) = (python_client.package / "api").glob(f"*/{name}.py")
        code = module.read_text()
        assert re.search(r"^    body: File,$", code, re.M), f"{operation}: body is not a File"
        assert f'headers["Content-Type"] = "{media}"' in code, operation


def test_errors_are_one_typed_problem_model_in_the_python_client(
    python_client: Generated,
) -> None:
    code = (python_client.package / "api" / "sessions" / "sessions_get.py").read_text()
    for status in (400, 401, 403, 404, 405, 409, 413, 422, 429, 503):
        assert f"response_{status} = Problem.from_dict(response.json())" in code, status
    model = (python_client.package / "models" / "problem.py").read_text()
    assert "errors: list[ProblemError] | Unset = UNSET" in model


@pytest.fixture
def client_package(python_client: Generated, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The generated package, imported (and forgotten after the test)."""
    monkeypatch.syspath_prepend(str(python_client.root))
    yield importlib.import_module(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


async def test_the_generated_python_client_creates_and_reads_a_session(
    stack: Stack, client_package: Any
) -> None:
    await stack.start_worker(worker_runtime="sim")
    create = importlib.import_module(f"{PACKAGE}.api.sessions.sessions_create")
    get = importlib.import_module(f"{PACKAGE}.api.sessions.sessions_get")
    models = importlib.import_module(f"{PACKAGE}.models")
    body = models.SessionCreate.from_dict(
        {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}}
    )
    client = client_package.AuthenticatedClient(base_url=stack.url, token=stack.admin_key)
    async with client:
        created = await create.asyncio_detailed(client=client, body=body)
        assert created.status_code == 201, created.content
        assert isinstance(created.parsed, models.SessionPublic)
        read = await get.asyncio(session_id=created.parsed.id, client=client)
        assert isinstance(read, models.SessionPublic)
        assert read.id == created.parsed.id
        assert read.command == ["true"]
        gone = await get.asyncio(session_id="no-such-session", client=client)
    assert isinstance(gone, models.Problem)
    assert (gone.status, gone.title) == (404, "Not found")
    assert gone.instance == "/v1/sessions/no-such-session"


# ---- openapi-typescript ------------------------------------------------------------------
def _npm_tool(name: str) -> Path:
    """*name* from the npm packages ./scripts/test.sh installs (the test fetches nothing)."""
    tool = NPM_DIR / "node_modules" / ".bin" / name
    if not tool.exists():
        missing(f"no {name} in {NPM_DIR} (./scripts/test.sh installs it with npm)")
    return tool


@pytest.fixture(scope="module")
def typescript(document: Document, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The TypeScript types openapi-typescript makes of the document, checked by tsc."""
    generator, tsc = _npm_tool("openapi-typescript"), _npm_tool("tsc")
    out = tmp_path_factory.mktemp("typescript") / "jobgate.d.ts"
    done = subprocess.run(
        [str(generator), str(document.path), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # its warnings go to stderr
    checked = subprocess.run(
        [str(tsc), "--noEmit", "--strict", str(out)], capture_output=True, text=True, timeout=300
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return out.read_text()


def test_openapi_typescript_types_every_path_and_operation(
    document: Document, typescript: str
) -> None:
    paths = typescript[typescript.index("export interface paths {") :]
    operations = typescript[typescript.index("export interface operations {") :]
    for path in document.spec["paths"]:
        assert f'\n    "{path}": {{' in paths, path
    for operation, route in document.operations().items():
        method, path = route.split(" ", 1)
        assert f'\n    "{operation}": {{' in operations, route
        assert f'{method.lower()}: operations["{operation}"];' in paths, route
    for operation, media in UPLOADS.items():
        body = operations[operations.index(f'\n    "{operation}": {{') :]
        assert f'"{media}": string;' in body[: body.index("responses:")], operation
