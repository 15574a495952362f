"""A real OCI registry for tests: Debian's ``docker-registry`` on a loopback port, with
TLS (a self-signed certificate the Podman user trusts through ``certs.d``: Podman reads
that per pull, registries.conf it caches until restarted).

Used by the runtime's pull test, the end-to-end test of a worker killed during a pull
(:func:`local_registry_image`: an image that is nowhere else) and the commit test.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from podman import PodmanClient

from jobgate.localnet import free_port, wait_port

__all__ = [
    "local_registry_image",
    "registry_binary",
    "self_signed",
    "serve_registry",
    "trust_for_podman_user",
]


def registry_binary() -> str | None:
    """The docker-registry binary (scripts/build-test-images.sh unpacks one), or None."""
    binary = os.environ.get("JOBGATE_TEST_REGISTRY_BIN") or shutil.which("docker-registry")
    binary = binary or "/var/cache/jobgate-images/bin/docker-registry"
    if not os.access(binary, os.X_OK) or shutil.which("openssl") is None:
        return None
    return binary


@contextlib.contextmanager
def serve_registry(binary: str, directory: Path, podman_socket: str) -> Iterator[str]:
    """Run a TLS registry storing under *directory*; yields its ``127.0.0.1:PORT``."""
    port = free_port()
    cert, key = self_signed(directory)
    config = directory / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {directory}/store\nhttp:\n  addr: 127.0.0.1:{port}\n"
        f"  tls:\n    certificate: {cert}\n    key: {key}\n"
    )
    address = f"127.0.0.1:{port}"
    trusted = trust_for_podman_user(podman_socket, address, cert)
    server = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(port, process=server)
        yield address
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(trusted, ignore_errors=True)


@contextlib.contextmanager
def local_registry_image(
    binary: str, podman_socket: str, busybox: str, shared_dir: Path, size: int = 3_000_000
) -> Iterator[str]:
    """The name of an image only a registry on a free loopback port has: busybox plus a
    layer of *size* random bytes in ``/blob``."""
    with serve_registry(binary, shared_dir, podman_socket) as address:
        image = f"{address}/jobgate-test/pull:{uuid.uuid4().hex[:8]}"
        try:
            with PodmanClient(base_url=podman_socket) as client:
                container = client.containers.create(
                    busybox, ["sh", "-c", f"head -c {size} /dev/urandom > /blob"]
                )
                container.start()
                container.wait()
                repository, tag = image.rsplit(":", 1)
                container.commit(repository=repository, tag=tag)
                container.remove()
                client.images.push(repository, tag)
                client.images.remove(image)
            yield image
        finally:
            with PodmanClient(base_url=podman_socket) as client:
                if client.images.exists(image):
                    client.images.remove(image, force=True)


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def trust_for_podman_user(podman_socket: str, registry: str, cert: Path) -> Path:
    """``~USER/.config/containers/certs.d/REGISTRY/ca.crt`` for the socket's owner."""
    owner = Path(podman_socket.removeprefix("unix://")).stat().st_uid
    certs = Path(pwd.getpwuid(owner).pw_dir) / ".config/containers/certs.d"
    if not certs.exists():
        certs.mkdir()
        os.chown(certs, owner, -1)
    directory = certs / registry
    directory.mkdir(exist_ok=True)
    shutil.copyfile(cert, directory / "ca.crt")
    (directory / "ca.crt").chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    return directory
