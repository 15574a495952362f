"""KernelSpec -> libpod create body, and the validation that keeps bad specs out."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from plugins.accelerators.base import Reservation
from plugins.common import Mount
from plugins.resources import ResourceSlots
from plugins.runtimes.base import InvalidSpec, KernelSpec, ServicePort
from plugins.runtimes.podman.cgroups import CPU_PERIOD_US, Limits, compute_limits
from plugins.runtimes.podman.settings import PodmanSettings
from plugins.runtimes.podman.spec import (
    container_name,
    create_body,
    format_ports_label,
    parse_ports_label,
)
from plugins.scheduling.config import MIN_CPU, MIN_MEM


def settings(**overrides: Any) -> PodmanSettings:
    return PodmanSettings(socket="unix:///run/podman.sock", **overrides)


def spec(**fields: Any) -> KernelSpec:
    base: dict[str, Any] = {
        "kernel_id": "k1",
        "session_id": "s1",
        "node_id": "n1",
        "command": ["python3", "-c", "print(1)"],
        "image": "localhost/jobgate-python:3.11",
    }
    return KernelSpec(**{**base, **fields})


def test_a_plain_spec_becomes_a_locked_down_container() -> None:
    body = create_body(spec(), settings(), native=None, mem_label=None)
    assert body == {
        "name": "jobgate-k1",
        "image": "localhost/jobgate-python:3.11",
        "command": ["python3", "-c", "print(1)"],
        "env": {"PYTHONUNBUFFERED": "1"},
        "labels": {"jobgate.session": "s1", "jobgate.kernel": "k1", "jobgate.node": "n1"},
        "init": True,
        "privileged": False,
        "no_new_privileges": True,
        "cap_drop": ["ALL"],
        "cap_add": [
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "NET_BIND_SERVICE",
            "SETGID",
            "SETUID",
        ],
        "netns": {"nsmode": "slirp4netns"},
        "stop_timeout": 10,
        "mounts": [],
        "devices": [],
    }


def test_env_layers_default_session_and_reservation() -> None:
    body = create_body(
        spec(
            env={"PYTHONUNBUFFERED": "0", "A": "session", "CUDA_VISIBLE_DEVICES": "mine"},
            reservation=Reservation(env={"CUDA_VISIBLE_DEVICES": "0", "B": "device"}),
        ),
        settings(default_env={"PYTHONUNBUFFERED": "1", "TZ": "UTC"}),
        native=None,
        mem_label=None,
    )
    assert body["env"] == {
        "PYTHONUNBUFFERED": "0",
        "TZ": "UTC",
        "A": "session",
        "CUDA_VISIBLE_DEVICES": "0",  # the accelerator plugin has the last word
        "B": "device",
    }


def test_ports_publish_on_the_configured_address_with_podman_chosen_host_ports() -> None:
    ports = [ServicePort("jupyter", "http", 8888), ServicePort("ssh", "tcp", 2222)]
    body = create_body(
        spec(ports=ports), settings(publish_host_ip="10.0.0.5"), native=None, mem_label=None
    )
    assert body["portmappings"] == [
        {"container_port": 8888, "host_ip": "10.0.0.5", "host_port": 0, "protocol": "tcp"},
        {"container_port": 2222, "host_ip": "10.0.0.5", "host_port": 0, "protocol": "tcp"},
    ]
    assert body["labels"]["jobgate.ports"] == "jupyter:http:8888,ssh:tcp:2222"


def test_limits_workdir_ulimit_and_the_memory_label() -> None:
    limits = Limits(memory=64 << 20, cpu_quota=50_000, pids=100)
    body = create_body(
        spec(workdir="/work"), settings(nofile=4096), native=limits, mem_label=64 << 20
    )
    assert body["resource_limits"] == limits.podman_resource_limits()
    assert body["labels"]["jobgate.mem-limit"] == str(64 << 20)
    assert (body["work_dir"], body["create_working_dir"]) == ("/work", True)
    assert body["r_limits"] == [{"type": "nofile", "soft": 4096, "hard": 4096}]


def test_no_command_keeps_the_images_own() -> None:
    assert "command" not in create_body(spec(command=[]), settings(), native=None, mem_label=None)


def test_reservation_devices_and_mounts_are_trusted(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    reservation = Reservation(
        devices=["/dev/nvidia0", "/dev/nvidiactl"],
        cdi_devices=["nvidia.com/gpu=GPU-1234"],
        mounts=[Mount("/usr/lib/nvidia", "/usr/local/nvidia", read_only=True)],
    )
    body = create_body(
        spec(mounts=[Mount(str(tmp_path / "data"), "/data/")], reservation=reservation),
        settings(allowed_mount_roots=[tmp_path]),
        native=None,
        mem_label=None,
    )
    assert body["devices"] == [
        {"path": "/dev/nvidia0"},
        {"path": "/dev/nvidiactl"},
        {"path": "nvidia.com/gpu=GPU-1234"},
    ]
    assert body["mounts"] == [
        {
            "type": "bind",
            "source": str(tmp_path / "data"),
            "destination": "/data",
            "options": ["rbind", "rw"],
        },
        {
            "type": "bind",
            "source": "/usr/lib/nvidia",
            "destination": "/usr/local/nvidia",
            "options": ["rbind", "ro"],
        },
    ]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    allowed = tmp_path / "allowed"
    (allowed / "project").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (allowed / "escape").symlink_to(tmp_path / "secret")
    (allowed / "inside").symlink_to(allowed / "project")
    return allowed


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        pytest.param("{root}/../secret", "/in", "not under an allowed root", id="dot-dot"),
        pytest.param("{root}/escape", "/in", "not under an allowed root", id="symlink-out"),
        pytest.param("/etc", "/in", "not under an allowed root", id="elsewhere"),
        pytest.param("project", "/in", "absolute host path", id="relative-source"),
        pytest.param("{root}/missing", "/in", "does not exist", id="missing-source"),
        pytest.param("{root}/project", "in", "absolute path", id="relative-target"),
        pytest.param("{root}/project", "/a/../b", "must not contain '..'", id="dot-dot-target"),
        pytest.param("{root}/project", "/", "must not be /", id="root-target"),
    ],
)
def test_bad_mounts_are_refused(root: Path, source: str, target: str, message: str) -> None:
    bad = spec(mounts=[Mount(source.format(root=root), target)])
    with pytest.raises(InvalidSpec, match=message):
        create_body(bad, settings(allowed_mount_roots=[root]), native=None, mem_label=None)


def test_a_symlink_that_stays_inside_is_resolved(root: Path) -> None:
    body = create_body(
        spec(mounts=[Mount(str(root / "inside"), "/in", read_only=True)]),
        settings(allowed_mount_roots=[root]),
        native=None,
        mem_label=None,
    )
    assert body["mounts"][0]["source"] == str(root / "project")


def test_no_mount_is_allowed_without_roots(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="none configured"):
        create_body(
            spec(mounts=[Mount(str(tmp_path), "/in")]), settings(), native=None, mem_label=None
        )


@pytest.mark.parametrize(
    ("fields", "overrides", "message"),
    [
        pytest.param({"image": None}, {}, "needs an image", id="no-image"),
        pytest.param({"kernel_id": "../x"}, {}, "cannot name a container", id="bad-kernel-id"),
        pytest.param({"env": {"A=B": "1"}}, {}, "name 'A=B' is not valid", id="env-name"),
        pytest.param({"env": {"A": "x\0y"}}, {}, "NUL byte", id="env-nul"),
        pytest.param({"command": ["a\0b"]}, {}, "NUL byte", id="command-nul"),
        pytest.param({"workdir": "work"}, {}, "must be absolute", id="relative-workdir"),
        pytest.param(
            {"ports": [ServicePort("web", "http", 8080)]},
            {"network": "none"},
            "without a network",
            id="ports-without-network",
        ),
        pytest.param(
            {"ports": [ServicePort("web", "http", 80), ServicePort("web", "tcp", 81)]},
            {},
            "invalid or repeated",
            id="port-name-twice",
        ),
        pytest.param({"ports": [ServicePort("web", "udp", 80)]}, {}, "http or tcp", id="udp"),
        pytest.param(
            {"ports": [ServicePort("web", "http", 70000)]}, {}, "not a port", id="port-range"
        ),
        pytest.param(
            {
                "mounts": [Mount("/dev", "/x")],
                "reservation": Reservation(mounts=[Mount("/dev", "/x")]),
            },
            {"allowed_mount_roots": [Path("/dev")]},
            "share a target",
            id="two-targets",
        ),
    ],
)
def test_bad_specs_are_refused(
    fields: dict[str, Any], overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSpec, match=message):
        create_body(spec(**fields), settings(**overrides), native=None, mem_label=None)


def test_container_name_is_stable_per_kernel() -> None:
    assert container_name("0b6f2c.k-1_a") == "jobgate-0b6f2c.k-1_a"


@pytest.mark.parametrize(
    ("text", "ports"),
    [
        pytest.param("jupyter:http:8888", [ServicePort("jupyter", "http", 8888)], id="one"),
        pytest.param(
            "a:tcp:1, b:http:2",
            [ServicePort("a", "tcp", 1), ServicePort("b", "http", 2)],
            id="two-with-space",
        ),
        pytest.param("web::80", [ServicePort("web", "http", 80)], id="protocol-defaults"),
        pytest.param("web:http:eighty,,:http:1", [], id="junk-skipped"),
        pytest.param("", [], id="empty"),
    ],
)
def test_ports_label_round_trip(text: str, ports: list[ServicePort]) -> None:
    assert parse_ports_label(text) == ports
    assert parse_ports_label(format_ports_label(ports)) == ports


def test_the_working_directory_is_mounted_at_home_work_where_the_job_starts(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "kernels" / "k1"
    body = create_body(spec(working_dir=copy), settings(), native=None, mem_label=None)
    assert {
        "type": "bind",
        "source": str(copy),
        "destination": "/home/work",
        "options": ["rbind", "rw"],
    } in body["mounts"]
    assert body["work_dir"] == "/home/work"
    # the worker's own copy needs no allowed root; a --workdir of the user's still wins
    named = create_body(
        spec(working_dir=copy, workdir="/home/work/src"), settings(), native=None, mem_label=None
    )
    assert named["work_dir"] == "/home/work/src"
    moved = create_body(
        spec(working_dir=copy), settings(working_dir_target="/w"), native=None, mem_label=None
    )
    assert moved["work_dir"] == "/w"


def test_a_user_mount_over_the_working_directory_is_refused(tmp_path: Path) -> None:
    clash = spec(working_dir=tmp_path, mounts=[Mount(str(tmp_path), "/home/work")])
    with pytest.raises(InvalidSpec, match="two mounts share a target"):
        create_body(clash, settings(allowed_mount_roots=[tmp_path]), native=None, mem_label=None)


def test_host_loopback_is_an_operator_opt_in_for_slirp4netns_only() -> None:
    assert "network_options" not in create_body(spec(), settings(), native=None, mem_label=None)
    opted = create_body(spec(), settings(host_loopback=True), native=None, mem_label=None)
    assert opted["network_options"] == {"slirp4netns": ["allow_host_loopback=true"]}
    closed = settings(host_loopback=True, network="none")
    assert "network_options" not in create_body(spec(), closed, native=None, mem_label=None)


def test_without_a_working_tree_home_work_is_an_empty_bind_mount_not_the_image(
    tmp_path: Path,
) -> None:
    """So a commit of the session (podman commit leaves bind mounts out) never holds it."""
    home = tmp_path / "podman-home" / "k1"
    body = create_body(spec(), settings(), native=None, mem_label=None, home=home)
    assert {
        "type": "bind",
        "source": str(home),
        "destination": "/home/work",
        "options": ["rbind", "rw"],
    } in body["mounts"]
    assert "work_dir" not in body  # the job still starts where its image says
    # a user's own mount at /home/work wins; a working tree replaces the empty home
    own = spec(mounts=[Mount(str(tmp_path), "/home/work")])
    mine = create_body(
        own, settings(allowed_mount_roots=[tmp_path]), native=None, mem_label=None, home=home
    )
    assert [m["source"] for m in mine["mounts"] if m["destination"] == "/home/work"] == [
        str(tmp_path)
    ]
    tree = create_body(spec(working_dir=tmp_path), settings(), native=None, mem_label=None)
    assert str(home) not in str(tree["mounts"])


@pytest.mark.parametrize(
    ("cpu", "mem"),
    [
        pytest.param(MIN_CPU, MIN_MEM, id="the-gateway-floors"),
        pytest.param(Decimal("0.5"), 512 << 20, id="the-gateway-defaults"),
        pytest.param(Decimal("3.25"), 40 << 30, id="large"),
    ],
)
def test_every_container_the_gateway_accepts_gets_limits_equal_to_its_reservation(
    cpu: Decimal, mem: int
) -> None:
    """What a group's minimums let through (min_cpu, min_mem: the least a session may
    ask for) is a container whose cpu quota and memory limit are what it reserved:
    never unlimited, never refused at start."""
    reserved = ResourceSlots({"cpu": cpu, "mem": Decimal(mem)})
    limits = compute_limits(reserved, None, None)
    body = create_body(spec(resources=reserved), settings(), native=limits, mem_label=mem)
    assert body["resource_limits"]["memory"] == {"limit": mem, "swap": mem}
    assert body["resource_limits"]["cpu"] == {
        "quota": int(cpu * CPU_PERIOD_US),
        "period": CPU_PERIOD_US,
    }
