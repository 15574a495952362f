"""Fixed-point slot amounts for one pass: exact integers instead of Decimals.

A pass compares and subtracts slot amounts hundreds of thousands of times; Decimal
arithmetic is ~10x slower than int arithmetic in CPython. Each slot gets a scale
``10**places`` large enough for every amount of that slot in the snapshot (the most
decimal places seen among capacities, usage, device amounts, quanta, requests and
quota limits), so ``units = amount * scale`` is an exact integer and nothing is rounded.
Reasons and placements convert back with :meth:`SlotTable.decimal`.

    >>> t = SlotTable.build([{"cpu": Decimal("1.5")}, {"cpu": Decimal("0.25")}])
    >>> t.units(t.index["cpu"], Decimal("1.5"))
    150
    >>> t.decimal(t.index["cpu"], 25)
    Decimal('0.25')
    >>> t.decimal(t.index["cpu"], 200) == 2
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

__all__ = ["SlotTable"]

_ONE = Decimal(1)


def _places(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):  # NaN / Infinity
        raise ValueError(f"not a finite amount: {value}")
    return -exponent if exponent < 0 else 0


class SlotTable:
    """Slot name <-> index, and the exact integer scale of each slot in this pass."""

    __slots__ = ("_decimals", "_known", "index", "names", "places")

    def __init__(self, places: Mapping[str, int]) -> None:
        self.names: list[str] = sorted(places)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.places: list[int] = [places[name] for name in self.names]
        # amount -> units per slot: snapshots repeat the same few amounts thousands of
        # times, and a dict lookup (Decimal caches its hash) beats scaleb + int
        self._known: list[dict[Decimal, int]] = [{} for _ in self.names]
        self._decimals: list[dict[int, Decimal]] = [{} for _ in self.names]  # the reverse

    @classmethod
    def build(cls, amounts: Iterable[Mapping[str, Decimal]]) -> SlotTable:
        """A table covering every slot named in *amounts*, each at its finest scale."""
        values: dict[str, set[Decimal]] = {}
        for mapping in amounts:
            for name, value in mapping.items():
                found = values.get(name)
                if found is None:
                    values[name] = {value}
                else:
                    found.add(value)
        return cls.from_values(values)

    @classmethod
    def from_values(cls, values: Mapping[str, Iterable[Decimal]]) -> SlotTable:
        """A table from the distinct amounts seen per slot (cheaper: few are distinct)."""
        return cls({name: max((_places(v) for v in vs), default=0) for name, vs in values.items()})

    def __len__(self) -> int:
        return len(self.names)

    def units(self, i: int, value: Decimal) -> int:
        """*value* of slot *i* as an exact integer number of units."""
        known = self._known[i]
        units = known.get(value)
        if units is None:
            units = known[value] = int(value.scaleb(self.places[i]))
        return units

    def decimal(self, i: int, units: int) -> Decimal:
        """Units of slot *i* back as a Decimal (``150`` -> ``1.5`` for cpu at 2 places)."""
        known = self._decimals[i]
        found = known.get(units)
        if found is not None:
            return found
        value = Decimal(units).scaleb(-self.places[i])
        # 2.00 -> 2 (never 2E+0), 0.60 -> 0.6
        whole = value == value.to_integral_value()
        value = value.quantize(_ONE) if whole else value.normalize()
        known[units] = value
        return value

    def vector(self, slots: Mapping[str, Decimal]) -> list[int]:
        """A full-length unit vector (slots not in *slots* are zero)."""
        vec = [0] * len(self.names)
        index, known_all = self.index, self._known
        for name, value in slots.items():
            i = index[name]
            known = known_all[i]
            units = known.get(value)
            if units is None:
                units = known[value] = int(value.scaleb(self.places[i]))
            vec[i] = units
        return vec

    def pairs(self, slots: Mapping[str, Decimal]) -> tuple[tuple[int, int], ...]:
        """``((slot index, units), ...)`` for the non-zero slots, in slot-name order."""
        index = self.index
        return tuple(sorted((index[n], self.units(index[n], v)) for n, v in slots.items() if v))
