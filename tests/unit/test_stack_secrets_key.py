"""``jobgate up`` makes the secrets master key once (docs/secrets.md)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gateway.config import GatewaySettings
from gateway.domain.sealing import MasterKey
from jobgate.stack import Stack


def test_up_makes_the_key_once_and_the_gateway_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBGATE_SECRETS_KEY", raising=False)
    monkeypatch.delenv("JOBGATE_SECRETS_KEY_FILE", raising=False)
    stack = Stack(data_dir=tmp_path)
    stack._secrets_key()
    path = tmp_path / "secrets.key"
    first = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(base64.b64decode(first.strip())) == 32
    stack._secrets_key()
    assert path.read_text() == first  # kept: the sealed values need it
    settings = GatewaySettings(data_dir=tmp_path)
    assert MasterKey.from_base64(settings.effective_secrets_key).raw == base64.b64decode(first)


def test_no_key_file_and_no_variable_is_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBGATE_SECRETS_KEY", raising=False)
    monkeypatch.delenv("JOBGATE_SECRETS_KEY_FILE", raising=False)
    assert GatewaySettings(data_dir=tmp_path).effective_secrets_key == ""
