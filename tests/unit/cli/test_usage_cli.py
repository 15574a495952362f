"""``jobgate usage``'s own pieces: the dates people type become the API's RFC 3339, and
slot-seconds read as hours (memory as GiB-hours)."""

from __future__ import annotations

import pytest
import typer

from jobgate.commands.usage import _hours, _instant


@pytest.mark.parametrize(
    ("typed", "sent"),
    [
        ("2026-11-23", "2026-11-23T00:00:00+00:00"),
        ("2026-11-23T14:30", "2026-11-23T14:30:00+00:00"),
        ("2026-11-23T14:30:00+01:00", "2026-11-23T14:30:00+01:00"),
        (None, None),
    ],
)
def test_dates_become_rfc3339(typed: str | None, sent: str | None) -> None:
    assert _instant(typed, "--from") == sent


def test_a_word_is_refused_naming_the_option() -> None:
    with pytest.raises(typer.BadParameter, match="not a date or time"):
        _instant("yesterday", "--from")


@pytest.mark.parametrize(
    ("seconds", "unit", "shown"),
    [
        (7200.0, "cpu-seconds", "2.00"),
        (1800.0 * 2**30, "byte-seconds", "0.5000"),
        (3600.0 * 250, "cuda.shares-seconds", "250"),
        (0.1, "cpu-seconds", "<0.0001"),
        (0.0, "cpu-seconds", "0.0000"),
    ],
)
def test_hours(seconds: float, unit: str, shown: str) -> None:
    assert _hours(seconds, unit) == shown
