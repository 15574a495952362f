"""An interactive session's apps get the app secret in their environment, never on a
command line (``/proc/<pid>/cmdline`` is readable by every user of the node)."""

from __future__ import annotations

from pathlib import Path

from sim_agent import sim_agent

from contract.apps import with_defaults
from contract.messages import StartKernel
from workers.apps import start_command

SECRET = "ab" * 32


def _start(secret: str) -> StartKernel:
    return StartKernel(
        kernel_id="k1",
        session_id="s1",
        node_id="n1",
        session_type="interactive",
        command=[],
        env={"JUPYTER_TOKEN": "", "A": "1"},  # the session's own env cannot switch it off
        app_secret=secret,
    )


def test_the_secret_is_in_the_environment_and_not_in_the_command(tmp_path: Path) -> None:
    agent, _ = sim_agent(tmp_path)
    env = agent.spec(_start(SECRET)).env
    assert (env["JOBGATE_APP_SECRET"], env["JUPYTER_TOKEN"], env["HASHED_PASSWORD"]) == (
        SECRET,
        SECRET,
        SECRET,
    )
    assert env["A"] == "1"
    apps = [with_defaults("jupyter", 8888), with_defaults("code-server", 8080)]
    command = " ".join(start_command("s1", apps) or [])
    assert "--auth password" in command  # code-server checks its cookie against the secret
    assert "IdentityProvider.token" not in command  # Jupyter reads JUPYTER_TOKEN
    assert SECRET not in command


def test_without_a_secret_the_environment_is_the_sessions(tmp_path: Path) -> None:
    agent, _ = sim_agent(tmp_path)
    env = agent.spec(_start("")).env
    assert "JOBGATE_APP_SECRET" not in env
    assert env["JUPYTER_TOKEN"] == ""
