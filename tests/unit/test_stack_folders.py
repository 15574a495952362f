"""Where `jobgate up` keeps data folders: under its data dir, so deleting the data dir
deletes them, even as root beside another user's rootless Podman (whose containers
must reach and own them); and a start that fails leaves nothing outside the data dir."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.services.folderfs import FolderFS
from jobgate.stack import Stack, StackError

PODMAN_UID = 4242  # the rootless Podman user (no passwd entry needed)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only a root stack hands its folders to another user"
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory everyone may enter (tmp_path sits under a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="jobgate-stack-folders-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def podman_socket(where: Path) -> str:
    sock = where / "podman.sock"
    sock.touch()
    os.chown(sock, PODMAN_UID, PODMAN_UID)
    return f"unix://{sock}"


def outside(data_dir: Path) -> Path:
    tag = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"jobgate-folders-{tag}"


def as_podman_user(*argv: str) -> int:
    return subprocess.run(argv, user=PODMAN_UID, group=PODMAN_UID, check=False).returncode


def test_a_root_stack_beside_rootless_podman_keeps_folders_under_the_data_dir(
    base: Path,
) -> None:
    data = base / "data"
    data.mkdir(mode=0o700)
    (data / "secrets.json").write_text("{}")
    (data / "secrets.json").chmod(0o600)
    env = Stack(data_dir=data, say=lambda _: None)._folders(podman_socket(base))
    root = Path(env["JOBGATE_FOLDERS_ROOT"])
    assert root == data / "storage" / "folders"
    assert not outside(data).exists()
    # the gateway makes a folder and hands it over; the Podman user writes in it ...
    folder = str(uuid.uuid4())
    FolderFS(root, int(env["JOBGATE_FOLDERS_UID"])).create(folder)
    assert as_podman_user("touch", str(root / folder / "written-by-a-session")) == 0
    # ... but can neither list the data dir nor read what else it holds
    assert as_podman_user("ls", str(data)) != 0
    assert as_podman_user("cat", str(data / "secrets.json")) != 0
    # nor the logs and the embedded database, whatever modes an older install left
    (data / "logs").mkdir(mode=0o755)
    (data / "logs" / "gateway.log").write_text("a log line\n")
    (data / "jobgate.db").write_text("rows")
    for path in (data / "logs" / "gateway.log", data / "jobgate.db"):
        path.chmod(0o644)
    Stack(data_dir=data, say=lambda _: None)._keep_private()
    assert as_podman_user("cat", str(data / "logs" / "gateway.log")) != 0
    assert as_podman_user("cat", str(data / "jobgate.db")) != 0
    shutil.rmtree(data)
    assert not outside(data).exists()  # deleting the data dir deleted the folders


def test_a_failed_start_creates_nothing_outside_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"  # under pytest's 0700 directory: the Podman user is barred
    socket = podman_socket(tmp_path)

    def gateway_dies(self: Stack, url: str, name: str, timeout: float = 30.0) -> None:
        raise StackError(f"the {name} exited; see logs/{name}.log")

    monkeypatch.setattr(Stack, "_lock", lambda self: None)
    monkeypatch.setattr(Stack, "_redis", lambda self: "redis://127.0.0.1:9")
    monkeypatch.setattr(Stack, "_database", lambda self: "sqlite:///unused")
    monkeypatch.setattr(Stack, "_bootstrap", lambda self, url: "jg_unused")
    monkeypatch.setattr(Stack, "_choose_runtime", lambda self: ("podman", socket))
    monkeypatch.setattr(Stack, "_default_image", lambda self, socket: "img")
    monkeypatch.setattr(Stack, "_spawn", lambda self, name, argv, env: None)
    monkeypatch.setattr(Stack, "_wait_http", gateway_dies)
    monkeypatch.delenv("JOBGATE_FOLDERS_ROOT", raising=False)
    said: list[str] = []
    monkeypatch.setattr(Stack, "_check_ports", lambda self: None)
    stack = Stack(data_dir=data, say=said.append)
    try:
        with pytest.raises(StackError, match="gateway exited"):
            stack.start()
    finally:
        stack.stop()
    assert not outside(data).exists()
    assert any("cannot enter" in line for line in said), said  # and it says why
