"""The one idle rule: the reconciler ends a session at the deadline the API shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.domain.idle import idle_deadline, idle_timeout

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("own", "default", "expected"),
    [
        pytest.param(None, None, None, id="none"),
        pytest.param(None, 600, 600, id="operator-default"),
        pytest.param(120, 600, 120, id="own-wins"),
        pytest.param(0, None, None, id="zero-is-never"),
    ],
)
def test_idle_timeout(own: int | None, default: int | None, expected: int | None) -> None:
    assert idle_timeout(own, default) == expected


@pytest.mark.parametrize(
    ("started", "last", "timeout", "expected"),
    [
        pytest.param(T0, None, 120, T0 + 2 * MIN, id="no-traffic-counts-from-start"),
        pytest.param(T0, T0 + 5 * MIN, 120, T0 + 7 * MIN, id="traffic-moves-it"),
        pytest.param(T0 + 5 * MIN, T0, 120, T0 + 7 * MIN, id="older-traffic-than-start"),
        pytest.param(T0, T0, None, None, id="no-timeout"),
        pytest.param(None, None, 120, None, id="not-started"),
    ],
)
def test_idle_deadline(
    started: datetime | None, last: datetime | None, timeout: int | None, expected: datetime | None
) -> None:
    assert idle_deadline(started, last, timeout) == expected
