"""CLI pieces: SSE parsing, request building, and the exit code `jobgate run` returns."""

from __future__ import annotations

import ssl

import pytest
import typer

from jobgate.client import iter_sse, segment
from jobgate.commands.run import EXIT_CANCELLED, EXIT_ERROR, _exit_code, build_request
from jobgate.mlflow_models import model_env, valid_model_uri


def test_sse_frames_keepalives_and_multiline_data() -> None:
    lines = [
        "event: status",
        'data: {"status": "PENDING"}',
        "",
        ": keepalive",
        "",
        "event: log",
        'data: {"stream": "stdout",',
        'data: "data": "hi"}',
        "",
        "event: end",
        'data: {"status": "SUCCEEDED", "exit_code": 0}',
        "",
    ]
    assert list(iter_sse(iter(lines))) == [
        ("status", {"status": "PENDING"}),
        ("log", {"stream": "stdout", "data": "hi"}),
        ("end", {"status": "SUCCEEDED", "exit_code": 0}),
    ]


def _request(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        image=None,
        cpu=None,
        mem=None,
        resources=[],
        env=[],
        name=None,
        interactive=False,
        mounts=[],
        priority=None,
        resource_group=None,
        project=None,
        depends_on=[],
        starts_at=None,
        constraints=[],
    )
    return build_request(["python3", "-c", "print(1)"], **(base | kw))  # type: ignore[arg-type]


def test_build_request_maps_flags_to_the_api_body() -> None:
    body = _request(
        cpu="2",
        mem="4g",
        resources=["cuda.shares=0.5"],
        env=["A=1", "B=x=y"],
        mounts=["/data:/mnt:ro"],
        priority=80,
        max_retries=0,
    )
    assert body == {
        "type": "batch",
        "command": ["python3", "-c", "print(1)"],
        "resources": {"cuda.shares": "0.5", "cpu": "2", "mem": "4g"},
        "env": {"A": "1", "B": "x=y"},
        "priority": 80,
        "max_retries": 0,  # 0 is a value (never re-run), not "unset"
        "mounts": [{"source": "/data", "target": "/mnt", "read_only": True}],
    }


def test_bad_flags_are_usage_errors() -> None:
    from jobgate.client import ApiError

    with pytest.raises(ApiError, match="KEY=VALUE"):
        _request(env=["NOVALUE"])
    with pytest.raises(typer.BadParameter, match="SRC:DST"):
        _request(mounts=["/only-one"])


@pytest.mark.parametrize(
    ("end", "code"),
    [
        pytest.param({"status": "SUCCEEDED", "exit_code": 0}, 0, id="ok"),
        pytest.param({"status": "FAILED", "exit_code": 3}, 3, id="job-code"),
        pytest.param({"status": "TERMINATED", "exit_code": 143}, 143, id="terminated"),
        pytest.param({"status": "CANCELLED", "exit_code": None}, EXIT_CANCELLED, id="cancelled"),
        pytest.param({"status": "ERROR", "exit_code": None, "reason": "x"}, EXIT_ERROR, id="error"),
        pytest.param({}, 1, id="stream-broke"),
    ],
)
def test_exit_codes(end: dict[str, object], code: int) -> None:
    assert _exit_code(end, cancelled_by_us=False) == code


@pytest.mark.parametrize(
    ("uri", "ok"),
    [
        ("models:/iris-enet/1", True),
        ("models:/iris-enet/latest", True),
        ("models:/iris-enet@champion", True),
        ("models:/iris enet@champion", False),  # no white space
        ("runs:/" + "a" * 32 + "/model", True),
        ("models:/iris-enet", False),  # no version
        ("models:/iris-enet/one", False),
        ("models:/iris-enet@", False),
        ("runs:/nothex/model", False),
        ("runs:/" + "a" * 32 + "/", False),
        ("runs:/" + "a" * 32 + "/../secrets", False),
        ("s3://bucket/model", False),
        ("", False),
    ],
)
def test_mlflow_model_uri_shapes(uri: str, ok: bool) -> None:
    assert valid_model_uri(uri) is ok


def test_mlflow_model_env_needs_a_tracking_server() -> None:
    assert model_env("models:/m/2", "http://10.0.2.2:5000") == {
        "MLFLOW_MODEL_URI": "models:/m/2",
        "MLFLOW_TRACKING_URI": "http://10.0.2.2:5000",
    }
    with pytest.raises(ValueError, match="needs a tracking server"):
        model_env("models:/m/2", None)
    with pytest.raises(ValueError, match="--tracking-uri takes a URL"):
        model_env("models:/m/2", "not a url")
    with pytest.raises(ValueError, match="--mlflow-model takes"):
        model_env("models:/m", "http://h:5000")


def test_a_name_is_one_path_segment_whatever_it_holds() -> None:
    """`endpoints show "a/tokens"` must ask for an endpoint named so, not another route."""
    assert segment("a/tokens") == "a%2Ftokens"
    assert segment("x?y#z") == "x%3Fy%23z"
    assert segment(".local") == ".local"


def test_a_plain_http_profile_skips_the_trust_store_but_would_refuse_any_tls_peer() -> None:
    from jobgate.client import tls_for

    assert tls_for("https://gw.example:8420") is True  # the system's store, as httpx loads it
    plain = tls_for("http://127.0.0.1:8420")
    assert isinstance(plain, ssl.SSLContext)
    # verification stays required and nobody is trusted: fail closed, never open
    assert plain.verify_mode == ssl.CERT_REQUIRED
    assert plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
