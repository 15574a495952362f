"""Edge validation helpers: image references, delays and start times, mount roots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.domain.validation import parse_delay, parse_start, valid_image_reference, within_roots


@pytest.mark.parametrize(
    ("ref", "ok"),
    [
        ("busybox", True),
        ("localhost/jobgate-python:3.11", True),
        ("registry.example.com:5000/team/train:v1.2", True),
        ("ghcr.io/org/img@sha256:" + "a" * 64, True),
        ("Busybox", False),
        ("bad image", False),
        ("img:", False),
        ("/leading", False),
        ("a" * 300, False),
    ],
)
def test_image_references(ref: str, ok: bool) -> None:
    assert valid_image_reference(ref) is ok


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("+10m", 600), ("90s", 90), ("1h30m", 5400), ("2d", 172800), ("+ 1h", 3600)],
)
def test_delays(text: str, seconds: int) -> None:
    assert parse_delay(text) == timedelta(seconds=seconds)


def test_start_times() -> None:
    assert parse_start("2026-11-20T14:00:00Z") == datetime(2026, 11, 20, 14, tzinfo=UTC)
    assert parse_start("2026-11-20T14:00:00") == datetime(2026, 11, 20, 14, tzinfo=UTC)
    assert parse_start("+5m") == timedelta(minutes=5)
    with pytest.raises(ValueError, match="not a time"):
        parse_start("tomorrow-ish")


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/data", True),
        ("/data/x/y", True),
        ("/data-other", False),
        ("/etc", False),
        ("/data/../etc", False),
    ],
)
def test_mount_roots(path: str, ok: bool) -> None:
    assert within_roots(path, ["/data", "/scratch/"]) is ok
