"""A session committed to a private image, pushed to a real registry, pulled back.

A TLS ``docker-registry`` on a loopback port is the cluster registry; a podman worker
runs a session that writes into its image filesystem (/opt/marker) and into
/home/work. Committed (through the CLI, which waits), the image is its owner's alone. A
second node - a second Podman API service of the same user with an image store of its
own - runs a new session from it, the first node cordoned: it pulls the image from the
registry and sees /opt/marker but not the /home/work file. Another user is refused it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Stack
from needs import missing
from oci_registry import registry_binary, serve_registry
from podman import PodmanClient
from podman_harness import PodmanNodes
from test_podman_stack import (  # noqa: F401 - fixtures
    images,
    pg_migrated,
    podman_nodes,
    podman_worker,
    shared_dir,
    stack,
)
from waiting import until_sync

pytestmark = pytest.mark.podman


@pytest.fixture
def registry(podman_socket: str, shared_dir: Path) -> Iterator[str]:  # noqa: F811
    binary = registry_binary()
    if binary is None:
        missing("no docker-registry or openssl (scripts/build-test-images.sh registry)")
    with serve_registry(binary, shared_dir, podman_socket) as address:
        yield address


@pytest.fixture
def second_store(podman_socket: str, shared_dir: Path) -> Iterator[str]:  # noqa: F811
    """A second Podman API service of the same user with an image store of its own: the
    image store of "another node" (``--root``/``--runroot`` under *shared_dir*)."""
    owner = os.stat(podman_socket.removeprefix("unix://")).st_uid
    user = pwd.getpwuid(owner).pw_name
    store = shared_dir / "node2"
    store.mkdir()
    os.chown(store, owner, -1)
    socket = store / "podman.sock"
    podman = ["podman", "--root", f"{store}/root", "--runroot", f"{store}/run"]
    env = ["env", f"XDG_RUNTIME_DIR=/run/user/{owner}"]
    serve = ["system", "service", "-t", "0", f"unix://{socket}"]
    service = subprocess.Popen(
        ["runuser", "-u", user, "--", *env, *podman, *serve],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def started() -> bool:
            assert service.poll() is None, "the second Podman service exited"
            return socket.exists()

        until_sync(started, timeout=20, what="the second Podman service started")
        yield f"unix://{socket}"
    finally:
        service.terminate()
        service.wait(20)
        # its layers belong to the user's sub-uids: remove them inside its namespace
        subprocess.run(
            ["runuser", "-u", user, "--", *env, "podman", "unshare", "rm", "-rf", str(store)],
            capture_output=True,
            check=False,
        )


async def _cli(gateway: Stack, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``jobgate ARGS`` as *key*'s user, in a thread (the gateway runs in this loop)."""
    env = os.environ | {
        "JOBGATE_URL": gateway.url,
        "JOBGATE_API_KEY": key,
        "JOBGATE_CONFIG": str(gateway.tmp / "no-config.toml"),
    }
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "jobgate", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _images(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await api.get("/v1/images")
    assert r.status_code == 200, r.text
    return {i["name"]: i for i in r.json()}


async def test_a_committed_session_is_a_private_image_any_node_can_pull(
    stack: Stack,  # noqa: F811
    podman_nodes: PodmanNodes,  # noqa: F811
    images: dict[str, str],  # noqa: F811
    registry: str,
    second_store: str,
    podman_socket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack.settings.image_registry = registry
    node1 = await podman_worker(stack, podman_nodes, monkeypatch)
    alice, bob = await stack.create_user("alice"), await stack.create_user("bob")
    script = (
        "mkdir -p /opt && echo baked > /opt/marker && echo scratch > /home/work/scratch"
        " && echo ready && sleep 600"
    )
    first = await stack.submit(alice, image=images["busybox"], command=["sh", "-c", script])
    await stack.wait_output(first["id"], "ready")
    async with stack.client(alice) as owner, stack.client(bob) as other, stack.client() as admin:
        r = await admin.put("/v1/policies/user/alice", json={"allow_commit": True})
        assert r.status_code == 200, r.text
        # someone else's session: one line, exit 1
        refused = await _cli(stack, bob, "sessions", "commit", first["id"], "--image", "b:1")
        assert refused.returncode == 1
        assert refused.stderr.startswith("error: no session"), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        # the CLI waits until the image is pushed and registered
        done = await _cli(
            stack,
            alice,
            "sessions",
            "commit",
            first["id"],
            "--image",
            "alice/env:1",
            "--output",
            "json",
        )
        assert done.returncode == 0, done.stderr
        name = json.loads(done.stdout)["name"]
        assert name == f"{registry}/alice/env:1"
        image = (await _images(owner))[name]
        assert image["state"] == "ready", image["detail"]
        assert image["detail"].startswith("sha256:")
        assert (image["visibility"], image["owner"]) == ("private", "alice")
        assert name not in await _images(other)
        r = await admin.delete(f"/v1/sessions/{first['id']}", params={"force": True})
        assert r.status_code == 202, r.text

        # a second node with an image store of its own (it never saw the image), the
        # first one cordoned: the next session runs there, pulled from the registry
        node2 = await podman_worker(stack, podman_nodes, monkeypatch, socket=second_store)
        r = await admin.post(f"/v1/nodes/{node1}/cordon")
        assert r.status_code == 200, r.text
        with PodmanClient(base_url=second_store) as client:
            assert not client.images.exists(name)
        check = "cat /opt/marker; ls -A /home/work; echo end"
        second = await stack.submit(alice, image=name, command=["sh", "-c", check])
        done = await stack.wait_status(second["id"], {"SUCCEEDED"}, timeout=60)
        assert done["exit_code"] == 0
        assert done["node"] == node2
        assert await stack.logs(second["id"]) == "baked\nend\n"  # /home/work is empty
        with PodmanClient(base_url=second_store) as client:
            assert client.images.exists(name)  # pulled from the registry

        r = await other.post(
            "/v1/sessions", json={"image": name, "command": ["true"], "resources": {"cpu": "0.1"}}
        )
        assert r.status_code == 404, r.text
        assert name in r.json()["detail"]
    with PodmanClient(base_url=podman_socket) as client:
        if client.images.exists(name):
            client.images.remove(name, force=True)
