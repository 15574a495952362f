"""The MLflow backend's pure parts: the backend config and the status mapping.

The whole path (a real tracking server, rootless Podman) is tests/e2e/test_mlflow_backend.py.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from typing import Any

import pytest
from mlflow.entities import RunStatus
from mlflow.exceptions import ExecutionException
from mlflow.projects.utils import PROJECT_ENV_MANAGER, PROJECT_SYNCHRONOUS

from jobgate.mlflow_backend import (
    RUN_STATUS,
    BackendConfig,
    JobgateBackend,
    _session_body,
    run_status,
)


def test_mlflow_finds_the_backend_by_its_entry_point() -> None:
    (found,) = entry_points(group="mlflow.project_backend", name="jobgate")
    assert found.load() is JobgateBackend


@pytest.mark.parametrize(
    ("session", "run"),
    [
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "SCHEDULED"),
        ("PREPARING", "SCHEDULED"),
        ("RUNNING", "RUNNING"),
        ("TERMINATING", "RUNNING"),
        ("SUCCEEDED", "FINISHED"),
        ("FAILED", "FAILED"),
        ("ERROR", "FAILED"),  # the platform could not run it (image pull error, ...)
        ("TERMINATED", "KILLED"),
        ("CANCELLED", "KILLED"),
    ],
)
def test_every_session_status_maps_to_an_mlflow_run_status(session: str, run: str) -> None:
    assert run_status(session) == run
    RunStatus.from_string(run)  # a real MLflow status name


def test_the_table_covers_every_session_status() -> None:
    from gateway.domain.status import SessionStatus

    assert set(RUN_STATUS) == {s.value for s in SessionStatus}


def test_a_full_config_becomes_the_session_request() -> None:
    config = BackendConfig.parse(
        {
            "image": "localhost/jobgate-mlflow:latest",
            "resources": {"cpu": 2, "cuda.shares": 0.5},
            "resource_group": "gpu",
            "priority": 70,
            "project": "vision",
            "env": {"EPOCHS": 3},
            PROJECT_ENV_MANAGER: None,  # MLflow's own keys are ignored
            PROJECT_SYNCHRONOUS: False,
        }
    )
    body = _session_body(
        config, "ignored/project-image:1", "python t.py --a 1", "sha256:ab", "f" * 32
    )
    assert body == {
        "type": "batch",
        "command": ["sh", "-c", "python t.py --a 1"],
        "resources": {"cpu": "2", "cuda.shares": "0.5"},
        "working_dir": "sha256:ab",
        "name": "mlflow-ffffffffffff",
        "image": "localhost/jobgate-mlflow:latest",  # the config wins over the MLproject's
        "resource_group": "gpu",
        "priority": 70,
        "project": "vision",
    }
    assert config.env == {"EPOCHS": "3"}


def test_without_an_image_the_mlprojects_docker_image_is_used() -> None:
    body = _session_body(
        BackendConfig.parse({}), "example/train:2", "python t.py", "sha256:ab", "0" * 32
    )
    assert body["image"] == "example/train:2"
    assert "priority" not in body


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"gpus": 1}, "unknown key(s) gpus"),
        ({"resources": ["cpu=1"]}, "resources must be an object"),
        ({"env": "A=1"}, "env must be an object"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": True}, "priority must be an integer"),
        ({"image": 3}, "image must be a string"),
        ({"watch": "yes"}, "watch must be true or false"),
    ],
)
def test_a_bad_config_is_refused_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ExecutionException, match=re.escape(message)):
        BackendConfig.parse(raw)
