"""``jobgate endpoints create NAME --mlflow-model URI``: an MLflow model as an endpoint.

A revision on the model-server image (``scripts/build-test-images.sh``: MLflow's scoring
server, ``/invocations`` and ``/ping`` on port 8000) whose replicas fetch the model from
the tracking server's registry (``MLFLOW_MODEL_URI``, ``MLFLOW_TRACKING_URI``) when they
start. The URI's shape is checked here, before anything is sent.
"""

from __future__ import annotations

import re

__all__ = [
    "MODEL_SERVER_HEALTH",
    "MODEL_SERVER_IMAGE",
    "MODEL_SERVER_PORT",
    "model_env",
    "valid_model_uri",
]

MODEL_SERVER_IMAGE = "localhost/jobgate-model-server:latest"
MODEL_SERVER_PORT = 8000
MODEL_SERVER_HEALTH = "/ping"

_MODEL_URI = re.compile(
    r"models:/[^/@\s]{1,256}/(\d{1,9}|latest)"  # models:/NAME/VERSION
    r"|models:/[^/@\s]{1,256}@[A-Za-z0-9_-]{1,255}"  # models:/NAME@alias
    r"|runs:/[0-9a-f]{32}/(?!/)[^\s]{1,1024}"  # runs:/RUN_ID/path
)
_TRACKING_URI = re.compile(r"[a-z][a-z0-9+.-]*://\S+|databricks(://\S*)?")


def valid_model_uri(uri: str) -> bool:
    """``models:/NAME/VERSION``, ``models:/NAME@alias`` or ``runs:/RUN_ID/path``."""
    if _MODEL_URI.fullmatch(uri) is None:
        return False
    return ".." not in uri.split("/")


def model_env(model_uri: str, tracking_uri: str | None) -> dict[str, str]:
    """The replica's environment; a ``ValueError`` (one line, for the user) if unusable."""
    if not valid_model_uri(model_uri):
        raise ValueError(
            f"--mlflow-model takes models:/NAME/VERSION, models:/NAME@alias or "
            f"runs:/RUN_ID/path, got {model_uri!r}"
        )
    if not tracking_uri:
        raise ValueError(
            "--mlflow-model needs a tracking server: give --tracking-uri or set MLFLOW_TRACKING_URI"
        )
    if _TRACKING_URI.fullmatch(tracking_uri) is None:
        raise ValueError(
            f"--tracking-uri takes a URL such as http://host:5000, got {tracking_uri!r}"
        )
    return {"MLFLOW_MODEL_URI": model_uri, "MLFLOW_TRACKING_URI": tracking_uri}
