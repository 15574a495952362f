"""Submit-time feasibility: what no node of a group could ever run is refused, naming the
field and the largest node; what merely does not fit *now* is accepted (it queues)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.domain.errors import Invalid
from gateway.domain.feasibility import Cluster, NodeShape, check_feasible
from plugins.resources import ResourceSlots

SMALL = NodeShape("podman", ResourceSlots.parse({"cpu": "4", "mem": "8g"}), images="required")
BIG_CPU = NodeShape("podman", ResourceSlots.parse({"cpu": "32", "mem": "4g"}), images="required")
GPU = NodeShape(
    "podman",
    ResourceSlots.parse({"cpu": "8", "mem": "16g", "cuda.shares": "2"}),
    quanta=(("cuda.shares", Decimal("0.1")),),
    images="required",
)
PROCESS = NodeShape("process", ResourceSlots.parse({"cpu": "2", "mem": "2g"}), images="ignored")


def slots(**raw: str) -> ResourceSlots:
    return ResourceSlots.parse({k.replace("_", "."): v for k, v in raw.items()})


@pytest.mark.parametrize(
    ("shapes", "request_", "image", "field", "words"),
    [
        pytest.param(
            [SMALL], slots(cpu="5"), "img", "resources.cpu", "the largest has 4", id="cpu"
        ),
        pytest.param([SMALL], slots(mem="9g"), "img", "resources.mem", "8GiB", id="mem"),
        pytest.param(
            [SMALL],
            slots(cuda_shares="0.5"),
            "img",
            "resources.cuda.shares",
            "no node",
            id="no-gpu",
        ),
        pytest.param(
            [GPU],
            slots(cuda_shares="0.15"),
            "img",
            "resources.cuda.shares",
            "quantum (0.1)",
            id="quantum",
        ),
        pytest.param(
            [GPU], slots(cuda_shares="2.5"), "img", "resources.cuda.shares", "has 2", id="shares"
        ),
        pytest.param(
            [SMALL, BIG_CPU],
            slots(cpu="16", mem="6g"),
            "img",
            "resources",
            "together",
            id="no-single-node",
        ),
        pytest.param([SMALL], slots(cpu="1"), None, "image", "need an image", id="no-image"),
        pytest.param([PROCESS], slots(cpu="1"), "img", "image", "cannot use an image", id="image"),
    ],
)
def test_what_no_node_could_ever_run_is_refused(
    shapes: list[NodeShape], request_: ResourceSlots, image: str | None, field: str, words: str
) -> None:
    with pytest.raises(Invalid) as caught:
        check_feasible("default", shapes, request_, image)
    assert caught.value.field == field
    assert words in str(caught.value)
    assert "'default'" in str(caught.value)


@pytest.mark.parametrize(
    ("shapes", "request_", "image"),
    [
        pytest.param([], slots(cpu="512", cuda_shares="0.15"), None, id="group-without-nodes"),
        pytest.param([SMALL, BIG_CPU], slots(cpu="32", mem="4g"), "img", id="largest-cpu"),
        pytest.param([GPU], slots(cuda_shares="0.3"), "img", id="multiple-of-quantum"),
        pytest.param([SMALL, PROCESS], slots(cpu="1"), None, id="mixed-without-image"),
        pytest.param([SMALL, PROCESS], slots(cpu="1"), "img", id="mixed-with-image"),
        pytest.param([PROCESS], slots(cpu="2", mem="2g"), None, id="process-exactly-full"),
    ],
)
def test_what_some_node_could_run_is_accepted(
    shapes: list[NodeShape], request_: ResourceSlots, image: str | None
) -> None:
    check_feasible("default", shapes, request_, image)


TWO_CPU = NodeShape("sim", ResourceSlots.parse({"cpu": "2", "mem": "8g"}), count=3, node="a")


@pytest.mark.parametrize(
    ("cluster", "fits"),
    [
        pytest.param(Cluster(2, "single-node"), True, id="single-node-fits-one-node"),
        pytest.param(Cluster(3, "single-node"), False, id="single-node-too-big-for-any"),
        pytest.param(Cluster(6, "multi-node"), True, id="multi-node-shares-nodes"),
        pytest.param(Cluster(7, "multi-node"), False, id="multi-node-more-than-the-group"),
        pytest.param(Cluster(3, "multi-node", distinct_nodes=True), True, id="distinct-3-of-3"),
        pytest.param(Cluster(4, "multi-node", distinct_nodes=True), False, id="distinct-4-of-3"),
    ],
)
def test_a_cluster_must_fit_whole_on_the_groups_nodes(cluster: Cluster, fits: bool) -> None:
    """Three nodes of 2 cpus; each container asks for 1 cpu."""
    request_ = slots(cpu="1", mem="1g")
    if fits:
        check_feasible("default", [TWO_CPU], request_, None, cluster)
        return
    with pytest.raises(Invalid) as caught:
        check_feasible("default", [TWO_CPU], request_, None, cluster)
    assert caught.value.field == "cluster_size"
    assert f"{cluster.size}" in str(caught.value)


def test_a_cluster_counts_only_nodes_that_could_hold_one_container() -> None:
    small = NodeShape("sim", ResourceSlots.parse({"cpu": "1", "mem": "8g"}), count=10, node="s")
    big = NodeShape("sim", ResourceSlots.parse({"cpu": "4", "mem": "8g"}), node="b")
    with pytest.raises(Invalid, match="could hold at most 2 of 3 containers"):
        check_feasible("default", [small, big], slots(cpu="2"), None, Cluster(3, "multi-node"))
