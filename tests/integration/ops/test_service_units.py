"""`jobgate service install`: units that `systemd-analyze verify` accepts, in both modes."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from needs import missing

COMPONENTS = ("gateway", "scheduler", "worker", "proxy")


def install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate", "service", "install", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def verify(unit: Path, *, user: bool, runtime_dir: Path) -> subprocess.CompletedProcess[str]:
    argv = ["systemd-analyze", *(["--user"] if user else []), "verify", str(unit)]
    env = dict(os.environ) | {"XDG_RUNTIME_DIR": str(runtime_dir)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


@pytest.mark.parametrize("mode", ["system", "user"])
def test_units_verify_and_share_one_env_file(mode: str, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is not installed (Debian package systemd)")
    user = mode == "user"
    units, env_file = tmp_path / "units", tmp_path / "etc" / "jobgate.env"
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    flags = ["--dir", str(units), "--env-file", str(env_file), *(["--user"] if user else [])]

    for component in COMPONENTS:
        done = install(component, *flags)
        assert done.returncode == 0, done.stderr
        unit = units / f"jobgate-{component}.service"
        assert f"wrote {unit}" in done.stdout
        ctl = "systemctl --user" if user else "systemctl"
        assert f"{ctl} enable --now jobgate-{component}" in done.stdout
        text = unit.read_text()
        assert f"EnvironmentFile={env_file}" in text
        assert ("User=jobgate" in text) is not user
        assert ("WantedBy=default.target" if user else "WantedBy=multi-user.target") in text
        command = next(line for line in text.splitlines() if line.startswith("ExecStart="))
        program = command.removeprefix("ExecStart=").split()[0]
        assert Path(program).is_absolute()
        assert os.access(program, os.X_OK)
        checked = verify(unit, user=user, runtime_dir=runtime_dir)
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout + checked.stderr == ""  # not even a warning

    # one environment file, made once, private, with secrets of its own
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    settings = dict(
        line.split("=", 1)
        for line in env_file.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert len(settings["JOBGATE_JOIN_TOKEN"]) >= 32
    assert settings["JOBGATE_JOIN_TOKEN"] != settings["JOBGATE_PROXY_SECRET"]
    before = env_file.read_text()
    again = install("gateway", *flags)
    assert again.returncode == 0, again.stderr
    assert f"kept {env_file}" in again.stdout
    assert env_file.read_text() == before


def test_an_unknown_component_is_refused(tmp_path: Path) -> None:
    done = install("database", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "database" in done.stderr
    assert not list(tmp_path.iterdir())
