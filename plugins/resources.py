"""Resource slots: a Decimal-valued map from slot name to amount.

``cpu`` counts cores (``0.5`` is half a core), ``mem`` counts bytes, and accelerator
slots (``cuda.device``, ``cuda.shares``, ``rocm.device``, ``tpu.device``, ...) count
devices or shares of devices. A slot that is absent is zero.

    >>> a = ResourceSlots.parse({"cpu": "2", "mem": "4g"})
    >>> b = ResourceSlots.parse({"cpu": 1, "mem": "1GiB"})
    >>> (a - b)["mem"] == 3 * 1024**3
    True
    >>> b <= a
    True

Values are exact (Decimal), so 0.1 + 0.2 fractions of a GPU add up to 0.3 and never
to 0.30000000000000004 of one. JSON carries them as strings.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from decimal import Decimal, InvalidOperation
from typing import Any, Final

__all__ = [
    "CPU",
    "MAX_AMOUNT",
    "MEM",
    "InvalidResource",
    "ResourceSlots",
    "format_size",
    "parse_size",
    "slot_map_schema",
    "valid_slot_name",
]

CPU: Final = "cpu"
MEM: Final = "mem"

SLOT_NAME_PATTERN: Final = r"^[a-z][a-z0-9_-]{0,31}(\.[a-z][a-z0-9_-]{0,31})?$"
_SLOT_NAME = re.compile(SLOT_NAME_PATTERN)
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtpe]?)(i?)(b?)\s*$", re.IGNORECASE)
_UNITS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_ZERO: Final = Decimal(0)


class InvalidResource(ValueError):
    """A slot name or amount that cannot be a resource request."""

    def __init__(self, slot: str, message: str) -> None:
        super().__init__(f"{slot}: {message}")
        self.slot = slot
        self.message = message


#: the largest amount of any slot (mem in bytes: 8 PiB), an integer JSON holds exactly
MAX_AMOUNT: Final = Decimal(2**53)
#: size units and the most digits a whole number before each may have (under MAX_AMOUNT)
_SIZE_DIGITS: Final = (("", 15), ("[kK]", 12), ("[mM]", 9), ("[gG]", 6), ("[tT]", 3))


def slot_map_schema(*, zero: bool = True, null: bool = False) -> dict[str, Any]:
    """JSON Schema of a slot map :meth:`ResourceSlots.parse` takes: slot names, and
    amounts up to MAX_AMOUNT as numbers or plain decimal strings (``mem``: whole bytes,
    or a whole number and a unit). *zero*: whether 0 is an amount (a limit of 0 is not);
    *null*: whether an amount may be null (a merge patch removing the slot). The parser
    also takes spellings the schema leaves out (``1e3``, ``1.5GiB``)."""
    bounds = {"minimum": 0} if zero else {"exclusiveMinimum": 0}
    bounds["maximum"] = int(MAX_AMOUNT)

    def whole(digits: int) -> str:
        return f"[0-9]{{1,{digits}}}" if zero else f"0*[1-9][0-9]{{0,{digits - 1}}}"

    fraction = r"(?:\.[0-9]{1,9})?"
    decimal = f"^(?:{whole(15)}{fraction}" + ("" if zero else r"|0*\.[0-9]{0,8}[1-9][0-9]{0,8}")
    units = [f"{whole(d)}{unit}" for unit, d in _SIZE_DIGITS[1:]]
    units.append(("[0-8]" if zero else "0*[1-8]") + "[pP]")
    size = f"^(?:{whole(15)}[bB]?|(?:{'|'.join(units)})[iI]?[bB]?)$"
    nothing = [{"type": "null"}] if null else []
    return {
        "propertyNames": {"pattern": SLOT_NAME_PATTERN},
        "properties": {
            MEM: {
                "anyOf": [
                    {"type": "integer", **bounds},
                    {"type": "string", "pattern": size},
                    *nothing,
                ]
            }
        },
        "additionalProperties": {
            "anyOf": [
                {"type": "number", **bounds},
                {"type": "string", "pattern": decimal + ")$"},
                *nothing,
            ]
        },
    }


def valid_slot_name(name: str) -> bool:
    """``cpu``, ``mem`` or ``<kind>.<slot>`` in lower case."""
    return bool(_SLOT_NAME.fullmatch(name))


def parse_size(value: str | int | float | Decimal) -> Decimal:
    """Bytes from ``4g``, ``512Mi``, ``1.5GiB``, ``2048`` (all units binary: 1k = 1024)."""
    if isinstance(value, bool):
        raise InvalidResource(MEM, f"not a size: {value!r}")
    if isinstance(value, int | float | Decimal):
        amount = _to_decimal(MEM, value)
    else:
        match = _SIZE.match(value)
        if not match:
            raise InvalidResource(
                MEM, f"not a size: {value!r} (use bytes or a unit: 512m, 4g, 1.5GiB)"
            )
        number, unit, _, _ = match.groups()
        amount = Decimal(number) * (1024 ** _UNITS[unit.lower()])
    if abs(amount) > MAX_AMOUNT:  # (quantize has 28 digits to work with)
        raise InvalidResource(MEM, f"must be at most {MAX_AMOUNT} bytes (got {value})")
    if amount != amount.to_integral_value():
        raise InvalidResource(MEM, f"not a whole number of bytes: {value!r}")
    return amount.quantize(Decimal(1))


def format_size(amount: Decimal | int) -> str:
    """``4294967296`` -> ``4GiB``; ``1610612736`` -> ``1.5GiB``."""
    value = Decimal(amount)
    for unit, power in (("PiB", 5), ("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        scaled = value / (1024**power)
        if scaled >= 1:
            text = f"{scaled:.2f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{int(value)}B"


def _to_decimal(slot: str, value: object) -> Decimal:
    if isinstance(value, bool):
        raise InvalidResource(slot, f"not a number: {value!r}")
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)  # type: ignore[arg-type]
    except (InvalidOperation, TypeError, ValueError):
        raise InvalidResource(slot, f"not a number: {value!r}") from None
    if not amount.is_finite():
        raise InvalidResource(slot, f"not a finite number: {value!r}")
    return amount


class ResourceSlots(Mapping[str, Decimal]):
    """An immutable slot map with ``+``, ``-`` and ``<=`` (every slot fits)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Decimal] | None = None) -> None:
        # Trusted constructor: values must already be Decimals. Use parse() for input.
        self._data: dict[str, Decimal] = {k: v for k, v in (data or {}).items() if v != _ZERO}
        self._hash: int | None = None  # immutable: hashed once (the planner hashes a lot)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def parse(
        cls, raw: Mapping[str, str | int | float | Decimal], *, allow_negative: bool = False
    ) -> ResourceSlots:
        """Validate user or wire input: names, numbers, sizes for ``mem``."""
        data: dict[str, Decimal] = {}
        for name, value in raw.items():
            if not valid_slot_name(name):
                raise InvalidResource(name, "not a slot name (cpu, mem or <kind>.<slot>)")
            amount = parse_size(value) if name == MEM else _to_decimal(name, value)
            if amount < 0 and not allow_negative:
                raise InvalidResource(name, f"must not be negative (got {value})")
            if abs(amount) > MAX_AMOUNT:
                raise InvalidResource(name, f"must be at most {MAX_AMOUNT} (got {value})")
            data[name] = amount
        return cls(data)

    @classmethod
    def from_json(cls, raw: Mapping[str, str] | None) -> ResourceSlots:
        """Read what :meth:`to_json` wrote (trusted, from our own database or queue)."""
        return cls({k: Decimal(v) for k, v in (raw or {}).items()})

    def to_json(self) -> dict[str, str]:
        return {k: _plain(v) for k, v in sorted(self._data.items())}

    # -- mapping ----------------------------------------------------------------------
    def __getitem__(self, key: str) -> Decimal:
        return self._data.get(key, _ZERO)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # the dict's own views: Mapping's generic ones call __getitem__ per item
    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def items(self) -> ItemsView[str, Decimal]:
        return self._data.items()

    def values(self) -> ValuesView[Decimal]:
        return self._data.values()

    def __repr__(self) -> str:
        return f"ResourceSlots({self.to_json()})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceSlots):
            return self._data == other._data
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    # -- arithmetic -------------------------------------------------------------------
    def __add__(self, other: Mapping[str, Decimal]) -> ResourceSlots:
        data = dict(self._data)
        for k, v in other.items():
            data[k] = data.get(k, _ZERO) + v
        return ResourceSlots(data)

    def __sub__(self, other: Mapping[str, Decimal]) -> ResourceSlots:
        data = dict(self._data)
        for k, v in other.items():
            data[k] = data.get(k, _ZERO) - v
        return ResourceSlots(data)

    def __mul__(self, factor: int | Decimal) -> ResourceSlots:
        return ResourceSlots({k: v * factor for k, v in self._data.items()})

    def __le__(self, other: Mapping[str, Decimal]) -> bool:
        """Every slot of self fits in other (absent slots of other are zero)."""
        get = other.get
        return all(v <= get(k, _ZERO) for k, v in self._data.items())

    def __ge__(self, other: Mapping[str, Decimal]) -> bool:
        return ResourceSlots(dict(other)) <= self

    def shortfall(self, available: Mapping[str, Decimal]) -> dict[str, Decimal]:
        """Slots of self that do not fit in available, with how much is free of each."""
        get = available.get
        return {k: get(k, _ZERO) for k, v in self._data.items() if v > get(k, _ZERO)}

    def nonnegative(self) -> bool:
        return all(v >= 0 for v in self._data.values())


def _plain(value: Decimal) -> str:
    """Decimal as plain text without exponent or trailing zeros: 0.50 -> '0.5', 1E+3 -> '1000'."""
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")
