"""Sessions that mount host directories wait for a node whose runtime can mount them."""

from __future__ import annotations

from pathlib import Path

from harness import Stack


async def test_a_session_with_mounts_waits_instead_of_failing_on_a_process_node(
    stack: Stack, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    stack.settings.allowed_mount_roots = [str(tmp_path)]
    await stack.start_worker("n1")  # the process runtime: no file system to mount into
    plain = await stack.submit(command=["sh", "-c", "echo plain"])
    mounting = await stack.submit(
        command=["sh", "-c", "ls /data"], mounts=[{"source": str(data), "target": "/data"}]
    )
    await stack.wait_status(plain["id"], {"SUCCEEDED"})  # the node works for the others
    waiting = await stack.get(mounting["id"])
    assert waiting["status"] == "PENDING"
    assert waiting["pending_reason"] == "no node fits: 1 node cannot mount host directories"
    async with stack.client() as api:
        node = (await api.get("/v1/nodes/n1")).json()
    assert node["occupied"].get("cpu", "0") in ("0", "0.0")
    assert node["bind_mounts"] is False  # what the node said of itself, as `nodes show` shows
