"""``jobgate up`` makes the secrets master key once (docs/secrets.md), keeps its other
secrets (the private Redis's password among them) and never shows a Redis password."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from gateway.config import GatewaySettings
from gateway.domain.sealing import MasterKey
from jobgate.localnet import redis_server_argv
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


def test_up_keeps_its_secrets_and_adds_a_redis_password_to_a_data_dir_from_before(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"node_token": "jgn_old", "proxy_secret": "old-secret"}))
    path.chmod(0o600)
    kept = Stack(data_dir=tmp_path)._secrets()
    assert kept["node_token"] == "jgn_old"
    assert kept["proxy_secret"] == "old-secret"
    assert len(kept["redis_password"]) >= 32
    assert json.loads(path.read_text()) == kept
    assert path.stat().st_mode & 0o777 == 0o600
    assert Stack(data_dir=tmp_path)._secrets() == kept  # made once
    fresh = Stack(data_dir=tmp_path / "new")
    fresh.data_dir.mkdir()
    made = fresh._secrets()
    assert set(made) == {"node_token", "proxy_secret", "redis_password"}
    assert (fresh.data_dir / "secrets.json").stat().st_mode & 0o777 == 0o600


def test_the_private_redis_command_line_names_only_the_passwords_digest(tmp_path: Path) -> None:
    argv = redis_server_argv(tmp_path, unix_socket=tmp_path / "r.sock", password="hunter2")
    assert "hunter2" not in " ".join(argv)
    digest = hashlib.sha256(b"hunter2").hexdigest()
    user = argv.index("--user")
    rule = ["--user", "default", "reset", "on", f"#{digest}", "~*", "&*", "+@all"]
    assert argv[user : user + len(rule)] == rule
    assert "--user" not in redis_server_argv(tmp_path)


def test_a_redis_of_ones_own_is_used_as_given_and_shown_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBGATE_REDIS_URL", "redis://:hunter2@redis.example:6379/0")
    said: list[str] = []
    stack = Stack(data_dir=tmp_path, say=said.append)
    stack._redis_password = "ours"
    stack.redis_url = stack._redis()
    assert stack.redis_url == "redis://:hunter2@redis.example:6379/0"
    assert stack._redis_login() == stack.redis_url  # no password of ours added
    assert said == ["  redis      redis://:***@redis.example:6379/0 (JOBGATE_REDIS_URL)"]
    assert "redis" not in stack.components  # no private Redis started
