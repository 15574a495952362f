"""``jobgate run --working-dir``: the user's own script reaches the job, end to end.

Real processes: `jobgate up` (process runtime, then rootless Podman), the CLI run from
the directory above the project, as a user types it. One stack per runtime; each test
asserts a whole story.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from up_harness import UpStack
from waiting import until_sync

TRAIN = """\
import os
print("cwd", os.getcwd())
print("files", sorted(os.listdir(".")))
print("data", open("data.csv").read().strip())
open("data.csv", "w").write("overwritten by the job\\n")
open("out.txt", "w").write("written\\n")
print("wrote", open("out.txt").read().strip())
"""


def make_project(parent: Path) -> Path:
    proj = parent / "proj"
    (proj / "logs").mkdir(parents=True)
    (proj / "train.py").write_text(TRAIN)
    (proj / "data.csv").write_text("1,2,3\n")
    (proj / ".gitignore").write_text("logs/\n*.tmp\n")
    (proj / ".jobgateignore").write_text("secret.txt\n")
    (proj / "logs" / "old.log").write_text("ignored\n")
    (proj / "scratch.tmp").write_text("ignored\n")
    (proj / "secret.txt").write_text("never leaves the laptop\n")
    return proj


def run_in(
    up: UpStack, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", *args],
        cwd=cwd,
        env=up.environ() | (env or {}),
        capture_output=True,
        text=True,
        timeout=180,
    )


def blobs(up: UpStack) -> list[Path]:
    folder = up.data_dir / "storage" / "blobs" / "sha256"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def api(up: UpStack) -> httpx.Client:
    key = tomllib.loads(up.config.read_text())["api_key"]
    return httpx.Client(
        base_url=f"http://127.0.0.1:{up.port}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_process_runtime_runs_the_users_script_in_its_own_copy(up: UpStack, tmp_path: Path) -> None:
    make_project(tmp_path)
    first = run_in(up, tmp_path, "run", "--working-dir", "./proj", "--", "python3", "train.py")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[1] == "files ['.gitignore', '.jobgateignore', 'data.csv', 'train.py']"
    assert lines[2] == "data 1,2,3"
    assert lines[3] == "wrote written"
    assert "working dir proj: 4 files, " in first.stderr
    assert "uploaded" in first.stderr
    assert "not uploaded" not in first.stderr
    (blob,) = blobs(up)
    inode = blob.stat().st_ino

    # the same tree again: not sent twice, and the first job's writes did not leak into it
    second = run_in(up, tmp_path, "run", "--working-dir", "proj", "--", "python3", "train.py")
    assert second.returncode == 0, second.stderr
    assert "already on the gateway, not uploaded" in second.stderr
    assert second.stdout.splitlines()[2] == "data 1,2,3"
    (again,) = blobs(up)
    assert again.stat().st_ino == inode
    cwd_first, cwd_second = lines[0], second.stdout.splitlines()[0]
    assert cwd_first != cwd_second  # each kernel its own copy, gone after the job
    assert not Path(cwd_first.removeprefix("cwd ")).exists()
    assert (tmp_path / "proj" / "data.csv").read_text() == "1,2,3\n"  # the laptop's copy

    shown = up.cli("sessions", "show", up.cli_json("sessions", "ls")[0]["id"], check=True)
    assert f"sha256:{blob.name}" in shown.stdout

    # a tree over the cap: a clear error naming the size and the biggest entry; nothing runs
    before = len(up.cli_json("sessions", "ls"))
    (tmp_path / "proj" / "weights.bin").write_bytes(b"w" * 5000)
    big = run_in(
        up,
        tmp_path,
        "run",
        "--working-dir",
        "proj",
        "--",
        "python3",
        "train.py",
        env={"JOBGATE_MAX_WORKING_DIR_BYTES": "4096"},
    )
    assert big.returncode == 1
    assert "over the 4.0 KiB limit" in big.stderr
    assert "biggest: weights.bin 4.9 KiB" in big.stderr
    assert len(up.cli_json("sessions", "ls")) == before
    assert len(blobs(up)) == 1

    # the API: a digest the gateway lacks is refused at submit; a lying upload is refused
    missing = "sha256:" + "0" * 64
    with api(up) as http:
        refused = http.post("/v1/sessions", json={"command": ["true"], "working_dir": missing})
        assert refused.status_code == 404
        assert refused.json()["field"] == "working_dir"
        assert f"no blob {missing}" in refused.json()["detail"]
        lie = http.put(f"/v1/blobs/{missing}", content=b"not zeros")
        assert lie.status_code == 422
        assert http.head(f"/v1/blobs/{missing}").status_code == 404
        assert http.get(f"/v1/blobs/sha256:{blob.name}").status_code == 401

    # garbage collection: both sessions ended, so with no grace the blob goes
    gc = up.cli("admin", "blobs", "gc", "--grace", "0", env={"JOBGATE_DATA_DIR": str(up.data_dir)})
    assert gc.returncode == 0, gc.stderr
    assert f"deleted sha256:{blob.name}" in gc.stdout
    assert blobs(up) == []


@pytest.fixture
def reachable() -> Iterator[Path]:
    """Directories the Podman user can traverse (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="jobgate-wd-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.podman
def test_rootless_podman_runs_the_script_in_home_work(
    tmp_path: Path, podman_socket: str, reachable: Path
) -> None:
    stack = UpStack(
        tmp_path,
        runtime="podman",
        env={
            "JOBGATE_PODMAN_SOCKET": podman_socket,
            "JOBGATE_WORKDIR_ROOT": str(reachable / "workdirs"),
        },
    )
    stack.start(timeout=180)
    try:
        make_project(tmp_path)
        argv = ["run", "--image", "localhost/jobgate-python:3.11", "--working-dir", "./proj"]
        first = run_in(stack, tmp_path, *argv, "--", "python3", "train.py")
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines() == [
            "cwd /home/work",
            "files ['.gitignore', '.jobgateignore', 'data.csv', 'train.py']",
            "data 1,2,3",
            "wrote written",  # the job owns its copy: it can write there
        ]
        assert "uploaded" in first.stderr
        second = run_in(stack, tmp_path, *argv, "--", "python3", "train.py")
        assert second.returncode == 0, second.stderr
        assert "already on the gateway, not uploaded" in second.stderr
        assert second.stdout.splitlines()[2] == "data 1,2,3"
        # the copies are removed once the worker has reported the end: `run` may return first
        until_sync(
            lambda: list((reachable / "workdirs" / "kernels").iterdir()) == [],
            timeout=30,
            interval=0.1,
            what="the kernels' copies removed",
        )
        (cached,) = (reachable / "workdirs" / "cache" / "sha256").iterdir()
        assert cached.name == blobs(stack)[0].name
    finally:
        stack.close()
