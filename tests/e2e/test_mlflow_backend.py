"""``mlflow run --backend jobgate``: a real MLflow project on a real stack, end to end.

One module-scoped world: a real tracking server (``mlflow server``, SQLite store, a
free loopback port), ``jobgate up`` on rootless Podman whose containers reach the host's
loopback (``JOBGATE_PODMAN_HOST_LOOPBACK``: the server is ``10.0.2.2:PORT`` from inside),
and the project in ``mlflow_project/`` (ElasticNet on its own iris.csv) run with
``localhost/jobgate-mlflow:latest``, the image its MLproject names. Each test is what a
user does with the ``mlflow`` CLI and then looks at in the tracking server and jobgate.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from needs import missing
from podman import PodmanClient
from up_harness import UpStack
from waiting import until_sync

from jobgate.localnet import free_port

# the module's stack and tracking server start inside the first test's budget
pytestmark = [pytest.mark.podman, pytest.mark.timeout(420)]

PROJECT = Path(__file__).parent / "mlflow_project"
IMAGE = "localhost/jobgate-mlflow:latest"
MLFLOW = str(Path(sys.executable).parent / "mlflow")


@dataclass
class World:
    stack: UpStack
    tracking_uri: str  # as this machine reaches it
    config: Path  # the --backend-config file
    tmp: Path

    def env(self) -> dict[str, str]:
        return self.stack.environ() | {"MLFLOW_TRACKING_URI": self.tracking_uri}

    def mlflow_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [MLFLOW, "run", str(PROJECT), "--backend", "jobgate"]
        argv += ["--backend-config", str(self.config), "--experiment-name", "iris", *args]
        return subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, timeout=240, cwd=self.tmp
        )

    def api(self, path: str, **params: Any) -> Any:
        """The tracking server's REST API."""
        response = httpx.get(
            f"{self.tracking_uri}/api/2.0/mlflow/{path}", params=params, timeout=60
        )
        response.raise_for_status()
        return response.json()

    def python(self, *lines: str) -> subprocess.CompletedProcess[str]:
        """A Python script of a user's, with PROJECT and CFG (the config file's path) set."""
        head = [
            "import json, time",
            "import mlflow",
            "from mlflow.tracking import MlflowClient",
            f"PROJECT, CFG = {str(PROJECT)!r}, {str(self.config)!r}",
        ]
        return subprocess.run(
            [sys.executable, "-c", "\n".join([*head, *lines])],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=240,
            cwd=self.tmp,
        )

    @staticmethod
    def run_id(output: str) -> str:
        """The run the backend reported in *output*."""
        return output.split("Run (ID '")[1].split("'")[0]

    def artifact(self, run_id: str, path: str) -> str:
        """An artifact's text; empty while it is not there."""
        url = f"{self.tracking_uri}/get-artifact"
        response = httpx.get(url, params={"run_id": run_id, "path": path}, timeout=60)
        return response.text if response.status_code == 200 else ""


def tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    def up() -> bool:
        assert proc.poll() is None, f"mlflow server exited:\n{log.read_text()[-3000:]}"
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    until_sync(
        up, timeout=timeout, interval=0.3, what=lambda: f"mlflow up:\n{log.read_text()[-3000:]}"
    )


def need_image(socket: str) -> None:
    with PodmanClient(base_url=socket) as client:
        if client.images.exists(IMAGE):
            return
    missing(f"no {IMAGE} (run scripts/build-test-images.sh mlflow)")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, podman_socket: str) -> Iterator[World]:
    need_image(podman_socket)
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = tmp / "mlflow-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db",
             "--artifacts-destination", str(tmp / "artifacts")],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True,
            env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # no huey pool
        )  # fmt: skip
    reachable = Path(tempfile.mkdtemp(prefix="jobgate-mlflow-", dir="/tmp"))
    reachable.chmod(0o755)  # the Podman user binds working-dir copies from here
    stack = UpStack(
        tmp,
        runtime="podman",
        env={
            "JOBGATE_PODMAN_SOCKET": podman_socket,
            "JOBGATE_PODMAN_HOST_LOOPBACK": "true",
            "JOBGATE_WORKDIR_ROOT": str(reachable / "workdirs"),
        },
    )
    try:
        stack.start(timeout=180)
        tracking_uri = f"http://127.0.0.1:{port}"
        wait_http(f"{tracking_uri}/health", server, log)
        config = tmp / "cfg.json"
        config.write_text(
            json.dumps(
                {
                    "resources": {"cpu": "1", "mem": "1g"},
                    "priority": 60,
                    "env": {"GREETING": "hello from cfg.json"},
                    "tracking_uri": f"http://10.0.2.2:{port}",
                }
            )
        )
        yield World(stack, tracking_uri, config, tmp)
    finally:
        stack.close()
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        shutil.rmtree(reachable, ignore_errors=True)


def test_mlflow_run_submits_a_session_whose_run_gets_params_metrics_tags_and_its_log(
    world: World,
) -> None:
    done = world.mlflow_run("-P", "alpha=0.05", "-P", "register=iris-enet")
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = world.run_id(done.stderr)  # `mlflow run` returned once the session was queued
    tag = tags(world.api("runs/get", run_id=run_id)["run"])
    assert tag["mlflow.project.backend"] == "jobgate"
    session_id = tag["jobgate.session_id"]
    assert (
        tag["jobgate.session_url"] == f"http://127.0.0.1:{world.stack.port}/sessions/{session_id}"
    )
    assert f"jobgate sessions logs {session_id} -f" in done.stderr

    # the watcher `mlflow run` left behind attaches the log when the session ends
    log = until_sync(
        lambda: world.artifact(run_id, "jobgate/session.log"),
        timeout=120,
        interval=0.5,
        what="log artifact",
    )
    assert "ElasticNet(alpha=0.05, l1_ratio=0.5): rmse" in log
    run = world.api("runs/get", run_id=run_id)["run"]
    assert run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params == {"alpha": "0.05", "l1_ratio": "0.5", "register": "iris-enet"}
    metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    assert set(metrics) == {"rmse", "mae", "r2"}
    assert 0 < metrics["rmse"] < 0.5
    assert metrics["r2"] > 0.6

    session = world.stack.cli_json("sessions", "show", session_id)
    assert (session["status"], session["exit_code"]) == ("SUCCEEDED", 0)
    assert session["image"] == IMAGE  # the MLproject's docker_env image: cfg.json names none
    assert session["priority"] == 60
    assert session["resources"]["cpu"] == "1"
    assert session["env"]["GREETING"] == "hello from cfg.json"
    assert session["env"]["MLFLOW_RUN_ID"] == run_id
    assert session["working_dir"].startswith("sha256:")
    assert session["command"][:2] == ["sh", "-c"]
    assert "--alpha 0.05 --l1-ratio 0.5 --register iris-enet" in session["command"][2]

    # the model the job logged and registered (through the tracking server it reached)
    model = world.api("registered-models/get", name="iris-enet")["registered_model"]
    assert model["latest_versions"][0]["run_id"] == run_id


def test_the_registered_model_served_as_an_endpoint_answers_predictions(world: World) -> None:
    """``endpoints create --mlflow-model``: the model the first test registered, fetched
    from the tracking server by the replica when it starts, answers through the URL."""
    inside = json.loads(world.config.read_text())["tracking_uri"]  # 10.0.2.2:PORT
    bad = world.stack.cli("endpoints", "create", "iris", "--mlflow-model", "models:/iris-enet")
    assert bad.returncode != 0
    assert bad.stderr.startswith("error: --mlflow-model takes models:/NAME/VERSION")
    made = world.stack.cli(
        "endpoints", "create", "iris", "--mlflow-model", "models:/iris-enet/1",
        "--wait", "--timeout", "150", "--output", "json",
        env={"MLFLOW_TRACKING_URI": inside}, timeout=180, check=True,
    )  # fmt: skip
    endpoint = json.loads(made.stdout)
    current = endpoint["current"]
    assert (current["image"], current["port"]) == ("localhost/jobgate-model-server:latest", 8000)
    assert current["probe"]["path"] == "/ping"
    assert current["env"] == {
        "MLFLOW_MODEL_URI": "models:/iris-enet/1",
        "MLFLOW_TRACKING_URI": inside,
    }
    token = world.stack.cli("endpoints", "tokens", "create", "iris", check=True)
    key = token.stdout.strip().splitlines()[-1]
    answer = httpx.post(
        endpoint["url"] + "invocations",
        json={"inputs": [[5.1, 3.5, 1.4]]},  # the model's three features (its signature)
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    (predicted,) = answer.json()["predictions"]
    assert -0.2 < predicted < 0.7  # a setosa's petal width is about 0.2
    assert httpx.post(endpoint["url"] + "invocations", json={}, timeout=30).status_code == 401
    world.stack.cli("endpoints", "rm", "iris", check=True)


def test_a_failing_entry_point_waited_on_gives_a_failed_run_with_the_reason_in_its_log(
    world: World,
) -> None:
    done = world.python(
        "from mlflow.exceptions import ExecutionException",
        "try:",
        "    mlflow.projects.run(PROJECT, 'fail', backend='jobgate', backend_config=CFG,",
        "                        experiment_name='iris', synchronous=True)",
        "except ExecutionException as exc:",
        "    print('raised:', exc)",
    )
    assert "raised: Run (ID" in done.stdout, done.stderr[-3000:]
    assert "training data is missing" in done.stderr  # wait() echoed the job's stderr
    run_id = world.run_id(done.stderr)
    run = world.api("runs/get", run_id=run_id)["run"]
    assert run["info"]["status"] == "FAILED"
    session = world.stack.cli_json("sessions", "show", tags(run)["jobgate.session_id"])
    assert (session["status"], session["exit_code"]) == ("FAILED", 1)
    log = world.artifact(run_id, "jobgate/session.log")  # attached by wait() before it returned
    assert "no such file data/train.parquet" in log


def test_cancel_terminates_the_session_and_the_run_ends_killed(world: World) -> None:
    done = world.python(
        "run = mlflow.projects.run(PROJECT, 'sleep', backend='jobgate', backend_config=CFG,",
        "                          experiment_name='iris', synchronous=False)",
        "deadline = time.monotonic() + 120",
        "while 'started' not in MlflowClient().get_run(run.run_id).data.metrics:",
        "    assert time.monotonic() < deadline, 'never started'",
        "    time.sleep(0.3)",
        "before = run.get_status()",
        "run.cancel()",
        "print(json.dumps({'run_id': run.run_id, 'before': before, 'after': run.get_status()}))",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert (seen["before"], seen["after"]) == ("RUNNING", "KILLED")
    run = world.api("runs/get", run_id=seen["run_id"])["run"]
    assert run["info"]["status"] == "KILLED"
    session = world.stack.cli_json("sessions", "show", tags(run)["jobgate.session_id"])
    assert session["status"] == "TERMINATED"
    assert "sleeping" in world.artifact(seen["run_id"], "jobgate/session.log")
