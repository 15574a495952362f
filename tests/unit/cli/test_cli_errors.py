"""No command ends in a traceback: every one, found by walking the command tree, is driven
with bad input and must answer with an exit code and one line starting ``error:``.

Here without a server (nothing listens on the URL); ``tests/e2e/test_cli_behaviour.py``
drives the same commands against a running stack with unknown ids.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_tree import Leaf, leaves, run_cli

from jobgate.client import ApiError, Client
from jobgate.localnet import free_port

LEAVES = leaves()
#: client commands whose argument is a local file they read before calling the API
READS_A_FILE_FIRST = {"admin config import"}
#: client commands that with only their arguments have nothing to ask (a usage error)
NEED_AN_OPTION = {"endpoints scale"}
IDS = [leaf.name for leaf in LEAVES]


@pytest.fixture
def no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.chdir(tmp_path)  # a command that writes a file writes it there
    monkeypatch.setenv("JOBGATE_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("JOBGATE_URL", url)
    monkeypatch.setenv("JOBGATE_API_KEY", "jg_not_a_key")
    return url


def test_the_tree_has_every_command_of_the_readme() -> None:
    names = set(IDS)
    for expected in (
        "run",
        "up",
        "sessions ls",
        "sessions logs",
        "images rm",
        "admin policies set",
        "admin groups set",
        "nodes drain",
        "apps open",
    ):
        assert expected in names


@pytest.mark.parametrize("leaf", LEAVES, ids=IDS)
def test_unknown_option_is_a_one_line_usage_error(
    leaf: Leaf, no_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, *leaf.required("x"), "--no-such-option")
    assert result.code == 2
    line = result.one_line_error()
    assert "--no-such-option" in line
    assert f"jobgate {leaf.name} --help" in line


@pytest.mark.parametrize("leaf", LEAVES, ids=IDS)
def test_bad_option_values_are_usage_errors(
    leaf: Leaf, no_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for option in leaf.typed_options():
        result = run_cli(capsys, *leaf.required("x"), option, "not-a-value")
        assert result.code == 2, (option, result)
        assert option in result.one_line_error()


@pytest.mark.parametrize("leaf", [x for x in LEAVES if x.is_client], ids=lambda x: x.name)
def test_no_server_is_one_line_naming_the_url(
    leaf: Leaf, no_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, *leaf.required("x"))
    if leaf.name in NEED_AN_OPTION:  # test_scale_with_nothing_to_change_lists_the_options
        assert result.code == 2, result
        return
    assert result.code == 1, result
    line = result.one_line_error()
    if leaf.name in READS_A_FILE_FIRST:  # the missing file is the first thing wrong
        assert "cannot read x" in line
        return
    if leaf.name == "logout":  # nothing to undo without a `jobgate login`: no request
        assert "not signed in through an identity provider" in line
        return
    assert no_server in line
    assert "jobgate up" in line
    assert result.out == ""


@pytest.mark.parametrize("leaf", LEAVES, ids=IDS)
def test_every_option_and_argument_has_help_and_no_type_names(
    leaf: Leaf, capsys: pytest.CaptureFixture[str]
) -> None:
    for p in leaf.params():
        assert getattr(p, "help", None), f"{leaf.name}: {p.name} has no help text"
    result = run_cli(capsys, *leaf.path, "--help")
    assert result.code == 0
    for raw in ("<str>", "list[", "<int", "<path>", "[bold", "[/]"):
        assert raw not in result.out, f"{leaf.name} --help shows {raw!r}:\n{result.out}"


def test_version_and_completion(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "--version")
    assert result.code == 0
    assert result.out.startswith("jobgate ")
    result = run_cli(capsys, "--help")
    assert "--install-completion" in result.out
    assert "--show-completion" in result.out


@pytest.mark.parametrize("leaf", [x for x in LEAVES if x.is_client], ids=lambda x: x.name)
def test_every_client_command_takes_output_json(leaf: Leaf) -> None:
    (output,) = [p for p in leaf.params() if p.name == "output"]
    assert "--output" in output.opts
    assert output.metavar == "table|json"


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--mlflow-model", "models:/m"], "http://h:5000", "--mlflow-model takes models:/NAME/"),
        (["--mlflow-model", "models:/m/1"], None, "--mlflow-model needs a tracking server"),
        (["--tracking-uri", "http://h:5000"], None, "--tracking-uri goes with --mlflow-model"),
    ],
)
def test_endpoint_from_an_mlflow_model_is_refused_before_any_call(
    no_server: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: str | None,
    says: str,
) -> None:
    if env is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", env)
    result = run_cli(capsys, "endpoints", "create", "iris", *args)
    assert result.code == 2
    assert result.err.startswith(f"error: {says}"), result.err
    assert len(result.err.strip().splitlines()) == 1


TAKES_RESOURCES = [x for x in LEAVES if any("--resource" in p.opts for p in x.params())]


@pytest.mark.parametrize("leaf", TAKES_RESOURCES, ids=lambda x: x.name)
@pytest.mark.parametrize("option", ["--gpu", "--gpus", "--gpu=1"])
def test_a_gpu_option_is_answered_with_the_resource_slots_to_use(
    leaf: Leaf, option: str, no_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, *leaf.required("x"), option, "1")
    assert result.code == 2
    line = result.one_line_error()
    assert "-r cuda.shares=" in line
    assert "-r cuda.device=" in line
    assert f"jobgate {leaf.name} --help" in line


def test_the_gpu_hint_is_for_commands_with_resources_only() -> None:
    assert "run" in {x.name for x in TAKES_RESOURCES}


@pytest.mark.parametrize(
    ("detail", "field", "line"),
    [
        pytest.param(
            "autoscale.min_replicas: Input should be less than or equal to 100",
            "autoscale.min_replicas",
            "error: autoscale.min_replicas: Input should be less than or equal to 100",
            id="validation-names-it-once",
        ),
        pytest.param(
            "no resource group 'gpu'",
            "resource_group",
            "error: no resource group 'gpu' (resource_group)",
            id="domain-error-gets-the-field",
        ),
    ],
)
def test_an_api_problem_names_its_field_once(
    detail: str,
    field: str,
    line: str,
    no_server: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise ApiError(422, "Invalid request", detail, field)

    monkeypatch.setattr(Client, "request", refuse)
    result = run_cli(capsys, "sessions", "ls")
    assert result.code == 1
    assert result.one_line_error() == line


def test_scale_with_nothing_to_change_lists_the_options(
    no_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, "endpoints", "scale", "web")
    assert result.code == 2
    assert result.err.startswith("error: nothing to change"), result.err
    for option in ("--replicas", "--min", "--max", "--target-concurrency", "--target-rps"):
        assert option in result.err, option
    assert len(result.err.strip().splitlines()) == 1
