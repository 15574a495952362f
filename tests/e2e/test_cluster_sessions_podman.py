"""Cluster sessions on real rootless Podman: names, environment, ssh and an MPI allreduce.

One `jobgate up` on Podman (netavark) for the module; each scenario runs once and
asserts what a user would see (docs/cluster-sessions.md):

* single-node x3 with the MPI image: the cluster environment in main1, sub1/sub2
  resolve, ``ssh sub1 hostname`` with no prompt, ``mpirun`` across the three containers
  (an allreduce each rank checks), a second session that cannot reach the first's
  containers, ``sessions show``/``ls``/``logs --kernel sub1``, networks removed after;
* bad input: 422 naming the field (409 where the group's configuration refuses it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cluster_harness import MPI, NetnsPair, PodmanService, mpi_image_present
from netprobe import PROBE, answered, parse_probes, serving
from up_harness import UpStack
from waiting import until_sync

pytestmark = pytest.mark.podman
TIMES = "\N{MULTIPLICATION SIGN}"

ALLREDUCE = (
    "from mpi4py import MPI; c = MPI.COMM_WORLD; r = c.Get_rank(); n = c.Get_size(); "
    "s = c.allreduce(r + 1); assert s == n * (n + 1) // 2, s; "
    "print(f'rank {r} of {n} on {MPI.Get_processor_name()}: allreduce {s} ok', flush=True)"
)

#: every container runs it; subs wait, main1 does the work
MAIN = f"""
set -e
if [ "$JOBGATE_CLUSTER_ROLE" != main ]; then echo "$JOBGATE_CLUSTER_HOST ready"; exec sleep 600; fi
env | grep -E '^(JOBGATE_CLUSTER_|BACKENDAI_CLUSTER_HOST=|MASTER_|WORLD_SIZE=|RANK=)' | sort
for h in sub1 sub2; do  # the subs start about when main1 does: wait for their sshd
  for i in $(seq 100); do
    ssh -o BatchMode=yes -o ConnectTimeout=2 $h true 2>/dev/null && break; sleep 0.2
  done
done
for h in sub1 sub2; do echo "resolves $h $(getent hosts $h | wc -l)"; done
echo "ssh sub1: $(ssh -o BatchMode=yes sub1 hostname)"
mpirun -np 3 python3 -c "{ALLREDUCE}" | sort
python3 - <<'EOF'
import os, socket
try:
    socket.create_connection((os.environ["OTHER"], 22), timeout=3)
    print("other session: reachable")
except OSError as exc:
    print("other session: unreachable", type(exc).__name__)
EOF
"""


@pytest.fixture(scope="module")
def podman(podman_socket: str) -> Iterator[PodmanService]:
    if not mpi_image_present(podman_socket):
        pytest.fail(f"{MPI} is missing: run scripts/build-test-images.sh mpi")
    service = PodmanService(podman_socket)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def stack(podman: PodmanService) -> Iterator[UpStack]:
    tmp = Path(tempfile.mkdtemp(prefix="jobgate-cluster-"))
    tmp.chmod(0o755)
    up = UpStack(
        tmp,
        runtime="podman",
        env={
            "JOBGATE_PODMAN_SOCKET": podman.socket,
            "JOBGATE_WORKDIR_ROOT": str(tmp / "workdirs"),
        },
    )
    up.start(timeout=180)
    try:
        yield up
    finally:
        up.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _api(up: UpStack) -> httpx.Client:
    key = tomllib.loads(up.config.read_text())["api_key"]
    return httpx.Client(
        base_url=f"http://127.0.0.1:{up.port}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def _log_line(api: httpx.Client, session: str, prefix: str, timeout: float = 60) -> str:
    def line() -> str | None:
        text = api.get(f"/v1/sessions/{session}/logs").text
        return next((x for x in text.splitlines() if x.startswith(prefix)), None)

    return until_sync(line, timeout=timeout, interval=0.2, what=f"{session} printed {prefix!r}")


def _wait_status(api: httpx.Client, session: str, wanted: str, timeout: float = 60) -> None:
    until_sync(
        lambda: api.get(f"/v1/sessions/{session}").json()["status"] == wanted,
        timeout=timeout,
        interval=0.2,
        what=f"{session} {wanted}",
    )


def _networks(podman: PodmanService) -> set[str]:
    out = podman.podman("network", "ls", "--format", "json").stdout
    return {n["name"] for n in json.loads(out or "[]")}


def test_single_node_cluster_runs_mpi_over_ssh_in_a_private_network(
    stack: UpStack, podman: PodmanService
) -> None:
    small = ["--cpu", "0.2", "--mem", "128m", "--image", MPI]
    cluster = ["--cluster-size", "3", "--cluster-mode", "single-node", *small]
    api = _api(stack)
    # a first session, only to be out of reach of the second
    first = api.post(
        "/v1/sessions",
        json={
            "cluster_size": 2,
            "cluster_mode": "single-node",
            "resources": {"cpu": "0.2", "mem": "128m"},
            "image": MPI,
            "command": ["bash", "-c", 'echo "ip $(hostname -i)"; exec sleep 600'],
        },
    ).json()["id"]
    other_ip = _log_line(api, first, "ip ").split()[1]
    assert f"jobgate-{first}" in _networks(podman)

    run = stack.cli("run", *cluster, "--env", f"OTHER={other_ip}", "--", "bash", "-c", MAIN)
    assert run.returncode == 0, run.stderr + run.stdout
    out = run.stdout.splitlines()
    session = next(line.split()[2] for line in run.stderr.splitlines() if "submitted" in line)
    for expected in (
        "JOBGATE_CLUSTER_HOST=main1",
        "JOBGATE_CLUSTER_HOSTS=main1,sub1,sub2",
        "JOBGATE_CLUSTER_IDX=1",
        "JOBGATE_CLUSTER_MODE=single-node",
        "JOBGATE_CLUSTER_ROLE=main",
        "JOBGATE_CLUSTER_SIZE=3",
        "JOBGATE_CLUSTER_REPLICAS=main:1,sub:2",
        "JOBGATE_CLUSTER_HOSTFILE=/opt/jobgate/cluster/hostfile",
        "BACKENDAI_CLUSTER_HOST=main1",
        "MASTER_ADDR=main1",
        "MASTER_PORT=29500",
        "WORLD_SIZE=3",
        "RANK=0",
        "resolves sub1 1",
        "resolves sub2 1",
        "ssh sub1: sub1",
        "rank 0 of 3 on main1: allreduce 6 ok",
        "rank 1 of 3 on sub1: allreduce 6 ok",
        "rank 2 of 3 on sub2: allreduce 6 ok",
        "other session: unreachable TimeoutError",
    ):
        assert expected in out, f"{expected!r} not in:\n{run.stdout}\n{run.stderr}"
    assert "sub1 ready" in out  # every container's output streams
    assert "sub2 ready" in out

    shown = api.get(f"/v1/sessions/{session}").json()
    assert shown["status"] == "SUCCEEDED"  # main1 ended: the subs were stopped
    assert shown["cluster_mode"] == "single-node"
    assert [k["hostname"] for k in shown["kernels"]] == ["main1", "sub1", "sub2"]
    assert len({k["node"] for k in shown["kernels"]}) == 1
    text = stack.cli("sessions", "show", session, check=True).stdout
    assert f"single-node {TIMES}3" in text
    assert "sub2" in text
    assert f"single-node {TIMES}3" in stack.cli("sessions", "ls", check=True).stdout
    assert stack.cli("logs", session, "--kernel", "sub1", check=True).stdout == "sub1 ready\n"
    main_log = stack.cli("logs", session, check=True).stdout
    assert "sub1 ready" not in main_log
    assert "ssh sub1: sub1" in main_log
    assert "cluster_key" not in shown  # the session's ssh seed is never shown
    assert "PRIVATE KEY" not in stack.output()

    api.delete(f"/v1/sessions/{first}").raise_for_status()
    _wait_status(api, first, "TERMINATED")
    api.close()
    until_sync(
        lambda: not {f"jobgate-{first}", f"jobgate-{session}"} & _networks(podman),
        timeout=20,
        interval=0.2,
        what=lambda: f"the sessions' networks removed: {_networks(podman)}",
    )


def test_bad_cluster_requests_are_refused_naming_the_field(stack: UpStack) -> None:
    with _api(stack) as api:
        cases = [
            ({"cluster_mode": "single-node"}, 422, "cluster_mode"),
            ({"cluster_size": 2}, 422, "cluster_mode"),
            ({"cluster_size": 2, "cluster_mode": "ring"}, 422, "cluster_mode"),
            # well-formed, over the group's limit as it is configured: 409
            ({"cluster_size": 17, "cluster_mode": "multi-node"}, 409, "cluster_size"),
            (
                {"cluster_size": 2, "cluster_mode": "single-node", "stop_when": "never"},
                422,
                "stop_when",
            ),
        ]
        for extra, status, field in cases:
            r = api.post("/v1/sessions", json={"command": ["true"], "image": MPI, **extra})
            assert r.status_code == status, (extra, r.text)
            assert field in r.text, (extra, r.text)
        assert (
            "limit of 16"
            in api.post(
                "/v1/sessions",
                json={"command": ["true"], "cluster_size": 17, "cluster_mode": "multi-node"},
            ).text
        )
    bad = stack.cli("run", "--cluster-size", "2", "--", "true")
    assert bad.returncode == 1, bad.stderr
    assert bad.stderr.startswith("error:"), bad.stderr
    assert "cluster_mode" in bad.stderr


MULTI = f"""
set -e
if [ "$JOBGATE_CLUSTER_ROLE" != main ]; then
  echo "$JOBGATE_CLUSTER_HOST ready"
  python3 - <<'EOF'
import os, socket, time
for _ in range(300):  # bounded: main1 listens once its container runs
    try:
        s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), 2)
        break
    except OSError:
        time.sleep(0.1)
s.sendall(os.environ["JOBGATE_CLUSTER_HOST"].encode())
s.close()
EOF
  exec sleep 600
fi
python3 - <<'EOF'
import os, socket
srv = socket.create_server(("", int(os.environ["MASTER_PORT"])))
srv.settimeout(60)
c, peer = srv.accept()
print(f"rendezvous on {{os.environ['MASTER_PORT']}}: {{c.recv(64).decode()}} from {{peer[0]}}")
try:  # the other node's own address: a private one, which no-private refuses
    socket.create_connection(("10.231.0.2", 1), timeout=3)
except OSError as exc:
    print("node b:", exc.strerror)
EOF
for i in $(seq 100); do
  ssh -o BatchMode=yes -o ConnectTimeout=2 sub1 true 2>/dev/null && break; sleep 0.2
done
echo "main1 at $(getent hosts main1 | cut -d' ' -f1), sub1 at $(getent hosts sub1 | cut -d' ' -f1)"
echo "ssh sub1: $(ssh -o BatchMode=yes sub1 hostname)"
mpirun -np 2 python3 -c "{ALLREDUCE}" | sort
"""


@pytest.fixture(scope="module")
def netns_nodes(stack: UpStack, podman_socket: str) -> Iterator[list[str]]:
    """Two worker nodes in group "pair" whose containers live in two network
    namespaces joined by a veth pair (10.231.0.1 and 10.231.0.2)."""
    pair = NetnsPair(f"jg{uuid.uuid4().hex[:6]}")
    services: list[PodmanService] = []
    workers: list[subprocess.Popen[bytes]] = []
    redis_url = next(
        line.split()[-1] for line in stack.output().splitlines() if line.strip().startswith("redis")
    )
    token = json.loads((stack.data_dir / "secrets.json").read_text())["node_token"]
    try:
        pair.create()
        ids = []
        for ns, address in zip(pair.names, pair.addresses, strict=True):
            service = PodmanService(podman_socket, netns=ns)
            services.append(service)
            service.start()
            node_id = f"{ns}-node"
            data = stack.tmp / node_id
            env = stack.environ() | {
                "JOBGATE_REDIS_URL": redis_url,
                "JOBGATE_GATEWAY_URL": f"http://127.0.0.1:{stack.port}",
                "JOBGATE_NODE_TOKEN": token,
                "JOBGATE_DATA_DIR": str(data),
                "JOBGATE_NODE_ID": node_id,
                "JOBGATE_NODE_ADDRESS": address,
                "JOBGATE_RESOURCE_GROUP": "pair",
                "JOBGATE_WORKER_RUNTIME": "podman",
                "JOBGATE_WORKER_CPU": "1",
                "JOBGATE_WORKER_MEM": "2g",
                "JOBGATE_PODMAN_SOCKET": service.socket,
                "JOBGATE_WORKDIR_ROOT": str(stack.tmp / f"{node_id}-workdirs"),
            }
            with (stack.tmp / f"{node_id}.log").open("ab") as log:
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "jobgate", "worker", "run"],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            ids.append(node_id)
        with _api(stack) as api:
            until_sync(
                lambda: set(ids) <= {n["id"] for n in api.get("/v1/nodes").json()["items"]},
                timeout=60,
                interval=0.3,
                what="the netns workers registered",
            )
        yield ids
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        for service in services:
            service.stop()
        pair.remove()


def test_multi_node_cluster_runs_mpi_across_two_network_namespaces(
    stack: UpStack, netns_nodes: list[str]
) -> None:
    with _api(stack) as api:
        group = {"scheduler": {"cluster_modes": ["multi-node"], "egress": "no-private"}}
        api.patch("/v1/resource-groups/pair", json=group).raise_for_status()
        refused = api.post(
            "/v1/sessions",
            json={
                "command": ["true"],
                "resource_group": "pair",
                "cluster_size": 2,
                "cluster_mode": "single-node",
            },
        )
    assert refused.status_code == 409  # the group's configuration
    assert refused.json()["field"] == "cluster_mode"
    assert "does not allow single-node" in refused.json()["detail"]
    run = stack.cli(
        "run",
        "--group",
        "pair",
        "--cluster-size",
        "2",
        "--cluster-mode",
        "multi-node",
        "--cpu",
        "1",
        "--mem",
        "128m",
        "--image",
        MPI,
        "--",
        "bash",
        "-c",
        MULTI,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    out = run.stdout.splitlines()
    for expected in (
        "rendezvous on 29500: sub1 from 10.254.0.2",  # no NAT: its own overlay address
        "node b: No route to host",  # its group's egress holds on a multi-node container
        "main1 at 10.254.0.1, sub1 at 10.254.0.2",
        "ssh sub1: sub1",
        "rank 0 of 2 on main1: allreduce 3 ok",
        "rank 1 of 2 on sub1: allreduce 3 ok",
    ):
        assert expected in out, f"{expected!r} not in:\n{run.stdout}\n{run.stderr}"
    session = next(line.split()[2] for line in run.stderr.splitlines() if "submitted" in line)
    with _api(stack) as api:
        shown = api.get(f"/v1/sessions/{session}").json()
    assert [k["node"] for k in shown["kernels"]] == netns_nodes
    assert f"multi-node {TIMES}2" in stack.cli("sessions", "show", session, check=True).stdout


ELSEWHERE = "198.51.100.9"  # stands for the internet: not a private range
PORT = 18081


def _group(api: httpx.Client, **scheduler: object) -> None:
    api.patch("/v1/resource-groups/pair", json={"scheduler": scheduler}).raise_for_status()


def _restore(stack: UpStack) -> None:
    """Group "pair" as the module's other tests expect it (PATCH merges: say each key)."""
    with _api(stack) as api:
        _group(api, egress="open", egress_allow=[], cluster_modes=["multi-node"])


def test_each_group_egress_holds_on_podman_nodes(stack: UpStack, netns_nodes: list[str]) -> None:
    """A session on a node of the pair probes the other node's private address and an
    address outside every private range, under each egress of its group (a multi-node
    session under no-private: the MPI test above)."""
    prefix = netns_nodes[0].split("-")[0]
    a, b = f"{prefix}-a", f"{prefix}-b"
    ip = ["ip", "-n"]
    subprocess.run([*ip, b, "addr", "add", f"{ELSEWHERE}/32", "dev", f"{prefix}b"], check=True)
    subprocess.run([*ip, a, "route", "replace", f"{ELSEWHERE}/32", "dev", f"{prefix}a"], check=True)
    private, public = f"10.231.0.2:{PORT}", f"{ELSEWHERE}:{PORT}"  # node b's: the LAN
    key = tomllib.loads(stack.config.read_text())["api_key"]

    def reached() -> set[str]:
        (results,) = _probe_as(stack, key, [private, public], {}).values()
        return answered(results)

    try:
        with serving([private, public], b), _api(stack) as api:
            # open: both answer, so what is refused below is the rules' doing
            _group(api, egress="open")
            assert reached() == {private, public}
            _group(api, egress="no-private", cluster_modes=["single-node", "multi-node"])
            nodes = api.get("/v1/nodes").json()["items"]
            assert all(
                n["egress"] == ["open", "no-private", "none"]
                for n in nodes
                if n["id"] in netns_nodes
            ), nodes
            assert reached() == {public}
            _group(api, egress="no-private", egress_allow=["10.231.0.2/32"])
            assert reached() == {private, public}
            # none: a batch session with nothing to publish gets no network at all
            _group(api, egress="none", egress_allow=["10.231.0.2/32"])
            (results,) = _probe_as(stack, key, [private, public], {}).values()
            assert results == {private: "Network is unreachable", public: "Network is unreachable"}
    finally:
        _restore(stack)


def test_another_tenant_reaches_nothing_of_the_node_from_any_session_mode(
    stack: UpStack, netns_nodes: list[str]
) -> None:
    """User B's batch, single-node and multi-node sessions probe what user A and the
    platform have on and around the nodes: a port published on node a's loopback (where
    A's replicas and apps are published), listeners on node a's and node b's LAN
    addresses (where a cluster's gateway, Redis or PostgreSQL would listen), under the
    group's default egress, no-private; then the one address egress_allow names."""
    prefix = netns_nodes[0].split("-")[0]
    a, b = f"{prefix}-a", f"{prefix}-b"
    published, lan_a, lan_b = "127.0.0.1:18090", "10.231.0.1:18091", "10.231.0.2:18092"
    # from a container, the node's loopback is 10.0.2.2 (slirp4netns), where it is let in
    targets = ["10.0.2.2:18090", published, lan_a, lan_b]
    try:
        with (
            serving([published, lan_a], a),
            serving([lan_b], b),
            _api(stack) as admin,
        ):
            assert admin.post("/v1/users", json={"name": "tenant-b"}).status_code == 201
            key = admin.post("/v1/users/tenant-b/keys", json={"name": "t"}).json()["key"]
            _group(
                admin,
                egress="no-private",
                egress_allow=[],
                cluster_modes=["single-node", "multi-node"],
            )
            modes: list[dict[str, object]] = [
                {},
                {"cluster_size": 2, "cluster_mode": "single-node"},
                {"cluster_size": 2, "cluster_mode": "multi-node"},
            ]
            for mode in modes:
                seen = _probe_as(stack, key, targets, mode)
                assert len(seen) == int(str(mode.get("cluster_size", 1))), (mode, seen)
                for container, results in seen.items():
                    assert answered(results) == set(), (mode, container, results)
            _group(admin, egress="no-private", egress_allow=["10.231.0.2/32"])
            (results,) = _probe_as(stack, key, targets, {}).values()
            assert answered(results) == {lan_b}, results
    finally:
        _restore(stack)


def _probe_as(
    stack: UpStack, key: str, targets: list[str], mode: dict[str, object]
) -> dict[str, dict[str, str]]:
    """Run PROBE as the user of *key* in group "pair"; each container's results."""
    with httpx.Client(
        base_url=f"http://127.0.0.1:{stack.port}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as api:
        created = api.post(
            "/v1/sessions",
            json={
                "command": ["python3", "-c", PROBE, *targets],
                "image": MPI,
                "resource_group": "pair",
                "resources": {"cpu": "0.5", "mem": "128m"},
                "stop_when": "all-done",
                **mode,
            },
        )
        assert created.status_code == 201, created.text
        session = created.json()["id"]
        ended = {"SUCCEEDED", "FAILED", "ERROR", "TERMINATED", "CANCELLED"}
        until_sync(
            lambda: api.get(f"/v1/sessions/{session}").json()["status"] in ended,
            timeout=90,
            interval=0.3,
            what=f"probe session {session} ({mode}) ended",
        )
        shown = api.get(f"/v1/sessions/{session}").json()
        text = api.get(f"/v1/sessions/{session}/logs").text
    assert shown["status"] == "SUCCEEDED", (shown["status"], shown.get("status_reason"), text)
    return parse_probes(text)
