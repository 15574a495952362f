"""MLflow projects on jobgate: ``mlflow run URI --backend jobgate --backend-config cfg.json``.

A client of the REST API, like the CLI (the ``jobgate[mlflow]`` extra registers it in
MLflow's entry-point group ``mlflow.project_backend``)::

    mlflow run URI -P alpha=0.5 --backend jobgate --backend-config cfg.json
      fetch + validate (MLflow's own: a local dir as is, a git URI cloned HERE, on the client)
      entry point command, parameters quoted by MLflow        sh -c "python train.py --alpha 0.5"
      project dir ─ working-dir upload (jobgate.workdir) ──▶ PUT /v1/blobs/sha256:… (if absent)
      MLflow run created (params logged) ────────────────▶ tracking server
      POST /v1/sessions {batch, image, resources, env: MLFLOW_TRACKING_URI, MLFLOW_RUN_ID,
                         MLFLOW_EXPERIMENT_ID, working_dir}   Idempotency-Key: the run id
      run tagged jobgate.session_id, jobgate.session_url
      ◀── JobgateSubmittedRun at once (+ a watcher process when MLflow will not wait, below)
    wait()       follows the session's log stream (the job's output printed here) to its end;
                 then attaches the session's log as artifact jobgate/session.log and marks the
                 run FINISHED / FAILED / KILLED unless the job already ended it; True iff exit 0
    get_status() GET /v1/sessions/{id}, mapped by RUN_STATUS
    cancel()     DELETE /v1/sessions/{id}, waits until the session ended (TERMINATED or
                 CANCELLED); the run ends KILLED, with the log attached

**Who attaches the log and ends the run.** ``wait()``, ``cancel()`` or a ``get_status()``
that finds the session ended, whichever comes first in this process. The ``mlflow run``
command never waits for a plugin backend (MLflow runs only ``local`` and ``kubernetes``
synchronously): it returns as soon as the session is submitted. So when MLflow says the
run is asynchronous, ``run()`` also starts a *watcher*, a detached ``python -m
jobgate.mlflow_backend watch SESSION RUN`` on this machine (its own process session, so it
outlives ``mlflow run``; the key reaches it in its environment, never its argv; its own
log is ``$TMPDIR/jobgate-mlflow-watch-SESSION.log``), which does ``wait()`` quietly. If
the watcher dies too (the machine is switched off), the log stays in jobgate (``jobgate
sessions logs ID``, linked by the run's ``jobgate.session_url`` tag) and the run's status
is whatever the job itself wrote (``mlflow.start_run()`` ends it FINISHED or FAILED).
``"watch": false`` in the backend config turns the watcher off.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import RunStatus
from mlflow.exceptions import ExecutionException
from mlflow.projects.backend.abstract_backend import AbstractBackend
from mlflow.projects.submitted_run import SubmittedRun
from mlflow.projects.utils import (
    MLFLOW_LOCAL_BACKEND_RUN_ID_CONFIG,
    PROJECT_BUILD_IMAGE,
    PROJECT_DOCKER_ARGS,
    PROJECT_DOCKER_AUTH,
    PROJECT_ENV_MANAGER,
    PROJECT_STORAGE_DIR,
    PROJECT_SYNCHRONOUS,
    fetch_and_validate_project,
    get_or_create_run,
    load_project,
)
from mlflow.tracking import MlflowClient

from jobgate.client import ApiError, Client, segment
from jobgate.profile import Profile
from jobgate.workdir import upload

__all__ = [
    "LOG_ARTIFACT",
    "RUN_STATUS",
    "BackendConfig",
    "JobgateBackend",
    "JobgateSubmittedRun",
    "run_status",
]

# under MLflow's own logger, so these lines show (and can be silenced) like MLflow's
_logger = logging.getLogger("mlflow.projects.jobgate")
UNREACHABLE_GIVE_UP_S = 600.0

LOG_ARTIFACT = "jobgate/session.log"
TAG_SESSION_ID = "jobgate.session_id"
TAG_SESSION_URL = "jobgate.session_url"

#: jobgate's session status -> MLflow's RunStatus name
RUN_STATUS: Mapping[str, str] = {
    "PENDING": "SCHEDULED",
    "SCHEDULED": "SCHEDULED",
    "PREPARING": "SCHEDULED",
    "RUNNING": "RUNNING",
    "TERMINATING": "RUNNING",
    "PREEMPTED": "SCHEDULED",  # it runs again once it stopped
    "SUCCEEDED": "FINISHED",
    "FAILED": "FAILED",
    "ERROR": "FAILED",
    "TERMINATED": "KILLED",
    "CANCELLED": "KILLED",
}
ENDED = frozenset({"SUCCEEDED", "FAILED", "ERROR", "TERMINATED", "CANCELLED"})

#: keys MLflow itself puts into every backend config (ignored here)
_MLFLOW_KEYS = frozenset(
    {
        PROJECT_ENV_MANAGER,
        PROJECT_SYNCHRONOUS,
        PROJECT_DOCKER_ARGS,
        PROJECT_STORAGE_DIR,
        PROJECT_BUILD_IMAGE,
        PROJECT_DOCKER_AUTH,
        MLFLOW_LOCAL_BACKEND_RUN_ID_CONFIG,
    }
)


def run_status(session_status: str) -> str:
    """MLflow's RunStatus name for a jobgate session status."""
    return RUN_STATUS.get(session_status, "RUNNING")


@dataclass(frozen=True)
class BackendConfig:
    """``--backend-config``: what the session asks for, and where the gateway is.

    ``url``/``api_key`` default to the jobgate profile (``JOBGATE_URL``,
    ``JOBGATE_API_KEY``, ``~/.config/jobgate/config.toml``). ``tracking_uri`` is the
    tracking server as the *session* reaches it (default: the one ``mlflow run`` uses).
    """

    image: str | None = None
    resources: dict[str, str] = field(default_factory=dict)
    resource_group: str | None = None
    priority: int | None = None
    project: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    url: str | None = None
    api_key: str | None = None
    tracking_uri: str | None = None
    watch: bool = True

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> BackendConfig:
        known = set(cls.__dataclass_fields__)
        given = {k: v for k, v in raw.items() if k not in _MLFLOW_KEYS}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ExecutionException(
                f"jobgate backend config: unknown key(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        for key in ("resources", "env"):
            value = given.get(key, {})
            if not isinstance(value, dict):
                raise ExecutionException(f"jobgate backend config: {key} must be an object")
            given[key] = {str(k): str(v) for k, v in value.items()}
        priority = given.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise ExecutionException("jobgate backend config: priority must be an integer 0..100")
        if not isinstance(given.get("watch", True), bool):
            raise ExecutionException("jobgate backend config: watch must be true or false")
        for key in ("image", "resource_group", "project", "name", "url", "api_key"):
            if given.get(key) is not None and not isinstance(given[key], str):
                raise ExecutionException(f"jobgate backend config: {key} must be a string")
        return cls(**given)

    def client(self) -> Client:
        profile = Profile.load()
        return Client(
            Profile(
                url=(self.url or profile.url).rstrip("/"),
                api_key=self.api_key or profile.api_key,
                proxy_url=profile.proxy_url,
            )
        )


def _docker_env(project: Any) -> tuple[str | None, dict[str, str]]:
    """The MLproject's ``docker_env``: its image, and its ``environment`` entries
    (``["NAME", "value"]`` as given, ``"NAME"`` copied from here, as MLflow does)."""
    docker = project.docker_env or {}
    env: dict[str, str] = {}
    for entry in docker.get("environment") or []:
        if isinstance(entry, list):
            env[str(entry[0])] = str(entry[1])
        elif entry in os.environ:
            env[entry] = os.environ[entry]
    return docker.get("image"), env


class JobgateBackend(AbstractBackend):
    """What ``mlflow run --backend jobgate`` calls."""

    def run(
        self,
        project_uri: str,
        entry_point: str,
        params: dict[str, Any],
        version: str | None,
        backend_config: Mapping[str, Any],
        tracking_uri: str,
        experiment_id: str,
    ) -> JobgateSubmittedRun:
        config = BackendConfig.parse(backend_config)
        session_tracking_uri = config.tracking_uri or tracking_uri
        if not session_tracking_uri.startswith(("http://", "https://", "databricks")):
            raise ExecutionException(
                f"the tracking URI {session_tracking_uri!r} is local to this machine; a jobgate "
                "session needs a tracking server (MLFLOW_TRACKING_URI=http://…, or "
                '"tracking_uri" in the backend config)'
            )
        # MLflow's own fetch: a local directory is used in place, a git URI cloned here
        work_dir: str = fetch_and_validate_project(  # type: ignore[no-untyped-call]
            project_uri, version, entry_point, params
        )
        project = load_project(work_dir)  # type: ignore[no-untyped-call]
        command = project.get_entry_point(entry_point).compute_command(params, None)
        image, project_env = _docker_env(project)
        try:
            api = config.client()
            digest = upload(api, Path(work_dir)).digest
        except ApiError as exc:
            raise ExecutionException(f"jobgate: {exc}") from None
        run = get_or_create_run(  # type: ignore[no-untyped-call]
            None, project_uri, experiment_id, work_dir, version, entry_point, params
        )
        run_id: str = run.info.run_id
        tracking = MlflowClient(tracking_uri)
        body = _session_body(config, image, command, digest, run_id)
        body["env"] = {
            **project_env,
            **config.env,
            "MLFLOW_TRACKING_URI": session_tracking_uri,
            "MLFLOW_RUN_ID": run_id,
            "MLFLOW_EXPERIMENT_ID": str(experiment_id),
        }
        try:
            session = api.post("/v1/sessions", json=body, headers={"Idempotency-Key": run_id})
        except ApiError as exc:
            tracking.set_terminated(run_id, "FAILED")
            what = f" ({exc.field})" if exc.field else ""
            raise ExecutionException(f"jobgate refused the session: {exc}{what}") from None
        session_id: str = session["id"]
        url = f"{api.profile.url}/sessions/{session_id}"
        tracking.set_tag(run_id, TAG_SESSION_ID, session_id)
        tracking.set_tag(run_id, TAG_SESSION_URL, url)
        _logger.info(
            "=== Run (ID '%s') is jobgate session %s: %s (its output: jobgate sessions logs %s -f)"
            " ===",
            run_id,
            session_id,
            url,
            session_id,
        )
        if config.watch and not backend_config.get(PROJECT_SYNCHRONOUS, False):
            _start_watcher(api.profile, tracking_uri, session_id, run_id)
        return JobgateSubmittedRun(api, tracking, run_id, session_id)


def _start_watcher(profile: Profile, tracking_uri: str, session_id: str, run_id: str) -> None:
    """A detached ``wait()`` for ``mlflow run``, which exits without waiting."""
    env = os.environ | {
        "JOBGATE_URL": profile.url,
        "JOBGATE_API_KEY": profile.api_key,
        "MLFLOW_TRACKING_URI": tracking_uri,
    }
    argv = [sys.executable, "-m", "jobgate.mlflow_backend", "watch", session_id, run_id]
    log = Path(tempfile.gettempdir()) / f"jobgate-mlflow-watch-{session_id}.log"
    with log.open("ab") as out:
        subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _session_body(
    config: BackendConfig, image: str | None, command: str, digest: str, run_id: str
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "batch",
        "command": ["sh", "-c", command],
        "resources": config.resources,
        "working_dir": digest,
        "name": config.name or f"mlflow-{run_id[:12]}",
    }
    optional = {
        "image": config.image or image,
        "resource_group": config.resource_group,
        "priority": config.priority,
        "project": config.project,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


class JobgateSubmittedRun(SubmittedRun):
    """An MLflow run carried by one jobgate batch session."""

    def __init__(
        self,
        api: Client,
        tracking: MlflowClient,
        run_id: str,
        session_id: str,
        echo: bool = True,
    ) -> None:
        super().__init__()
        self.echo = echo  # print the job's output while waiting
        self.api = api
        self.tracking = tracking
        self._run_id = run_id
        self.session_id = session_id
        self._finished = False

    @property
    def run_id(self) -> str:
        return self._run_id

    def session(self) -> dict[str, Any]:
        session: dict[str, Any] = self.api.get(f"/v1/sessions/{segment(self.session_id)}")
        return session

    def get_status(self) -> str:
        session = self.session()
        if session["status"] in ENDED:
            self._finish(session)
        return run_status(session["status"])

    def wait(self) -> bool:
        """Follow the session to its end, printing its output; True iff it exited 0."""
        session = self.session()
        if session["status"] not in ENDED:
            self._follow()
            session = self._until_ended()
        self._finish(session)
        return bool(session["status"] == "SUCCEEDED" and session.get("exit_code") == 0)

    def cancel(self) -> None:
        """Terminate the session and wait until it ended; the run ends KILLED."""
        try:
            self.api.delete(f"/v1/sessions/{segment(self.session_id)}")
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
        self._finish(self._until_ended(), cancelled=True)

    def _follow(self) -> None:
        try:
            for event, data in self.api.follow(
                f"/v1/sessions/{segment(self.session_id)}/logs", follow="true"
            ):
                if event == "log" and self.echo:
                    out = sys.stderr if data.get("stream") in ("stderr", "system") else sys.stdout
                    out.write(str(data.get("data", "")))
                    out.flush()
                elif event == "end":
                    return
        except ApiError as exc:  # a lost stream: the status poll below still finds the end
            _logger.warning("jobgate: log stream ended early (%s); polling the session", exc)

    def _until_ended(self, interval: float = 0.5) -> dict[str, Any]:
        """Poll to the end; a gateway out of reach is retried for UNREACHABLE_GIVE_UP_S."""
        lost_since: float | None = None
        while True:
            try:
                session = self.session()
                lost_since = None
            except ApiError as exc:
                now = time.monotonic()
                lost_since = lost_since or now
                if exc.status != 0 or now - lost_since > UNREACHABLE_GIVE_UP_S:
                    raise
                time.sleep(min(10.0, interval * 4))
                continue
            if session["status"] in ENDED:
                return session
            time.sleep(interval)

    def _finish(self, session: dict[str, Any], cancelled: bool = False) -> None:
        """Once: attach the log, and end the run unless the job itself ended it."""
        if self._finished:
            return
        self._finished = True
        try:
            log = self.api.get(f"/v1/sessions/{segment(self.session_id)}/logs")
            self.tracking.log_text(self.run_id, str(log or ""), LOG_ARTIFACT)
        except Exception as exc:  # the run's outcome matters more than its log
            _logger.warning("jobgate: could not attach the session log: %s", exc)
        status = run_status(session["status"])
        current = self.tracking.get_run(self.run_id).info.status
        # a cancel wins over what the job wrote as it was stopped
        if (cancelled and status == "KILLED") or not RunStatus.is_terminated(
            RunStatus.from_string(current)
        ):
            self.tracking.set_terminated(self.run_id, status)


def main(argv: list[str]) -> int:
    """``python -m jobgate.mlflow_backend watch SESSION RUN``: the watcher (see above)."""
    if len(argv) != 3 or argv[0] != "watch":
        print("usage: python -m jobgate.mlflow_backend watch SESSION_ID RUN_ID", file=sys.stderr)
        return 2
    session_id, run_id = argv[1], argv[2]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    _logger.info("watching session %s for run %s", session_id, run_id)
    api = Client(Profile.load())
    submitted = JobgateSubmittedRun(api, MlflowClient(), run_id, session_id, echo=False)
    succeeded = submitted.wait()
    _logger.info("session %s ended; run %s %s", session_id, run_id, submitted.get_status())
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
