"""The CLI as a person meets it in the first hour, against a real `jobgate up`:
following a log never stops the job, `run` says what it does, admin commands change only
what they are given, duplicate names are refused, and no command ends in a traceback.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator

import pytest
from cli_tree import leaves, run_cli
from up_harness import UpStack


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    stack = UpStack(tmp_path_factory.mktemp("cli"))
    stack.start()
    try:
        yield stack
    finally:
        stack.close()


def test_ctrl_c_on_logs_follow_detaches_and_the_session_keeps_running(up: UpStack) -> None:
    started = up.cli(
        "run", "-d", "--name", "ticker", "--", "sh", "-c", "echo tick; sleep 120", check=True
    )
    session_id = started.stdout.strip()
    up.wait_status(session_id, {"RUNNING"})
    with up.popen("sessions", "logs", "ticker", "-f") as follower:
        assert follower.stdout is not None
        assert follower.stderr is not None
        assert follower.stdout.readline() == "tick\n"
        follower.send_signal(signal.SIGINT)
        code = follower.wait(30)
        said = follower.stderr.read()
    assert code == 130
    assert "Traceback" not in said
    assert f"session {session_id[:8]} keeps running" in said
    shown = up.cli_json("sessions", "show", "ticker")
    assert shown["id"] == session_id
    assert shown["status"] == "RUNNING"
    assert "TERMINATING" not in [h["to_status"] for h in shown["history"]]

    # the name is taken while it lives: one line naming the live session
    again = up.cli("run", "-d", "--name", "ticker", "--", "true")
    assert again.returncode == 1
    assert again.stderr.startswith("error: the name 'ticker' is taken by live session ")
    assert session_id in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert len(up.cli_json("sessions", "ls")) == 1

    # only `run` in the foreground cancels on Ctrl-C, and it says so
    with up.popen("run", "--", "sh", "-c", "echo started; sleep 60") as run:
        assert run.stdout is not None
        assert run.stderr is not None
        assert run.stdout.readline() == "started\n"
        run.send_signal(signal.SIGINT)
        assert run.wait(30) == 143
        said = run.stderr.read()
    assert "Ctrl-C: cancelling session" in said
    assert "jobgate: RUNNING after " in said  # its output says it runs, event or not
    # "took" when the stop overtook the worker's RUNNING event (no start time recorded)
    summary = r"^jobgate: TERMINATED, exit code 143, (ran|took) \S+, session \w{8}$"
    assert re.search(summary, said, re.M), said

    up.cli("sessions", "rm", "ticker", check=True)
    up.wait_status(session_id, {"TERMINATED"})
    reused = up.cli("run", "-d", "--name", "ticker", "--", "true", check=True).stdout.strip()
    assert up.cli_json("sessions", "show", "ticker")["id"] == reused  # the newest has it


def test_run_keeps_its_notes_on_stderr_and_ends_with_a_summary(up: UpStack) -> None:
    done = up.cli("run", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert done.returncode == 3
    assert done.stdout == "out\n"  # the job's stdout, and nothing else
    lines = done.stderr.splitlines()
    assert lines[0].startswith("jobgate: session ")
    assert lines[0].endswith(" submitted")
    assert any(line.startswith("jobgate: RUNNING after ") for line in lines)
    assert "err" in lines
    assert re.fullmatch(r"jobgate: FAILED, exit code 3, ran \S+, session \w{8}", lines[-1])
    assert "\r" not in done.stderr  # not a terminal: plain lines, no live line

    as_json = up.cli("run", "-o", "json", "--", "sh", "-c", "echo out")
    assert as_json.returncode == 0
    session = json.loads(as_json.stdout)  # stdout is only the JSON
    assert (session["status"], session["exit_code"]) == ("SUCCEEDED", 0)
    assert "out" in as_json.stderr.splitlines()

    shown = up.cli("sessions", "show", session["id"][:8], check=True).stdout
    assert re.search(r"^command +sh -c 'echo out'$", shown, re.M), shown
    assert re.search(r"created\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", shown)
    assert "mem=512MiB" in shown
    assert isinstance(up.cli_json("sessions", "ls", "--status", "succeeded"), list)


def test_run_count_makes_an_array_waits_for_all_and_exits_with_the_highest_code(
    up: UpStack,
) -> None:
    script = "echo i=$JOBGATE_ARRAY_INDEX of $JOBGATE_ARRAY_SIZE; exit $JOBGATE_ARRAY_INDEX"
    done = up.cli("run", "--count", "3", "--name", "sweep", "--", "sh", "-c", script)
    assert done.returncode == 2, done.stderr  # Slurm's rule: the highest exit code
    lines = done.stderr.splitlines()
    assert re.fullmatch(r"jobgate: array \S+ of 3 sessions submitted", lines[0])
    array_id = lines[0].split()[2]
    assert re.fullmatch(rf"jobgate: array {array_id}: 1 of 3 succeeded, exit code 2", lines[-1]), (
        lines
    )
    listed = up.cli_json("sessions", "ls", "--array", array_id)
    by_index = {s["array_index"]: s for s in listed}
    assert sorted(by_index) == [0, 1, 2]
    assert [by_index[i]["name"] for i in range(3)] == ["sweep-0", "sweep-1", "sweep-2"]
    assert [by_index[i]["exit_code"] for i in range(3)] == [0, 1, 2]
    # the index reached each job (process runtime) and show names the array
    logs = up.cli("sessions", "logs", "sweep-1", check=True).stdout
    assert logs == "i=1 of 3\n"
    shown = up.cli("sessions", "show", "sweep-2", check=True).stdout
    assert re.search(rf"^array +{array_id} \[2 of 0\.\.2\]$", shown, re.M), shown

    # --detach prints the array id; over the operator's limit: one line, exit 1
    detached = up.cli("run", "-d", "--count", "2", "--", "true", check=True).stdout.strip()
    assert len(up.cli_json("sessions", "ls", "--array", detached)) == 2
    too_many = up.cli("run", "-d", "--count", "1000000", "--", "true")
    assert too_many.returncode == 1
    assert too_many.stderr.startswith("error: ")
    assert "count" in too_many.stderr
    assert len(too_many.stderr.strip().splitlines()) == 1


def test_admin_commands_change_only_what_is_given(up: UpStack) -> None:
    up.cli("images", "add", "example/app:1", "--service-ports", "web:http:8080", check=True)
    removed = up.cli("images", "rm", "example/app:1")
    assert removed.returncode == 0, removed.stderr
    assert "Traceback" not in removed.stderr
    assert up.cli_json("images", "ls") == []

    up.cli("admin", "policies", "set", "user", "*", "--max-sessions", "5", check=True)
    policy = up.cli_json("admin", "policies", "set", "user", "*", "--max-pending", "3")
    assert (policy["max_sessions"], policy["max_pending"]) == (5, 3)
    shown = up.cli("admin", "policies", "set", "user", "*", "--max-slot", "mem=8g", check=True)
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in shown.stdout.splitlines()}
    assert (rows["max sessions"], rows["max pending"]) == ("5", "3")
    assert "mem=8GiB" in shown.stdout
    policy = up.cli_json("admin", "policies", "set", "user", "*", "--unset", "max-sessions")
    assert (policy["max_sessions"], policy["max_pending"]) == (None, 3)
    removed = up.cli("admin", "policies", "rm", "user", "*")
    assert removed.returncode == 0, removed.stderr
    assert "Traceback" not in removed.stderr
    assert up.cli_json("admin", "policies", "ls") == []

    up.cli("admin", "groups", "set", "gpu", "--config", '{"sequencer": "drf"}', check=True)
    group = up.cli_json("admin", "groups", "set", "gpu", "--description", "GPU boxes")
    assert group["scheduler"] == {"sequencer": "drf"}
    assert group["description"] == "GPU boxes"

    bad = up.cli("sessions", "ls", "--type", "foo")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: Invalid value for '--type'")
    assert "batch" in bad.stderr
    assert "interactive" in bad.stderr


#: client commands whose argument is a file they write, not something to find
WRITES_A_FILE = {"admin config export"}
#: with only its arguments it has nothing to ask the server: a usage error (code 2)
NEEDS_AN_OPTION = {"endpoints scale"}


def test_no_command_ends_in_a_traceback_with_unknown_ids(
    up: UpStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBGATE_CONFIG", str(up.config))
    for key in [k for k in os.environ if k.startswith("JOBGATE_") and k != "JOBGATE_CONFIG"]:
        monkeypatch.delenv(key)
    bad = "No Such!"
    monkeypatch.chdir(up.tmp)  # `config export` takes a path and writes there: that is fine
    for leaf in leaves():
        if not leaf.is_client or leaf.name in WRITES_A_FILE:
            continue
        args = leaf.required(bad)
        result = run_cli(capsys, *args)
        assert "Traceback" not in result.out + result.err, (args, result)
        if len(args) > len(leaf.path):  # it was given something to find or to create
            usage_error = leaf.name in NEEDS_AN_OPTION
            assert result.code == (2 if usage_error else 1), (args, result)
            result.one_line_error()
        elif result.code != 0:
            result.one_line_error()
