"""The worker's bookkeeping of overlay forwarders (``workers.cluster.Overlays``): one per
session, found again after a restart, never confused with another process, and gone
with the session (docs/cluster-sessions.md). Real forwarders on the loopback."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from contract.messages import WireCluster, WireClusterMember
from jobgate.localnet import free_port
from workers.cluster import Overlays

SEED = "22" * 32


def _cluster(port: int) -> WireCluster:
    members = [
        WireClusterMember(
            hostname=h, kernel_id=f"k{i}", node_id="n1", address="127.0.0.1", port=port
        )
        for i, h in enumerate(["main1", "sub1"])
    ]
    return WireCluster(mode="multi-node", index=0, members=members, ssh_seed=SEED)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_one_forwarder_per_session_kept_private_and_gone_with_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    overlays = Overlays(tmp_path / "overlays")
    state = tmp_path / "overlays" / "s1"
    asyncio.run(overlays.ensure("s1", _cluster(free_port()), None))
    pid = int((state / "forwarder.pid").read_text())
    control = Path((state / "control").read_text())
    try:
        assert _alive(pid)
        # the socket: 0600 in a directory of ours, 0700, with a name no one could take first
        assert control.is_socket()
        assert stat.S_IMODE(control.stat().st_mode) == 0o600
        folder = control.parent.stat()
        assert (stat.S_IMODE(folder.st_mode), folder.st_uid) == (0o700, os.getuid())
        assert control.parent.parent == Path(tempfile.gettempdir())
        asyncio.run(overlays.ensure("s1", _cluster(free_port()), None))  # its next container
        assert int((state / "forwarder.pid").read_text()) == pid  # the same forwarder
        with caplog.at_level(logging.INFO, logger="workers.cluster"):
            asyncio.run(overlays.done("s1"))
    finally:
        if _alive(pid):
            os.kill(pid, 9)
    for _ in range(100):  # bounded: 1 s for the kernel to reap it
        if not _alive(pid):
            break
        time.sleep(0.01)
    assert not _alive(pid)
    assert not state.exists()
    assert not control.parent.exists()
    said = [r.getMessage() for r in caplog.records if "overlay of session s1" in r.getMessage()]
    assert any("ends" in line for line in said), said  # its counts reach the worker's log


def test_a_planted_or_stale_record_is_never_taken_for_a_forwarder(tmp_path: Path) -> None:
    """A pid file naming another process (a reused pid) and a control path outside the
    sockets' directories: the process is left alone, the path is neither used nor
    removed, and a real forwarder is started instead."""
    overlays = Overlays(tmp_path / "overlays")
    state = tmp_path / "overlays" / "s2"
    state.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "60"])
    keep = tmp_path / "keep"
    keep.mkdir()
    (state / "forwarder.pid").write_text(str(bystander.pid))
    (state / "control").write_text(str(keep / "control.sock"))
    try:
        asyncio.run(overlays.ensure("s2", _cluster(free_port()), None))
        pid = int((state / "forwarder.pid").read_text())
        assert pid != bystander.pid
        assert keep.is_dir()
        (state / "forwarder.pid").write_text(str(bystander.pid))  # reused, while it runs
        asyncio.run(overlays.done("s2"))
        assert bystander.poll() is None  # never signalled
        assert keep.is_dir()
        os.kill(pid, 9)  # the real one, whose record was overwritten
    finally:
        bystander.kill()
        bystander.wait(10)


def test_a_restarted_worker_forgets_the_sessions_no_container_is_left_of(
    tmp_path: Path,
) -> None:
    overlays = Overlays(tmp_path / "overlays")
    for session_id in ("gone", "live"):
        asyncio.run(overlays.ensure(session_id, _cluster(free_port()), None))
    pids = {
        s: int((tmp_path / "overlays" / s / "forwarder.pid").read_text()) for s in ("gone", "live")
    }
    try:
        asyncio.run(overlays.sweep({"live"}))
        assert not (tmp_path / "overlays" / "gone").exists()
        assert (tmp_path / "overlays" / "live" / "forwarder.pid").exists()
        assert _alive(pids["live"])
        asyncio.run(overlays.done("live"))
    finally:
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, 9)
