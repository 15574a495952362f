"""The short, synchronous calls to the Podman API, through podman-py.

Each method is one request of a few milliseconds; :class:`PodmanRuntime` runs them in its
thread pool. Calls by container id go through podman-py's API client directly rather
than ``containers.get(id).start()``, which would inspect the container first: on the
start path every request counts. podman-py's errors become the runtime's own here, with
Podman's message (never the request body, which holds the session's environment).
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from podman import PodmanClient
from podman.errors import APIError

from plugins.runtimes.base import ImageNotFound, InvalidSpec, RuntimeFailure

from .streams import KernelGone

__all__ = ["APIFailure", "NameTaken", "PodmanAPI", "open_pidfd", "peer_pid"]

T = TypeVar("T")


class APIFailure(RuntimeFailure):
    """Podman answered with an error status (kept, so callers can tell 409 from 500)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class NameTaken(RuntimeFailure):
    """A container with this name exists already (a start that runs a second time)."""


def peer_pid(path: str, timeout: float = 2.0) -> int | None:
    """The pid of the process serving a unix socket (SO_PEERCRED), None if unknown."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, _, _ = struct.unpack("3i", raw)
    return pid if pid > 0 else None


def open_pidfd(pid: int, conmon_pid: int) -> int | None:
    """A pidfd for a container's init process, checked to be the child of its conmon.

    The check makes sure the pid means the same process here as in Podman's report (not
    a reused pid, not another pid namespace). None when that cannot be established.
    """
    if pid <= 0 or conmon_pid <= 0:
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            parent = next((line.split()[1] for line in status if line.startswith("PPid:")), "")
    except OSError:
        parent = ""
    if parent != str(conmon_pid):
        os.close(fd)
        return None
    return fd


class PodmanAPI:
    """A podman-py client plus the handful of calls the runtime makes."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.client = PodmanClient(base_url=url, timeout=timeout)

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]

    def _guard(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except requests.exceptions.ConnectionError as exc:
            raise RuntimeFailure(f"Podman API at {self.url} is unreachable ({what})") from exc
        except requests.exceptions.Timeout as exc:
            raise RuntimeFailure(f"Podman API at {self.url} timed out ({what})") from exc
        except APIError as exc:
            if exc.response is None:  # podman-py's wrapping of a failed connection
                cause = exc.__cause__ or exc
                raise RuntimeFailure(f"Podman API at {self.url} is unreachable ({cause})") from exc
            status = exc.status_code or 0
            message = str(exc.explanation or exc)
            if status == 404:
                raise KernelGone(f"{what}: {message}") from exc
            raise APIFailure(f"{what}: {message}", status) from exc

    def _request(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        send = {
            "GET": self.client.api.get,
            "POST": self.client.api.post,
            "DELETE": self.client.api.delete,
            "PUT": self.client.api.put,
        }[method]

        def call() -> Any:
            response = send(path, **kwargs)
            response.raise_for_status()
            return response

        return self._guard(what, call)

    # -- node -------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        data: dict[str, Any] = self._guard("info", self.client.info)
        return data

    def image_exists(self, image: str) -> bool:
        return bool(self._guard("image exists", lambda: self.client.images.exists(image)))

    def image_labels(self, image: str) -> dict[str, str]:
        image_obj = self._guard("image inspect", lambda: self.client.images.get(image))
        labels: dict[str, str] = image_obj.labels or {}
        return dict(labels)

    # -- containers -------------------------------------------------------------------
    def create(self, body: dict[str, Any]) -> str:
        """The new container's id; NameTaken, ImageNotFound or InvalidSpec otherwise."""

        def call() -> Any:
            return self.client.api.post(
                "/containers/create",
                data=json.dumps(body),
                headers={"content-type": "application/json"},
            )

        response = self._guard("create", call)
        if response.status_code == 201:
            return str(response.json()["Id"])
        message = _message(response)
        if response.status_code == 409 or "already in use" in message:  # 4.3 answers 500
            raise NameTaken(message)
        if response.status_code == 404:
            raise ImageNotFound(str(body.get("image")), message)
        if response.status_code == 400:
            raise InvalidSpec(f"Podman refused the container: {message}")
        raise RuntimeFailure(f"creating the container failed: {message}")

    def init(self, ref: str) -> None:
        self._request("POST", f"/containers/{quote(ref)}/init", "init")

    def start(self, ref: str) -> None:
        self._request("POST", f"/containers/{quote(ref)}/start", "start")

    def inspect(self, ref: str) -> dict[str, Any]:
        data: dict[str, Any] = self._request(
            "GET", f"/containers/{quote(ref)}/json", "inspect"
        ).json()
        return data

    def kill(self, ref: str, signo: int) -> bool:
        """Send a signal; False when the container is not running (or gone)."""
        try:
            self._request(
                "POST", f"/containers/{quote(ref)}/kill", "kill", params={"signal": signo}
            )
        except KernelGone:
            return False
        except APIFailure as exc:
            if exc.status == 409:  # "can only kill running containers": it ended already
                return False
            raise
        return True

    def put_archive(self, ref: str, path: str, tar: bytes) -> None:
        """Unpack the *tar* archive at *path* (a directory) in the container."""
        self._request(
            "PUT",
            f"/containers/{quote(ref)}/archive",
            "put archive",
            params={"path": path},
            data=tar,
            headers={"content-type": "application/x-tar"},
        )

    def remove(self, ref: str) -> None:
        """Remove with its anonymous volumes; a container already gone is fine."""
        try:
            self._request(
                "DELETE",
                f"/containers/{quote(ref)}",
                "remove",
                params={"force": "true", "v": "true"},
            )
        except KernelGone:
            return

    # -- networks (cluster sessions) ----------------------------------------------------
    def network_create(self, body: dict[str, Any]) -> None:
        """Create a network; one of that name already there is fine."""

        def call() -> Any:
            return self.client.api.post(
                "/networks/create",
                data=json.dumps(body),
                headers={"content-type": "application/json"},
            )

        response = self._guard("network create", call)
        if response.status_code in (200, 201):
            return
        message = _message(response)
        if response.status_code == 409 or "already exists" in message or "already used" in message:
            return
        raise RuntimeFailure(f"creating network {body.get('name')} failed: {message}")

    def network_subnet(self, name: str) -> str:
        """The network's (first) IPv4 subnet, as Podman chose it."""
        info = self._request("GET", f"/networks/{quote(name)}/json", "network inspect").json()
        for entry in info.get("subnets") or []:
            subnet = str(entry.get("subnet") or "")
            if subnet and ":" not in subnet:
                return subnet
        raise RuntimeFailure(f"network {name} has no IPv4 subnet")

    def network_remove(self, name: str) -> None:
        """Remove a network (its containers are gone); one already gone is fine."""
        try:
            self._request("DELETE", f"/networks/{quote(name)}", "network remove")
        except KernelGone:
            return

    def network_names(self, labels: list[str]) -> list[str]:
        """Names of the networks carrying every label ``key=value``."""
        rows = (
            self._request(
                "GET",
                "/networks/json",
                "network list",
                params={"filters": json.dumps({"label": labels})},
            ).json()
            or []
        )
        return [str(r.get("name") or r.get("Name")) for r in rows]

    def list_node(self, label: str) -> list[dict[str, Any]]:
        """Every container (running or not) carrying the label ``key=value``."""
        rows: list[dict[str, Any]] = (
            self._request(
                "GET",
                "/containers/json",
                "list",
                params={"all": "true", "filters": json.dumps({"label": [label]})},
            ).json()
            or []
        )
        return rows


def _message(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return str(response.text).strip()
    if isinstance(body, dict):
        return str(body.get("message") or body.get("cause") or body)
    return str(body)
