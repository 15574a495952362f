"""A new session's row is built in one place (``gateway.db.session_rows``): what a
create or an endpoint replica leaves out is what the table itself would store."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.db.session_rows import session_row
from gateway.db.tables import SESSIONS


def _row(**columns: Any) -> dict[str, Any]:
    return session_row(
        owner_id="u1",
        type="batch",
        reason="submitted by alice",
        image=None,
        argv=["true"],
        env={},
        resources={"cpu": "1"},
        resource_group="default",
        priority=50,
        apps={},
        mounts=[],
        folders=[],
        **columns,
    )


def test_what_a_writer_leaves_out_is_the_columns_default() -> None:
    row = _row()
    given = {"id", "owner_id", "type", "status", "status_reason", "image", "command", "env"}
    given |= {"resources", "resource_group", "priority", "apps", "mounts", "folders"}
    given |= {"pending_reason"}
    for name, value in row.items():
        default = SESSIONS.c[name].default
        if default is None or name in given:
            continue
        if default.is_scalar:
            assert value == default.arg, name
        elif default.is_callable and name in {"constraints"}:
            assert value == {}, name
    assert row["stop_when"] == "main-done"
    assert row["command"] == {"argv": ["true"]}
    assert row["status"] == "PENDING"
    assert row["pending_reason"] == "waiting for the scheduler"
    assert "created_at" not in row  # the writer stamps it from the database clock


def test_each_row_gets_its_own_id_unless_given() -> None:
    assert _row()["id"] != _row()["id"]
    assert _row(id="s1")["id"] == "s1"


def test_a_column_the_table_lacks_is_refused() -> None:
    with pytest.raises(TypeError, match="no column 'colour'"):
        _row(colour="red")
