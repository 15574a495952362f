"""The audit log's pure rules: which requests leave a row, and what a row keeps of a
credential (``gateway/domain/audit.py``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.domain.audit import AuditEntry, audited, kept, presented, target_of


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/sessions", True),
        ("DELETE", "/v1/sessions/abc", True),
        ("PATCH", "/v1/uploads/0123", True),
        ("PUT", "/v1/nothing-here", True),  # no route: still a row ("unmatched")
        ("POST", "/sign-in", True),
        ("POST", "/sign-out", True),
        ("GET", "/v1/sessions", False),
        ("HEAD", "/v1/blobs/sha256:00", False),
        ("OPTIONS", "/v1/sessions", False),
        ("POST", "/metrics", False),
        ("POST", "/v1x", False),
    ],
)
def test_which_requests_are_recorded(method: str, path: str, expected: bool) -> None:
    assert audited(method, path) is expected


def test_a_node_s_log_uploads_are_kept_only_when_refused() -> None:
    assert not kept("internal-append-logs", 200)
    assert kept("internal-append-logs", 401)
    assert kept("internal-append-logs", 403)
    assert kept("sessions-create", 201)


def test_a_refused_token_keeps_only_a_key_s_shown_prefix() -> None:
    key = "jg_" + "a" * 43
    assert presented(key) == "refused key jg_aaaaaa"
    assert presented("hunter2-my-password") == "refused bearer token"
    assert presented("jg_short") == "refused bearer token"


def test_a_row_is_cut_to_its_columns() -> None:
    entry = AuditEntry(at=datetime.now(UTC), method="POST", path="/v1/" + "x" * 2000, client="")
    entry.target = target_of({"name": "p", "user": "u"})
    row = entry.row()
    assert row["target"] == "name=p user=u"
    assert row["action"] == "unmatched"
    assert len(str(row["path"])) == 1024
    assert str(row["path"]).endswith("…")
