"""docs/ci.md's pipelines run as written: the GitHub Actions workflow's and the GitLab
CI job's shell steps (after the install, which this checkout already is), with the
variables those runners set, against a `jobgate up`, configured only by JOBGATE_URL and
JOBGATE_API_KEY. The step's exit code is the job's; its output is in the CI log; the
JSON summary feeds the next step; a re-run of the same attempt gets the same session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from up_harness import UpStack

ROOT = Path(__file__).resolve().parents[2]
TRAIN = """\
import os, sys
for epoch in (1, 2):
    print(f"epoch {epoch} loss {1 / epoch:.2f} sha {os.environ['GIT_SHA']}", flush=True)
sys.exit(EXIT)
"""


def pipeline(kind: str) -> dict[str, Any]:
    text = (ROOT / "docs" / "ci.md").read_text()
    found = re.search(rf"<!-- ci-test: {kind} -->\s*```yaml\n(.*?)```", text, re.S)
    assert found, f"docs/ci.md has no {kind} pipeline"
    data: dict[str, Any] = yaml.safe_load(found.group(1))
    return data


def shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # as the runners do: bash, stop at the first failing command
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def github_steps(workflow: dict[str, Any], cwd: Path, env: dict[str, str]) -> list[Any]:
    """Each `run` step in order; after a failure only `if: always()` steps run."""
    results: list[Any] = []
    failed = False
    for step in workflow["jobs"]["train"]["steps"]:
        script = step.get("run")
        if script is None or script.startswith("pip install"):
            continue
        if failed and "always()" not in str(step.get("if", "")):
            continue
        result = shell(script, cwd, env)
        results.append(result)
        failed = failed or result.returncode != 0
    return results


def test_the_ci_pipelines_of_the_docs_run_as_written(up: UpStack, tmp_path: Path) -> None:
    profile = tomllib.loads(up.config.read_text())
    base = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env = base | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "JOBGATE_CONFIG": str(tmp_path / "no-profile.toml"),  # the variables only
        "JOBGATE_URL": profile["url"],
        "JOBGATE_API_KEY": profile["api_key"],
        "NO_COLOR": "1",
    }
    repo = tmp_path / "repo"
    repo.mkdir()
    workflow = pipeline("github")
    assert "jobgate run --wait" in json.dumps(workflow)

    runs: dict[str, list[Any]] = {}
    for run_id, code in (("101", 0), ("102", 3), ("101", 0)):
        (repo / "train.py").write_text(TRAIN.replace("EXIT", str(code)))
        summary = tmp_path / f"summary-{run_id}.md"
        github = env | {
            "GITHUB_RUN_ID": run_id,
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_SHA": "0d1a26e67d8f",
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        steps = github_steps(workflow, repo, github)
        train, summarize = steps
        assert train.returncode == code, train.stderr
        assert summarize.returncode == 0, summarize.stderr
        session = json.loads((repo / "session.json").read_text())
        status = "SUCCEEDED" if code == 0 else "FAILED"
        assert session["status"] == status
        assert session["exit_code"] == code
        assert f"session {session['id']}: {status}, exit code {code}" in summary.read_text()
        runs.setdefault(run_id, []).append(session["id"])
        if len(runs[run_id]) == 1:  # the job's output is in the CI log (stderr with -o json)
            assert "epoch 2 loss 0.50 sha 0d1a26e67d8f" in train.stderr
            assert f"jobgate: {status}, exit code {code}" in train.stderr
    # the same run attempt again: the session it started, not a second one
    assert runs["101"][0] == runs["101"][1]
    assert runs["101"][0] != runs["102"][0]

    gitlab = pipeline("gitlab")["train"]
    assert gitlab["before_script"] == ["pip install jobgate"]
    (repo / "train.py").write_text(TRAIN.replace("EXIT", "0"))
    ci = env | {"CI_PIPELINE_ID": "7", "CI_JOB_ID": "4242", "CI_COMMIT_SHA": "da15608"}
    for line in gitlab["script"]:
        result = shell(line, repo, ci)
        assert result.returncode == 0, result.stderr
        assert "epoch 1 loss 1.00 sha da15608" in result.stderr
    (after,) = gitlab["after_script"]
    result = shell(after, repo, ci)
    assert result.returncode == 0, result.stderr
    session_id, status, code_text = result.stdout.split()
    assert (status, code_text) == ("SUCCEEDED", "0")
    shown = up.cli_json("sessions", "show", session_id)
    assert shown["name"] == "train-7-4242"
    assert shown["env"]["GIT_SHA"] == "da15608"

    # `templates run --wait` ends the same way (`jobgate run`'s code): the job's exit code
    script = 'exit "$JOBGATE_PARAM_CODE"'
    up.cli("templates", "create", "check", "--param", "code", "--", "sh", "-c", script, check=True)
    result = up.cli("templates", "run", "check", "-p", "code=3", "--wait", "-o", "json")
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["exit_code"] == 3
    assert "jobgate: FAILED, exit code 3" in result.stderr
