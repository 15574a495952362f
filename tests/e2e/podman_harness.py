"""Helpers for end-to-end tests with podman workers (``test_podman_stack.py``).

Other test runs share the one rootless Podman service, so every podman worker a test
starts gets a node id of its own (:meth:`PodmanNodes.new`), and the clean-up removes the
containers of those nodes only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from podman import PodmanClient
from podman.errors import APIError
from waiting import until

from plugins.runtimes.base import LABEL_NODE

__all__ = ["BUSYBOX", "PYTHON", "PodmanNodes", "sse", "wait_gone", "wait_state_not"]

BUSYBOX = "localhost/jobgate-busybox:latest"
PYTHON = "localhost/jobgate-python:3.11"


@dataclass
class PodmanNodes:
    """Hands out node ids for podman workers; remembers them for the clean-up."""

    socket: str
    ids: list[str] = field(default_factory=list)

    def new(self) -> str:
        node_id = f"e2e-{uuid.uuid4().hex[:10]}"
        self.ids.append(node_id)
        return node_id

    def env(self, **settings: str) -> dict[str, str]:
        """``JOBGATE_PODMAN_*`` variables for a worker (its runtime reads them itself)."""
        values = {"JOBGATE_PODMAN_SOCKET": self.socket}
        values.update({f"JOBGATE_PODMAN_{k.upper()}": v for k, v in settings.items()})
        return values

    def user_uid(self) -> int:
        """The Podman user (container root maps to it): the owner of the API socket."""
        return os.stat(self.socket.removeprefix("unix://")).st_uid

    def containers(self, label: str) -> list[dict[str, Any]]:
        """Podman's own list (all states) of the containers with *label* (``key=value``)."""
        with PodmanClient(base_url=self.socket) as client:
            return [c.attrs for c in client.containers.list(all=True, filters={"label": label})]

    def states(self, label: str) -> list[str]:
        return [str(c["State"]) for c in self.containers(label)]

    def remove_all(self) -> None:
        """Every container of the nodes handed out, whatever its state."""
        with PodmanClient(base_url=self.socket) as client:
            for node_id in self.ids:
                label = f"{LABEL_NODE}={node_id}"
                for c in client.containers.list(all=True, filters={"label": label}):
                    with contextlib.suppress(APIError):
                        c.kill(signal=9)  # a forced remove would wait out the stop timeout
                    with contextlib.suppress(APIError):
                        c.remove(force=True, v=True)


async def wait_gone(nodes: PodmanNodes, label: str, timeout: float = 20.0) -> None:
    """Until Podman lists no container (in any state) with *label*."""

    async def gone() -> bool:
        return not await asyncio.to_thread(nodes.states, label)

    await until(gone, timeout=timeout, interval=0.1, what=f"no container with {label}")


async def wait_state_not(nodes: PodmanNodes, label: str, state: str, timeout: float = 20.0) -> None:
    """Until the one container with *label* has left *state* (e.g. it ended by itself)."""

    async def left() -> list[str] | None:
        states: list[str] = await asyncio.to_thread(nodes.states, label)
        if states == [state]:
            return None
        assert len(states) == 1, states
        return states

    await until(left, timeout=timeout, interval=0.1, what=f"{label} no longer {state}")


async def sse(api: httpx.AsyncClient, session_id: str) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` pairs of ``GET /v1/sessions/{id}/logs?follow=true``."""
    url = f"/v1/sessions/{session_id}/logs"
    async with api.stream("GET", url, params={"follow": "true"}) as response:
        assert response.status_code == 200
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                yield event, json.loads(line.removeprefix("data: "))
