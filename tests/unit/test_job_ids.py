"""Job ids name their node: a node's own Redis user (contract/acl.py) reaches only them."""

from __future__ import annotations

from arq import constants

from contract.acl import (
    ARQ_ABORT_SET,
    ARQ_HEALTH_SUFFIX,
    ARQ_JOB_PREFIXES,
    node_acl_rules,
    node_redis_password,
)
from contract.keys import (
    event_job_id,
    event_job_node,
    is_events_job,
    node_queue,
    queued_job_id,
    sim_host_queue,
)
from plumbing.redis_login import with_login


def test_a_node_queue_job_names_its_node_and_other_queues_keep_the_id() -> None:
    assert queued_job_id(node_queue("gpu-1.a"), "start:k1") == "n:gpu-1.a:start:k1"
    assert queued_job_id(sim_host_queue("sim"), "start:k1") == "start:k1"
    assert queued_job_id("jobgate:queue:scheduler", "schedule:default") == "schedule:default"


def test_an_events_job_names_its_node_and_the_gateway_reads_it_back() -> None:
    job = event_job_id("gpu-1.a", "abc")
    assert job == "e:gpu-1.a:abc"
    assert event_job_node(job) == "gpu-1.a"
    assert event_job_node(event_job_id(None, "abc")) is None  # a sim host's: no one node
    assert event_job_node("e:nocolon") is None


def test_the_rules_reach_the_node_s_own_keys_and_add_to_the_events_queue_only() -> None:
    rules = node_acl_rules("n1", "d" * 64)
    assert rules[:3] == ["reset", "on", "#" + "d" * 64]  # replaces whatever was there
    keys = {r for r in rules if r.startswith("~")}
    assert "~jobgate:queue:node:n1" in keys
    assert "~arq:job:n:n1:*" in keys
    assert "~arq:job:e:n1:*" in keys
    # every pattern with a wildcard is under the node's own name
    assert all(":n1:" in k for k in keys if "*" in k)
    assert "(+zadd ~jobgate:queue:events)" in rules
    assert {"-@dangerous", "-scan", "-randomkey"} <= set(rules)


def test_the_password_is_the_credential_s_and_the_node_s() -> None:
    one = node_redis_password("n1", "jgnc_a")
    assert one == node_redis_password("n1", "jgnc_a")
    assert len({one, node_redis_password("n2", "jgnc_a"), node_redis_password("n1", "jgnc_b")}) == 3
    assert "jgnc_a" not in one


def test_the_login_replaces_the_url_s_own() -> None:
    assert with_login("redis://:old@redis:6379/0", "u", "p@ss") == "redis://u:p%40ss@redis:6379/0"
    assert with_login("redis://redis:6379/0", "u", "p") == "redis://u:p@redis:6379/0"
    assert with_login("unix:///run/r.sock?db=1", "u", "p") == "unix://u:p@/run/r.sock?db=1"


def test_the_rules_name_arq_s_own_keys() -> None:
    assert (
        constants.job_key_prefix,
        constants.in_progress_key_prefix,
        constants.retry_key_prefix,
        constants.result_key_prefix,
    ) == ARQ_JOB_PREFIXES
    assert constants.abort_jobs_ss == ARQ_ABORT_SET
    assert constants.health_check_key_suffix == ARQ_HEALTH_SUFFIX


def test_the_consumer_takes_only_events_jobs_and_reads_the_writer_from_the_first_field() -> None:
    assert is_events_job(event_job_id("n1", "abc"))
    assert is_events_job(event_job_id(None, "abc"))
    assert not is_events_job(queued_job_id(node_queue("n1"), "start:k"))  # a node's own
    assert not is_events_job("schedule:default")
    assert event_job_node("e:n1:x:y") == "n1"  # node ids hold no ":"
    assert event_job_node("e::x") is None
