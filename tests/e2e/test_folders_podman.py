"""Data folders end to end: `jobgate up` on rootless Podman and the CLI as users type it.

One stack for the module; each test tells one story and asserts what a user would see:
a dataset in, a job's results out (byte-identical), a read-only share, a link planted by
a container, removal refused while mounted, a cluster session sharing one folder, a
package installed in one session importable in the next through the .local automount,
and a training job preempted by a more urgent one that checkpoints to a folder on SIGTERM
and resumes from it when it runs again.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from podman_harness import PYTHON
from up_harness import UpStack
from waiting import until_sync

#: reads every file of the dataset, writes their digests and a copy of one as results
DIGESTS = """
import hashlib, os, shutil
src, out = "/home/work/data/ds", "/home/work/data/results"
os.makedirs(out, exist_ok=True)
with open(f"{out}/digests.txt", "w") as f:
    for name in sorted(os.listdir(src)):
        data = open(f"{src}/{name}", "rb").read()
        f.write(f"{name} {hashlib.sha256(data).hexdigest()}\\n")
shutil.copy(f"{src}/big.bin", f"{out}/big-copy.bin")
print("digested", len(os.listdir(src)))
"""


#: counts steps; on SIGTERM reads its notice, saves the step to the folder and exits 0;
#: run again, it resumes from the saved step and finishes 20 steps later
TRAIN = """
import os, signal, sys, time
ckpt = "/home/work/ckpt/step"
step = start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print("resumed at", step, flush=True)
def term(*_):
    notice = "/home/work/.jobgate/preempted"
    first = open(notice).read().split()[0] if os.path.exists(notice) else "none"
    open(ckpt, "w").write(str(step))
    print("notice", first, "checkpointed", step, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while not (start and step >= start + 20):
    step += 1
    time.sleep(0.02)
print("done at", step, flush=True)
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    up = UpStack(tmp_path_factory.mktemp("folders"), runtime="podman")
    up.env["JOBGATE_DEFAULT_IMAGE"] = PYTHON
    up.start()
    try:
        yield up
    finally:
        up.close()


def run(stack: UpStack, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = stack.cli("run", *args, env=env, timeout=180)
    return done.returncode, done.stdout, done.stderr


def test_a_dataset_in_results_out_a_read_only_share_and_a_planted_link(
    stack: UpStack, tmp_path: Path
) -> None:
    made = stack.cli_json("folders", "create", "data", "--usage", "data")
    assert made["name"] == "data"
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "big.bin").write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    (ds / "small.txt").write_text("hello\n")
    (ds / "empty").write_bytes(b"")
    put = stack.cli_json("folders", "put", "data", str(ds))
    assert sorted(put["files"]) == ["ds/big.bin", "ds/empty", "ds/small.txt"]
    listed = stack.cli_json("folders", "ls", "data", "ds")
    assert {(e["path"], e["size"]) for e in listed} == {
        ("ds/big.bin", 5 * 1024 * 1024 + 3),
        ("ds/empty", 0),
        ("ds/small.txt", 6),
    }

    code, out, err = run(stack, "--folder", "data", "--", "python3", "-c", DIGESTS)
    assert code == 0, err
    assert out.strip() == "digested 3"
    got = stack.cli_json("folders", "get", "data", "results", str(tmp_path / "back"))
    assert len(got["files"]) == 2
    back = tmp_path / "back"
    lines = (back / "digests.txt").read_text().splitlines()
    assert lines == [f"{p.name} {sha(p)}" for p in sorted(ds.iterdir())]
    assert sha(back / "big-copy.bin") == sha(ds / "big.bin")
    # what the container wrote is the Podman user's on the host (container root maps to it)
    shown = stack.cli_json("folders", "show", "data")
    assert shown["size"] == 2 * (5 * 1024 * 1024 + 3) + 6 + len("\n".join(lines)) + 1
    assert shown["sessions"] == []

    # another user: nothing until shared; then read, never write
    bob = stack.cli_json("admin", "users", "create", "bob")["key"]
    as_bob = {"JOBGATE_API_KEY": bob}
    refused = stack.cli("folders", "show", "data", env=as_bob)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: no folder 'data'"
    stack.cli("folders", "share", "data", "--user", "bob", "--perm", "ro", check=True)
    write = "open('/home/work/data/ds/small.txt').read(); open('/home/work/data/bob.txt', 'w')"
    code, _, err = run(stack, "--folder", "data", "--", "python3", "-c", write, env=as_bob)
    assert code == 1
    assert "Read-only file system: '/home/work/data/bob.txt'" in err
    code, out, err = run(stack, "--folder", "data:/in", "--", "cat", "/in/ds/small.txt", env=as_bob)
    assert (code, out) == (0, "hello\n"), err
    put_bob = stack.cli("folders", "put", "data", str(ds / "small.txt"), env=as_bob)
    assert put_bob.returncode == 1
    assert "holds ro on folder 'data'; this needs rw" in put_bob.stderr

    # a container plants links pointing out of the folder: shown as links, never followed
    plant = "ln -s /etc /home/work/data/escape && ln -s /etc/passwd /home/work/data/pw"
    code, _, err = run(stack, "--folder", "data", "--", "sh", "-c", plant)
    assert code == 0, err
    types = {e["path"]: e["type"] for e in stack.cli_json("folders", "ls", "data")}
    assert types["escape"] == types["pw"] == "symlink"
    for path in ("pw", "escape/passwd", "escape"):
        leak = stack.cli("folders", "get", "data", path, str(tmp_path / "leak"))
        assert leak.returncode == 1, path
        assert "symbolic link" in leak.stderr or "not a file" in leak.stderr, leak.stderr
    assert not (tmp_path / "leak").exists()
    stack.cli("folders", "rm-path", "data", "escape", check=True)
    assert Path("/etc/passwd").exists()


def test_removal_refused_while_mounted_and_a_cluster_session_shares_one_folder(
    stack: UpStack,
) -> None:
    stack.cli("folders", "create", "shared", check=True)
    sleeper = stack.cli("run", "-d", "--folder", "shared", "--", "sleep", "300", check=True)
    session = sleeper.stdout.strip()
    stack.wait_status(session, {"RUNNING"})
    rm = stack.cli("folders", "rm", "shared")
    assert rm.returncode == 1
    assert f"mounted by 1 live session(s) ({session})" in rm.stderr
    assert stack.cli_json("folders", "show", "shared")["sessions"] == [session]
    stack.cli("sessions", "rm", "--force", session, check=True)
    stack.wait_status(session, {"TERMINATED", "CANCELLED"})

    # two containers, one node: each writes its own file and reads the other's
    script = (
        "import os, time\n"
        "me = os.environ['JOBGATE_KERNEL_ID']\n"
        "open(f'/home/work/shared/{me}', 'w').write(me)\n"
        "while len(os.listdir('/home/work/shared')) < 2: time.sleep(0.1)\n"
        "other = [n for n in os.listdir('/home/work/shared') if n != me][0]\n"
        "print('read', open(f'/home/work/shared/{other}').read() == other)\n"
    )
    body = {
        "command": ["python3", "-c", script],
        "cluster_size": 2,
        "cluster_mode": "single-node",
        # main1 ending would end the session and stop sub1, maybe before its output left
        # Python's buffer: both containers' lines are only certain when both may finish
        "stop_when": "all-done",
        "folders": [{"name": "shared"}],
    }
    key = tomllib.loads(stack.config.read_text())["api_key"]
    with httpx.Client(
        base_url=f"http://127.0.0.1:{stack.port}", headers={"Authorization": f"Bearer {key}"}
    ) as api:
        created = api.post("/v1/sessions", json=body)
        assert created.status_code == 201, created.text
        cluster = created.json()
    ended = stack.wait_status(cluster["id"], {"SUCCEEDED", "FAILED", "ERROR"}, timeout=120)
    assert ended["status"] == "SUCCEEDED", ended["status_reason"]
    assert len({k["node"] for k in ended["kernels"]}) == 1

    def both_kernels_logged() -> str | None:
        # a kernel's last lines may reach the gateway just after the session ends
        out = stack.cli("sessions", "logs", cluster["id"], "--kernel", "all", check=True)
        return out.stdout if out.stdout.count("read True") == 2 else None

    until_sync(both_kernels_logged, timeout=30, what="both kernels' 'read True' in the logs")
    files = {e["path"] for e in stack.cli_json("folders", "ls", "shared")}
    assert files == {k["id"] for k in ended["kernels"]}

    stack.cli("folders", "rm", "shared", check=True)
    trashed = stack.cli_json("folders", "ls", "--trashed")
    assert [f["name"] for f in trashed] == ["shared"]
    stack.cli("folders", "purge", "shared", check=True)
    assert stack.cli_json("folders", "ls", "--trashed") == []


def test_a_package_installed_with_pip_user_is_importable_in_the_next_session(
    stack: UpStack,
) -> None:
    stack.cli("folders", "create", ".local", check=True)
    install = (
        "import os, site\n"
        "path = site.getusersitepackages()\n"
        "os.makedirs(path, exist_ok=True)\n"
        "open(os.path.join(path, 'kept.py'), 'w').write('ANSWER = 42\\n')\n"
        "print(path)\n"
    )
    code, out, err = run(stack, "--", "python3", "-c", install)
    assert code == 0, err
    assert out.startswith("/home/work/.local/lib/python3")
    code, out, err = run(stack, "--", "python3", "-c", "import kept; print(kept.ANSWER)")
    assert (code, out) == (0, "42\n"), err
    code, _, err = run(stack, "--no-automount", "--", "python3", "-c", "import kept")
    assert code == 1
    assert "No module named 'kept'" in err


def test_a_preempted_job_checkpoints_to_a_folder_and_resumes_from_it(stack: UpStack) -> None:
    (node,) = stack.cli_json("nodes", "ls")
    cpus = node["capacity"]["cpu"]
    config = '{"preemption": "priority", "preemption_grace_s": 20}'
    stack.cli("admin", "groups", "set", "default", "--config", config, check=True)
    try:
        stack.cli("folders", "create", "ckpt", check=True)
        job = ["--folder", "ckpt", "--cpu", cpus, "--mem", "128m"]
        low = stack.cli("run", "-d", "--priority", "10", *job, "--", "python3", "-c", TRAIN)
        train = low.stdout.strip()
        stack.wait_status(train, {"RUNNING"})
        urgent = stack.cli("run", "-d", "--priority", "90", *job, "--", "echo", "urgent")
        assert urgent.returncode == 0, urgent.stderr
        done = stack.wait_status(urgent.stdout.strip(), {"SUCCEEDED"}, timeout=120)
        assert done["kernels"][0]["node"] == node["id"]

        ended = stack.wait_status(train, {"SUCCEEDED"}, timeout=120)
        assert ended["preemptions"] == 1
        assert ended["preempted_by"] == done["id"]
        assert ended["kernels"][0]["attempt"] == 2
        first = stack.cli("sessions", "logs", train, "--attempt", "1", check=True).stdout
        assert first.startswith("resumed at 0\n"), first
        saved = first.split("notice JOBGATE_PREEMPTED=1 checkpointed ")[1].split()[0]
        second = stack.cli("sessions", "logs", train, check=True).stdout
        assert second.startswith(f"resumed at {saved}\n"), second
        assert second.rstrip().endswith(f"done at {int(saved) + 20}")
        shown = stack.cli("sessions", "show", train, check=True).stdout
        assert "PREEMPTED" in shown
        assert f"preempted by {done['id'][:8]}" in shown
    finally:
        stack.cli("admin", "groups", "set", "default", "--config", '{"preemption": "off"}')
