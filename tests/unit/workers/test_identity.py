"""A worker's identity belongs to its data dir: stable there, different elsewhere."""

from __future__ import annotations

import socket
from pathlib import Path

from workers.config import WorkerSettings
from workers.identity import load_identity


def test_node_id_is_the_hostname_plus_a_suffix_kept_in_the_data_dir(tmp_path: Path) -> None:
    first = load_identity(tmp_path / "a")
    again = load_identity(tmp_path / "a")
    other = load_identity(tmp_path / "b")
    assert first == again  # a restart is the same node and instance: it re-attaches
    assert first.node_id.startswith(socket.gethostname() + "-")
    assert first.node_id != other.node_id
    assert first.instance != other.instance
    assert (tmp_path / "a" / "worker" / "instance").read_text().strip() == first.instance


def test_a_configured_node_id_keeps_an_instance_of_its_own(tmp_path: Path) -> None:
    a = WorkerSettings(node_id="n1", data_dir=tmp_path / "a").resolved()
    b = WorkerSettings(node_id="n1", data_dir=tmp_path / "b").resolved()
    assert a.node_id == b.node_id == "n1"
    assert a.instance_id != b.instance_id  # their containers carry different labels
