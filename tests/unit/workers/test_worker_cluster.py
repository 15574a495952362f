"""A cluster session's container side: environment, files, and the Podman body."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from sim_agent import sim_agent

from contract.messages import StartKernel, WireCluster, WireClusterMember
from plugins.runtimes.base import InvalidSpec, KernelSpec, RuntimeContext, RuntimeFailure
from plugins.runtimes.podman.settings import PodmanSettings
from plugins.runtimes.podman.spec import SSHD_PREAMBLE, create_body
from plugins.runtimes.sim import SimRuntime, SimSettings
from workers.cluster import Overlays, cluster_env, cluster_net, overlay_key, write_config

SEED = "11" * 32


def cluster(mode: str = "single-node", index: int = 2) -> WireCluster:
    members = [
        WireClusterMember(
            hostname=h,
            kernel_id=f"k{i}",
            node_id=f"n{i}",
            address=f"10.0.0.{i + 1}",
            port=29100 + i,
        )
        for i, h in enumerate(["main1", "sub1", "sub2"])
    ]
    return WireCluster(mode=mode, index=index, members=members, ssh_seed=SEED)  # type: ignore[arg-type]


def test_the_environment_of_sub2_with_backend_ai_aliases() -> None:
    env = cluster_env(cluster(), "s1", "k2")
    assert {k: v for k, v in env.items() if k.startswith("JOBGATE_")} == {
        "JOBGATE_CLUSTER_HOST": "sub2",
        "JOBGATE_CLUSTER_HOSTS": "main1,sub1,sub2",
        "JOBGATE_CLUSTER_IDX": "2",
        "JOBGATE_CLUSTER_LOCAL_RANK": "2",
        "JOBGATE_CLUSTER_MODE": "single-node",
        "JOBGATE_CLUSTER_ROLE": "sub",
        "JOBGATE_CLUSTER_ROLES": "main,sub",
        "JOBGATE_CLUSTER_SIZE": "3",
        "JOBGATE_CLUSTER_REPLICAS": "main:1,sub:2",
        "JOBGATE_CLUSTER_HOSTFILE": "/opt/jobgate/cluster/hostfile",
        "JOBGATE_SESSION_ID": "s1",
        "JOBGATE_KERNEL_ID": "k2",
    }
    assert env["BACKENDAI_CLUSTER_HOST"] == "sub2"
    assert env["BACKENDAI_SESSION_ID"] == "s1"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]) == (
        "main1",
        "29500",
        "3",
        "2",
    )


def test_multi_node_peers_meet_on_the_overlay_or_on_the_schedulers_port() -> None:
    c = cluster("multi-node")
    env = cluster_env(c, "s1", "k2")  # containers: a namespace each, the usual ports
    assert env["MASTER_PORT"] == "29500"
    for name in ("OMPI_MCA_btl_tcp_if_include", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert env[name] == "jg0"
    # plain processes share the node's network: main1's node port, given by the scheduler
    shared = cluster_env(c, "s1", "k2", own_netns=False)
    assert shared["MASTER_PORT"] == "29100"
    assert "NCCL_SOCKET_IFNAME" not in shared
    # one key per session, the same in every container, and not the seed itself
    assert overlay_key(SEED) == overlay_key(SEED) != overlay_key("22" * 32)
    assert SEED not in overlay_key(SEED)


def test_the_files_hold_one_key_pair_every_container_derives_alike(tmp_path: Path) -> None:
    write_config(tmp_path / "a", cluster("multi-node"))
    write_config(tmp_path / "b", cluster("multi-node", index=0))
    a, b = tmp_path / "a", tmp_path / "b"
    # the same key pair and host key (OpenSSH's private format has a random check word)
    for name in ("ssh/id_ed25519.pub", "ssh/known_hosts"):
        assert (a / name).read_text() == (b / name).read_text()
    assert (a / "ssh" / "id_ed25519").stat().st_mode & 0o777 == 0o600
    assert (a / "ssh_host_ed25519_key").stat().st_mode & 0o777 == 0o600
    public = (a / "ssh" / "id_ed25519.pub").read_text()
    assert (a / "ssh" / "authorized_keys").read_text() == public
    assert public.startswith("ssh-ed25519 ")
    assert (a / "hostfile").read_text() == "main1 slots=1\nsub1 slots=1\nsub2 slots=1\n"
    assert "Host *\n    Port 22\n" in (a / "ssh" / "config").read_text()
    assert "Port 22\n" in (a / "sshd_config").read_text()
    keygen = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(a / "ssh" / "id_ed25519")], capture_output=True, text=True
    )
    if keygen.returncode != 127:  # ssh-keygen present: the private key is a valid OpenSSH one
        assert keygen.stdout.split()[:2] == public.split()[:2]


def test_a_seed_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    bad = cluster().model_copy(update={"ssh_seed": "ab"})
    with pytest.raises(ValueError, match="32 bytes"):
        write_config(tmp_path, bad)


def test_podman_joins_the_sessions_network_or_the_hosts_and_starts_sshd(tmp_path: Path) -> None:
    base = KernelSpec("k2", "s1", "n1", ["mpirun", "x"], image="localhost/jobgate-mpi:latest")
    settings = PodmanSettings(socket="unix:///run/podman.sock")
    single_net = cluster_net(cluster(), "s1", tmp_path, subnet="10.89.3.0/24")
    single = base.__class__(**{**_fields(base), "cluster": single_net})
    body = create_body(single, settings, native=None, mem_label=None)
    assert body["hostname"] == "sub2"
    assert body["netns"] == {"nsmode": "bridge"}
    # a fixed address each, and every peer in /etc/hosts: no DNS server needed to find them
    assert body["networks"] == {"jobgate-s1": {"aliases": ["sub2"], "static_ips": ["10.89.3.4"]}}
    assert body["hostadd"] == ["main1:10.89.3.2", "sub1:10.89.3.3", "sub2:10.89.3.4"]
    with pytest.raises(ValueError, match="no room for 3"):
        cluster_net(cluster(), "s1", tmp_path, subnet="10.89.3.0/30")
    assert body["command"] == ["/bin/sh", "-c", SSHD_PREAMBLE, "jobgate-cluster", "mpirun", "x"]
    assert "SYS_CHROOT" in body["cap_add"]
    mounts = {m["destination"]: m["source"] for m in body["mounts"]}
    assert mounts == {"/opt/jobgate/cluster": str(tmp_path), "/root/.ssh": str(tmp_path / "ssh")}

    async def attach(pid: int) -> None:
        del pid

    multi_net = cluster_net(cluster("multi-node"), "s1", tmp_path, attach)
    multi = base.__class__(**{**_fields(base), "cluster": multi_net})
    body = create_body(multi, settings, native=None, mem_label=None)
    assert body["netns"] == {"nsmode": "slirp4netns"}  # its own, never the host's
    assert body["hostadd"] == ["main1:10.254.0.1", "sub1:10.254.0.2", "sub2:10.254.0.3"]
    assert "networks" not in body
    without = base.__class__(
        **{**_fields(base), "cluster": cluster_net(cluster("multi-node"), "s1", tmp_path)}
    )
    with pytest.raises(InvalidSpec, match="overlay"):  # never the host's network instead
        create_body(without, settings, native=None, mem_label=None)


def _fields(spec: KernelSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


class _NoNetworks(SimRuntime):
    """A runtime whose networks cannot be made (a Podman without netavark, say)."""

    name = "no-networks"  # type: ignore[misc]

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(SimSettings(), RuntimeContext("n1", tmp_path))
        self.removed: list[str] = []

    async def create_network(self, name: str) -> str:
        raise RuntimeFailure(f"cannot make network {name}: netavark is not installed")

    async def remove_network(self, name: str) -> None:
        self.removed.append(name)

    async def list_networks(self) -> list[str]:
        return ["jobgate-gone", "jobgate-s1"]

    async def netns_pid(self) -> int | None:
        return None


async def test_a_failed_network_fails_the_start_with_its_reason_and_leaves_no_network(
    tmp_path: Path,
) -> None:
    agent, recorder = sim_agent(tmp_path)
    runtime = _NoNetworks(tmp_path)
    agent.runtime = agent.services.runtime = runtime
    job = StartKernel(
        kernel_id="k2",
        session_id="s1",
        node_id="n1",
        session_type="batch",
        command=["sleep", "600"],
        cluster=cluster(),
    )
    assert agent.spec(job).env["JOBGATE_CLUSTER_HOST"] == "sub2"  # its name, from the cluster
    agent.start(job)
    for _ in range(300):
        if any(e.kind == "start_failed" for e in recorder.events) and runtime.removed:
            break
        await asyncio.sleep(0.01)
    failed = [e for e in recorder.events if e.kind == "start_failed"]
    assert [e.message for e in failed] == [
        "cannot make network jobgate-s1: netavark is not installed"
    ]
    assert runtime.removed == ["jobgate-s1"]
    assert agent.kernels == {}


async def test_a_restarted_worker_sweeps_networks_no_container_uses(tmp_path: Path) -> None:
    agent, _ = sim_agent(tmp_path)
    runtime = _NoNetworks(tmp_path)
    agent.runtime = runtime
    agent.start(
        StartKernel(
            kernel_id="k1",
            session_id="s1",
            node_id="n1",
            session_type="batch",
            command=["sleep", "600"],
            env={"JOBGATE_SIM_DURATION": "3600"},
        )
    )
    await agent.sweep_networks()  # s1 still has a container here: its network stays
    assert runtime.removed == ["jobgate-gone"]


async def test_an_overlay_for_a_session_id_that_names_another_path_is_refused(
    tmp_path: Path,
) -> None:
    """Session ids arrive in start jobs over Redis: one that could lead out of the
    worker's overlay directory (or remove another one on clean-up) is refused."""
    overlays = Overlays(tmp_path / "overlays")
    (tmp_path / "keep").mkdir()
    for bad in ("../keep", "a/b", "", "x" * 65):
        with pytest.raises(ValueError, match="not a session id"):
            await overlays.ensure(bad, cluster("multi-node"), None)
        with pytest.raises(ValueError, match="not a session id"):
            await overlays.done(bad)
    assert (tmp_path / "keep").is_dir()
