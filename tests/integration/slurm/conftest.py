"""The Slurm cluster of ``scripts/setup-slurm.sh``, found through ``SLURM_CONF``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from needs import missing


@pytest.fixture(scope="session")
def slurm_conf() -> Path:
    """``SLURM_CONF`` of a running cluster with partition ``debug`` (nodes node1, node2);
    skipped (failed under ./scripts/test.sh) without one."""
    conf = os.environ.get("SLURM_CONF")
    if not conf or not Path(conf).is_file():
        missing("no Slurm cluster: SLURM_CONF unset (run scripts/setup-slurm.sh as root)")
    if shutil.which("sbatch") is None:
        missing("Slurm's client commands (sbatch, squeue, scontrol) are not installed")
    probe = subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0 or "UP" not in probe.stdout:
        missing(f"slurmctld does not answer: {probe.stdout.strip()} {probe.stderr.strip()}")
    return Path(conf)


@pytest.fixture(scope="session")
def jobcomp_file(slurm_conf: Path) -> Path:
    out = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobCompLoc":
            return Path(value.strip())
    missing("the Slurm cluster has no JobCompLoc")
