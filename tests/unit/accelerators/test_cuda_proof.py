"""The one-command GPU proof, run end to end against the fake NVML.

On a machine with a GPU the same command runs against the real driver; here it proves
the proof itself: its steps, its checks and its exit status.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plugins.accelerators.fake_sysfs import write_nvidia_nodes

REPO = Path(__file__).resolve().parents[3]
GIB = 1024**3


def _setup(tmp_path: Path, driver: str = "loaded") -> dict[str, str]:
    table = tmp_path / "nvml.toml"
    gpu = {"uuid": "GPU-feed", "memory": "8GiB", "pci_bus_id": "00000000:3B:00.0", "minor": 0}
    table.write_text(tomli_w.dumps({"driver": driver, "gpus": [gpu]}))
    write_nvidia_nodes(tmp_path / "dev", [0])
    (tmp_path / "bin").mkdir()
    return {
        "PATH": str(tmp_path / "bin"),  # no nvidia-cuda-mps-control unless a test adds one
        "HOME": str(tmp_path),
        "JOBGATE_CUDA_FAKE_NVML": str(table),
        "JOBGATE_CUDA_DEV_ROOT": str(tmp_path / "dev"),
        "JOBGATE_CUDA_SYSFS_ROOT": str(tmp_path),
        "JOBGATE_CUDA_CDI_DIRS": json.dumps([str(tmp_path / "cdi")]),
    }


def _run(command: list[str], env: dict[str, str]) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines, done.stderr


PROOF = [sys.executable, "-m", "plugins.accelerators.cuda", "--proof"]


def test_the_proof_passes_on_a_healthy_gpu(tmp_path: Path) -> None:
    code, lines, _ = _run([*PROOF, "--shares-per-device", "2"], _setup(tmp_path))
    steps = {line.get("step"): line for line in lines if "step" in line}
    assert code == 0
    assert [d["id"] for d in steps["fingerprint"]["devices"]] == ["GPU-feed"]
    assert steps["reserve_device"]["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-feed"
    assert steps["reserve_device"]["devices"][0] == str(tmp_path / "dev/nvidia0")
    share = steps["reserve_share"]
    assert share["expected_memory_bytes"] == 2 * GIB  # 0.5 of 2 shares of 8 GiB
    assert share["env"]["JOBGATE_CUDA_MEMORY_BYTES"] == str(2 * GIB)
    assert steps["mps"] == {"step": "mps", "skipped": "nvidia-cuda-mps-control is not on PATH"}
    assert lines[-1] == {
        "ok": True,
        "devices": 1,
        "checks": {"device_env": True, "share_memory": True},
    }


def test_the_proof_fails_clearly_without_a_gpu(tmp_path: Path) -> None:
    code, lines, _ = _run(PROOF, _setup(tmp_path, driver="missing"))
    assert code == 1
    assert lines[0]["devices"] == []
    assert lines[-1]["ok"] is False
    assert "NVIDIA driver not found" in lines[-1]["reason"]


def test_bad_settings_stop_the_proof_before_it_starts(tmp_path: Path) -> None:
    env = {**_setup(tmp_path), "JOBGATE_CUDA_SHARES_PER_DEVICE": "-1"}
    code, lines, stderr = _run(PROOF, env)
    assert (code, lines) == (2, [])
    assert "invalid JOBGATE_CUDA_* settings" in stderr


def test_the_script_wraps_the_module(tmp_path: Path) -> None:
    env = {
        **_setup(tmp_path),
        "PYTHON": sys.executable,
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
    }
    code, lines, stderr = _run(["bash", "scripts/gpu-proof.sh"], env)
    assert code == 0, stderr
    assert lines[-1]["ok"] is True


FAKE_MPS_CONTROL = """#!/bin/sh
# Stands in for nvidia-cuda-mps-control: "-d" serves the control socket in the pipe
# directory until "quit" arrives (or a minute passes); without "-d" it forwards stdin.
if [ "$1" = "-d" ]; then
  "{python}" - <<'PY' &
import os, socket
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "control"))
s.listen(1)
s.settimeout(60)
while True:
    conn, _ = s.accept()
    if b"quit" in conn.recv(64):
        open(os.path.join(os.environ["QUIT_MARK"]), "w").close()
        break
PY
  exit 0
fi
exec "{python}" -c 'import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "control"))
s.sendall(sys.stdin.buffer.read())'
"""


@pytest.mark.timeout(60)
def test_the_mps_step_starts_a_daemon_detects_it_and_stops_it(tmp_path: Path) -> None:
    """Everything up to the CUDA client, which needs a real GPU and fails here."""
    env = _setup(tmp_path)
    script = tmp_path / "bin" / "nvidia-cuda-mps-control"
    script.write_text(FAKE_MPS_CONTROL.replace("{python}", sys.executable))
    script.chmod(0o755)
    env["QUIT_MARK"] = str(tmp_path / "quit-received")
    code, lines, _ = _run([*PROOF, "--shares-per-device", "2"], env)
    mps = next(line for line in lines if line.get("step") == "mps")
    assert mps["env"]["JOBGATE_CUDA_ENFORCEMENT"] == "mps"  # the daemon was detected
    assert mps["env"]["CUDA_MPS_PIPE_DIRECTORY"].startswith("/tmp/jobgate-mps-")
    assert mps["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert mps["limit_mib"] == 2048
    assert mps["ok"] is False
    assert "the CUDA client failed" in mps["error"]  # no libcuda.so.1 on this machine
    assert (tmp_path / "quit-received").exists()  # and the daemon was told to quit
    assert code == 1
    assert lines[-1]["checks"] == {"device_env": True, "share_memory": True, "mps_limit": False}
