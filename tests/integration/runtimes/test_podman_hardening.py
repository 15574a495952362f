"""Hardening, asserted on a running container the podman runtime started with its defaults.

What docs/podman.md promises ("What every container gets"), checked twice: from inside
(``/proc/self/status`` and the container's own cgroup files, while it still runs) and
from Podman's inspect of the same running container.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from needs import missing
from podman import PodmanClient

from plugins.resources import ResourceSlots
from plugins.runtimes.base import KernelSpec, LogChunk, RuntimeContext
from plugins.runtimes.podman import PodmanRuntime, PodmanSettings
from plugins.runtimes.podman.settings import DEFAULT_CAP_ADD

pytestmark = pytest.mark.podman

BUSYBOX = "localhost/jobgate-busybox:latest"
#: capability numbers (linux/capability.h) of the documented set
CAP_NUMBERS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "NET_BIND_SERVICE": 10,
}
SECCOMP_FILTER = "2"  # /proc/PID/status: 0 off, 1 strict, 2 filter
PROBE = (
    "grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; "
    "cd /sys/fs/cgroup; "
    "echo mem=$(cat memory/memory.limit_in_bytes 2>/dev/null || cat memory.max); "
    "echo pids=$(cat pids/pids.max 2>/dev/null || cat pids.max); "
    "echo writable-cgroup=$(touch memory/x 2>/dev/null && echo yes || echo no); "
    "echo probed; sleep 300"
)


async def test_a_running_container_is_unprivileged_filtered_and_limited(
    podman_socket: str,
) -> None:
    with PodmanClient(base_url=podman_socket) as client:
        if not client.images.exists(BUSYBOX):
            missing(f"no {BUSYBOX} (run scripts/build-test-images.sh)")
    assert set(DEFAULT_CAP_ADD) == set(CAP_NUMBERS)  # the documented set is what we check
    mask = sum(1 << n for n in CAP_NUMBERS.values())
    node = f"test-harden-{uuid.uuid4().hex[:8]}"
    runtime = PodmanRuntime(
        PodmanSettings(socket=podman_socket), RuntimeContext(node, Path("/nonexistent"))
    )
    kernel = uuid.uuid4().hex[:12]
    spec = KernelSpec(
        kernel_id=kernel,
        session_id=f"s-{kernel}",
        node_id=node,
        command=["sh", "-c", PROBE],
        image=BUSYBOX,
        resources=ResourceSlots.parse({"cpu": "0.5", "mem": "96m"}),
    )
    handle = None
    try:
        assert (await runtime.info()).limits_enforced
        handle = await runtime.start(spec)
        chunks: list[LogChunk] = []
        async for chunk in runtime.logs(handle, {}):
            chunks.append(chunk)
            if b"probed" in b"".join(c.data for c in chunks):
                break
        seen = dict(
            line.replace(":\t", "=").split("=", 1)
            for line in b"".join(c.data for c in chunks if c.stream == "stdout")
            .decode()
            .splitlines()
            if "=" in line or ":\t" in line
        )
        # inside, while it runs
        for caps in ("CapEff", "CapBnd", "CapPrm"):
            assert int(seen[caps], 16) == mask, f"{caps} {seen[caps]} != {mask:#x}"
        assert seen["NoNewPrivs"] == "1"
        assert seen["Seccomp"] == SECCOMP_FILTER
        assert seen["mem"] == str(96 * 1024 * 1024)
        assert seen["pids"] == "4096"  # PodmanSettings.pids_limit, the default
        assert seen["writable-cgroup"] == "no"  # a job cannot raise its own limits

        # and as Podman reports the same running container
        with PodmanClient(base_url=podman_socket) as client:
            attrs = client.containers.get(f"jobgate-{kernel}").attrs
        assert attrs["State"]["Running"] is True
        host = attrs["HostConfig"]
        assert host["Privileged"] is False
        assert "no-new-privileges" in host["SecurityOpt"]
        assert not any("unconfined" in opt for opt in host["SecurityOpt"])  # seccomp default
        assert sorted(c.removeprefix("CAP_") for c in attrs["EffectiveCaps"]) == sorted(CAP_NUMBERS)
        assert host["ReadonlyRootfs"] is False  # documented: images may write their own files
    finally:
        if handle is not None:
            await runtime.remove(handle)
        await runtime.close()
