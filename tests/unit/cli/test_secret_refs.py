"""``--secret`` of ``jobgate run`` and ``jobgate sessions create`` (docs/secrets.md)."""

from __future__ import annotations

import pytest
import typer

from jobgate.commands.run import build_request, secret_ref


@pytest.mark.parametrize(
    ("spec", "ref"),
    [
        ("HF_TOKEN", {"name": "HF_TOKEN"}),
        ("hf:HUGGING_FACE_HUB_TOKEN", {"name": "hf", "env": "HUGGING_FACE_HUB_TOKEN"}),
        ("kube:/run/secrets/kube", {"name": "kube", "path": "/run/secrets/kube"}),
    ],
)
def test_a_secret_as_a_variable_or_a_file(spec: str, ref: dict[str, str]) -> None:
    assert secret_ref(spec) == ref


def test_a_secret_needs_a_name() -> None:
    with pytest.raises(typer.BadParameter):
        secret_ref(":X")


def test_the_request_names_secrets_only_when_given() -> None:
    common = {"image": None, "cpu": None, "mem": None, "resources": [], "env": []}
    assert "secrets" not in build_request(["true"], **common)
    body = build_request(["true"], **common, secrets=["A", "b:/x"])
    assert body["secrets"] == [{"name": "A"}, {"name": "b", "path": "/x"}]
