"""compose.yaml brought up for real: scripts/compose-up.sh with podman-compose, as the
rootless Podman user, on images built offline (health checks, bootstrap, one session)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from needs import missing

pytestmark = pytest.mark.podman
ROOT = Path(__file__).parents[2]


@pytest.mark.timeout(900)  # the first run builds two images; later runs take ~1 min
def test_compose_comes_up_healthy_and_runs_a_session() -> None:
    if os.getuid() != 0:
        missing("scripts/compose-up.sh runs as root (it runs podman-compose as the Podman user)")
    if shutil.which("podman") is None:
        missing("no podman (scripts/setup-podman.sh)")
    done = subprocess.run(
        [str(ROOT / "scripts" / "compose-up.sh")],
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    for service in ("postgres", "redis", "gateway", "appproxy"):
        assert f"compose-up: {service}: health check passed" in done.stderr
    assert "hello from compose 42" in done.stdout
