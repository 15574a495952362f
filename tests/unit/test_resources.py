"""ResourceSlots: exact Decimal slots with sizes, arithmetic and fit checks."""

from __future__ import annotations

from decimal import Decimal

import pytest

from plugins.resources import InvalidResource, ResourceSlots, format_size, parse_size

GiB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("4g", 4 * GiB, id="docker-style"),
        pytest.param("4G", 4 * GiB, id="upper"),
        pytest.param("4GiB", 4 * GiB, id="iec"),
        pytest.param("1.5GiB", int(1.5 * GiB), id="fraction"),
        pytest.param("512m", 512 * 1024**2, id="mebi"),
        pytest.param("2048", 2048, id="bytes"),
        pytest.param(" 1 t ", 1024**4, id="spaces"),
        pytest.param(4096, 4096, id="int"),
    ],
)
def test_sizes(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "4x", "-1g", "1.5", "", "g"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(InvalidResource) as err:
        parse_size(text)
    assert err.value.slot == "mem"


def test_arithmetic_is_exact() -> None:
    a = ResourceSlots.parse({"cuda.shares": "0.1"})
    b = ResourceSlots.parse({"cuda.shares": "0.2"})
    assert (a + b)["cuda.shares"] == Decimal("0.3")
    assert (a + b - a - b) == ResourceSlots()  # zeros vanish
    assert ResourceSlots.parse({"cpu": "2"}) * 3 == ResourceSlots.parse({"cpu": 6})


@pytest.mark.parametrize(
    ("need", "have", "fits"),
    [
        pytest.param({"cpu": 1}, {"cpu": 1}, True, id="exact"),
        pytest.param({"cpu": "1.5"}, {"cpu": 1}, False, id="short"),
        pytest.param({"cuda.device": 1}, {"cpu": 8}, False, id="absent-slot-is-zero"),
        pytest.param({}, {}, True, id="nothing-fits-nothing"),
        pytest.param({"cpu": 1, "mem": "2g"}, {"cpu": 4, "mem": "1g"}, False, id="one-slot-short"),
    ],
)
def test_fit(need: dict[str, str], have: dict[str, str], fits: bool) -> None:
    assert (ResourceSlots.parse(need) <= ResourceSlots.parse(have)) is fits


def test_shortfall_names_what_is_missing_with_what_is_free() -> None:
    need = ResourceSlots.parse({"cpu": 2, "mem": "1g"})
    have = ResourceSlots.parse({"cpu": "1.5", "mem": "8g"})
    assert need.shortfall(have) == {"cpu": Decimal("1.5")}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"cpu": "-1"}, id="negative"),
        pytest.param({"cpu": "NaN"}, id="nan"),
        pytest.param({"cpu": "inf"}, id="inf"),
        pytest.param({"cpu": True}, id="bool"),
        pytest.param({"GPU": 1}, id="upper-name"),
        pytest.param({"a.b.c": 1}, id="too-deep"),
    ],
)
def test_invalid_input(raw: dict[str, object]) -> None:
    with pytest.raises(InvalidResource):
        ResourceSlots.parse(raw)  # type: ignore[arg-type]


def test_json_round_trip_is_plain_text() -> None:
    slots = ResourceSlots.parse({"cpu": "0.50", "mem": "1g", "cuda.shares": "1E+0"})
    assert slots.to_json() == {"cpu": "0.5", "cuda.shares": "1", "mem": str(GiB)}
    assert ResourceSlots.from_json(slots.to_json()) == slots


def test_format_size() -> None:
    assert format_size(4 * GiB) == "4GiB"
    assert format_size(int(1.5 * GiB)) == "1.5GiB"
    assert format_size(64 * 1024**2) == "64MiB"
    assert format_size(12) == "12B"
