"""The worker's side of working directories: verified fetches, one download per digest,
a fresh copy per kernel, and tarballs that try to escape refused."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contract.messages import StartKernel
from jobgate.workdir import pack
from plugins.resources import ResourceSlots
from plugins.runtimes.base import RuntimeContext, RuntimeFailure
from plugins.runtimes.sim import SimRuntime, SimSettings
from workers.config import WorkerSettings
from workers.kernel import NodeServices
from workers.node import NodeAgent
from workers.state import StateStore
from workers.workdir import BlobClient, UnsafeArchive, WorkdirCache, safe_extract, workdir_root


def make_tar(path: Path, add: Callable[[tarfile.TarFile], None]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar)
    return path


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = ""
) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def hostile(tmp_path: Path, *members: tuple[tarfile.TarInfo, io.BytesIO | None]) -> Path:
    def add(tar: tarfile.TarFile) -> None:
        for info, data in members:
            tar.addfile(info, data)

    return make_tar(tmp_path / "hostile.tar", add)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([member("/etc/cron.d/x", data=b"evil")], "unsafe path: '/etc/cron.d/x'"),
        ([member("../../outside", data=b"evil")], "unsafe path: '../../outside'"),
        ([member("a/../../outside", data=b"evil")], "unsafe path"),
        ([member("up", tarfile.SYMTYPE, link="../..")], "link leaving it: 'up' -> '../..'"),
        ([member("abs", tarfile.SYMTYPE, link="/etc")], "link leaving it: 'abs' -> '/etc'"),
        ([member("h", tarfile.LNKTYPE, link="/etc/passwd")], "hard link"),
        ([member("null", tarfile.CHRTYPE)], "device or fifo: 'null'"),
        ([member("disk", tarfile.BLKTYPE)], "device or fifo"),
        ([member("pipe", tarfile.FIFOTYPE)], "device or fifo"),
        # a link to the root, then a link through it that lexically stays inside
        (
            [
                member("a", tarfile.DIRTYPE),
                member("a/b", tarfile.SYMTYPE, link=".."),
                member("a/b/c", tarfile.SYMTYPE, link=".."),
            ],
            "cannot unpack 'a/b/c'|writes through a link",
        ),
        # a link to a directory, then a file written through it
        (
            [member("d", tarfile.SYMTYPE, link="."), member("d/x", data=b"ok inside")],
            None,
        ),
    ],
)
def test_hostile_tarballs_are_refused(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, io.BytesIO | None]], message: str | None
) -> None:
    archive = hostile(tmp_path, *members)
    target = tmp_path / "out" / "k1"
    if message is None:
        safe_extract(archive, target)
        assert (target / "x").read_bytes() == b"ok inside"
        return
    with pytest.raises(UnsafeArchive, match=message):
        safe_extract(archive, target)
    outside = [p for p in tmp_path.rglob("*") if p.name in ("outside", "c", "x")]
    assert outside == []


class ServedBlobs(BlobClient):
    """The gateway's GET /v1/blobs, from a dict (the HTTP path is tested end to end)."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        super().__init__("http://127.0.0.1:9", "token")
        self.blobs = blobs

    async def download(self, digest: str, target: Path) -> str:
        await asyncio.sleep(0.01)  # let concurrent starts pile up on the lock
        data = self.blobs[digest]
        await asyncio.to_thread(target.write_bytes, data)
        self.downloads += 1
        return f"sha256:{hashlib.sha256(data).hexdigest()}"


@pytest.fixture
def project(tmp_path: Path) -> tuple[str, bytes]:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print(open('data.csv').read())\n")
    (root / "data.csv").write_text("1,2\n")
    packed = pack(root)
    data = packed.path.read_bytes()
    packed.close()
    return packed.digest, data


async def test_concurrent_starts_fetch_once_and_each_kernel_gets_its_own_copy(
    tmp_path: Path, project: tuple[str, bytes]
) -> None:
    digest, data = project
    client = ServedBlobs({digest: data})
    cache = WorkdirCache(tmp_path / "wd", client)
    dirs = await asyncio.gather(*(cache.checkout(digest, f"k{i}") for i in range(5)))
    assert client.downloads == 1
    assert len(set(dirs)) == 5
    (dirs[0] / "data.csv").write_text("changed by job 0\n")
    (dirs[0] / "train.py").unlink()
    assert (dirs[1] / "data.csv").read_text() == "1,2\n"  # one job's writes stay its own
    again = await cache.checkout(digest, "k9")  # cached: no download, intact
    assert client.downloads == 1
    assert (again / "data.csv").read_text() == "1,2\n"
    assert hashlib.sha256(cache.blob(digest).read_bytes()).hexdigest() == digest[7:]
    cache.release_now("k0")
    assert not dirs[0].exists()
    await cache.close()


async def test_a_damaged_download_never_becomes_a_working_directory(
    tmp_path: Path, project: tuple[str, bytes]
) -> None:
    digest, data = project
    client = ServedBlobs({digest: data[:-512] + b"x" * 512})
    cache = WorkdirCache(tmp_path / "wd", client)
    with pytest.raises(RuntimeFailure, match=f"{digest} arrived damaged"):
        await cache.checkout(digest, "k1")
    assert not cache.blob(digest).exists()
    assert list(cache.blob(digest).parent.iterdir()) == []  # no partial file left
    assert not cache.kernel_dir("k1").exists()
    client.blobs[digest] = data  # a good copy later: fetched and used
    path = await cache.checkout(digest, "k1")
    assert (path / "data.csv").read_text() == "1,2\n"
    await cache.close()


async def test_not_a_digest_is_refused(tmp_path: Path) -> None:
    cache = WorkdirCache(tmp_path / "wd", ServedBlobs({}))
    with pytest.raises(RuntimeFailure, match="not a blob digest"):
        await cache.fetch("sha256:../../etc")
    await cache.close()


class Unreachable(BlobClient):
    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", "token")

    async def download(self, digest: str, target: Path) -> str:
        raise AssertionError("a sim node must not fetch working directories")


async def test_a_sim_node_accepts_a_working_dir_and_ignores_it(tmp_path: Path) -> None:
    runtime = SimRuntime(SimSettings(), RuntimeContext("n1", tmp_path))
    cache = WorkdirCache(tmp_path / "wd", Unreachable())
    services: Any = NodeServices("n1", runtime, None, None, StateStore(None), cache)
    agent = NodeAgent(
        "n1",
        "q",
        runtime,
        services,
        WorkerSettings(node_id="n1", data_dir=tmp_path),
        ResourceSlots(),
    )
    job = StartKernel(
        kernel_id="k1",
        session_id="s1",
        node_id="n1",
        session_type="batch",
        command=["python3", "train.py"],
        working_dir="sha256:" + "a" * 64,
    )
    spec, apps = await agent._refine(job, agent.spec(job))
    assert spec.working_dir is None
    assert apps == []
    assert not (tmp_path / "wd").exists()
    await cache.close()


async def test_the_cache_drops_the_least_recently_used_tars(tmp_path: Path) -> None:
    blobs = {}
    for name in ("a", "b", "c"):
        root = tmp_path / name
        root.mkdir()
        (root / "f").write_text(name * 3000)
        packed = pack(root)
        blobs[name] = (packed.digest, packed.path.read_bytes())
        packed.close()
    size = len(blobs["a"][1])
    client = ServedBlobs(dict(blobs.values()))
    cache = WorkdirCache(tmp_path / "wd", client, max_cache_bytes=2 * size)
    a, b, c = (blobs[n][0] for n in "abc")
    await cache.checkout(a, "k1")
    await cache.checkout(b, "k2")
    await cache.checkout(a, "k3")  # a used again: b is now the oldest
    await cache.checkout(c, "k4")
    assert cache.blob(a).exists()
    assert not cache.blob(b).exists()
    assert cache.blob(c).exists()
    assert client.downloads == 3
    await cache.checkout(b, "k5")  # fetched again, and a (older than c) goes
    assert client.downloads == 4
    assert not cache.blob(a).exists()
    await cache.close()


def test_the_workdir_root_is_one_the_podman_user_can_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root worker beside another user's rootless Podman keeps copies outside its 0700
    data directory; otherwise (and whenever configured) the data directory is used."""
    state = tmp_path / "state"
    configured = tmp_path / "mine"
    assert workdir_root(configured, state, "podman", "abc") == configured
    assert workdir_root(None, state, "process", "abc") == state / "workdirs"
    sock = tmp_path / "podman.sock"
    sock.touch()
    monkeypatch.setenv("JOBGATE_PODMAN_SOCKET", f"unix://{sock}")
    if os.geteuid() != 0:  # an ordinary worker: the Podman user itself
        assert workdir_root(None, state, "podman", "abc") == state / "workdirs"
        return
    assert workdir_root(None, state, "podman", "abc") == state / "workdirs"  # root's Podman
    os.chown(sock, 65534, 65534)
    instance = f"test-{os.getpid()}"
    root = workdir_root(None, state, "podman", instance)
    try:
        assert root == Path("/var/tmp") / f"jobgate-workdirs-{instance}"
        assert stat.S_IMODE(root.stat().st_mode) == 0o711
        assert stat.S_IMODE((root / "cache").stat().st_mode) == 0o700
        assert stat.S_IMODE((root / "kernels").stat().st_mode) == 0o711
    finally:
        shutil.rmtree(root, ignore_errors=True)
