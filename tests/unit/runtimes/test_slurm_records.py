"""Parsing what Slurm 22.05 prints (captured from scripts/setup-slurm.sh's cluster)."""

from __future__ import annotations

from pathlib import Path

from plugins.runtimes.slurm.records import (
    Gres,
    parse_gres,
    parse_job,
    parse_jobcomp,
    parse_node,
    parse_record,
    parse_squeue,
)

OUTPUT = Path(__file__).parent / "slurm_output"


def read(name: str) -> str:
    return (OUTPUT / name).read_text()


def test_a_value_runs_until_the_next_key_even_with_spaces() -> None:
    record = parse_record("NodeName=n1 OS=Linux 6.1 #1 SMP @0  RealMemory=1024 Reason=x [root@t]")
    assert record == {
        "NodeName": "n1",
        "OS": "Linux 6.1 #1 SMP @0",
        "RealMemory": "1024",
        "Reason": "x [root@t]",
    }


def test_nodes_give_cpus_memory_gpus_and_state() -> None:
    nodes = [parse_node(line) for line in read("nodes.txt").splitlines()]
    assert [n.name for n in nodes] == ["node1", "node2"]
    node1 = nodes[0]
    assert (node1.cpus, node1.real_memory_mb, node1.address, node1.arch) == (
        2,
        1024,
        "10.250.0.11",
        "x86_64",
    )
    assert node1.gres == [Gres("gpu", "tesla", 2)]
    assert node1.partitions == ["debug"]
    assert node1.features == []
    assert node1.unavailable is None


def test_a_drained_node_says_why_it_is_unavailable() -> None:
    node = parse_node(read("node_drained.txt"))
    assert node.state == "IDLE+DRAIN"
    assert node.unavailable is not None
    assert node.unavailable.startswith("Slurm node node2 is IDLE+DRAIN (disk check")


def test_a_not_responding_node_is_unavailable() -> None:
    line = read("nodes.txt").splitlines()[0].replace("State=IDLE", "State=IDLE*")
    assert "NOT_RESPONDING" not in parse_node(line).state
    assert parse_node(line).unavailable == "Slurm node node1 is IDLE*"


def test_gres_forms() -> None:
    assert parse_gres("(null)") == []
    assert parse_gres("gpu:2") == [Gres("gpu", "", 2)]
    assert parse_gres("gpu:a100:4(S:0-1),mps:100") == [Gres("gpu", "a100", 4), Gres("mps", "", 100)]
    assert parse_gres("gpu:tesla:2") == [Gres("gpu", "tesla", 2)]


def test_a_failed_job_keeps_its_exit_code() -> None:
    job = parse_job(read("failed.txt"))
    assert (job.job_id, job.name, job.state) == ("37", "jobgate-k1", "FAILED")
    assert (job.exit_code, job.exit_signal, job.active) == (3, 0, False)
    assert job.nodes == "node1"
    assert job.end_time is not None
    assert job.start_time is not None
    assert job.end_time - job.start_time == 3


def test_a_job_killed_by_sigterm_says_so() -> None:
    job = parse_job(read("termed.txt"))
    assert (job.state, job.exit_code, job.exit_signal) == ("FAILED", 0, 15)


def test_a_pending_job_waits_for_resources() -> None:
    job = parse_job(read("pending.txt"))
    assert (job.state, job.reason, job.active, job.waiting) == ("PENDING", "Resources", True, True)
    assert job.nodes == ""
    assert job.start_time is None


def test_a_cancelled_pending_job() -> None:
    job = parse_job(read("cancelled.txt"))
    assert (job.state, job.exit_code, job.exit_signal, job.active) == ("CANCELLED", 0, 0, False)


def test_squeue_lines() -> None:
    entries = {e.job_id: e for e in parse_squeue(read("squeue.txt"))}
    assert set(entries) == {"37", "38", "39", "40"}
    running = entries["39"]
    assert (running.name, running.state, running.nodes, running.comment) == (
        "jobgate-hold",
        "RUNNING",
        "node2",
        "jobgate/inst/s2",
    )
    pending = entries["40"]
    assert (pending.state, pending.nodes, pending.requested_nodes, pending.reason) == (
        "PENDING",
        "",
        "node2",
        "Resources",
    )
    assert pending.waiting
    assert not running.waiting
    assert entries["38"].comment == ""  # (null)


def test_the_jobcomp_file_gives_the_last_state_of_an_aged_out_job() -> None:
    text = read("jobcomp.txt")
    job = parse_jobcomp(text, "37")
    assert job is not None
    assert (job.name, job.state, job.exit_code, job.exit_signal) == ("jobgate-k1", "FAILED", 3, 0)
    assert parse_jobcomp(text, "3") is None  # "JobId=37" is not job 3
    reused = text + text.splitlines()[0].replace("JobState=FAILED", "JobState=COMPLETED") + "\n"
    assert parse_jobcomp(reused, "37").state == "COMPLETED"  # type: ignore[union-attr]
