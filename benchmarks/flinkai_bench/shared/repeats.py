"""Repeats of a noisy measurement: median with min and max, and ratios paired per repeat.

The machines these benches run on are shared, so one run's figure moves by tens of
percent. A headline figure is therefore the median of several repeats, printed with
its min and max; a ratio is taken within each repeat (both sides measured minutes
apart on the same load) and only then summarised.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Spread", "ratio_spread", "spread"]


@dataclass(frozen=True)
class Spread:
    """Median, min and max of the repeats that produced a value.

    Attributes:
        median: Median of ``values``.
        min: Smallest value.
        max: Largest value.
        values: The values, in repeat order.
        repeats: Repeats asked for; ``len(values)`` is smaller when some gave no value.
    """

    median: float
    min: float
    max: float
    values: tuple[float, ...]
    repeats: int

    @property
    def n(self) -> int:
        return len(self.values)

    def text(self, digits: int = 2, unit: str = "") -> str:
        """``median (min-max, n/repeats)``, or just the value for one repeat."""
        if self.n == 1:
            return f"{self.median:.{digits}f}{unit} (1 repeat)"
        return (
            f"{self.median:.{digits}f}{unit} (min {self.min:.{digits}f}, "
            f"max {self.max:.{digits}f}; {self.n} of {self.repeats} repeats)"
        )


def spread(values: Sequence[float | None]) -> Spread | None:
    """Median/min/max over the repeats that gave a value; None when none did."""
    known = tuple(float(v) for v in values if v is not None)
    if not known:
        return None
    return Spread(statistics.median(known), min(known), max(known), known, len(values))


def ratio_spread(
    numerators: Sequence[float | None], denominators: Sequence[float | None]
) -> Spread | None:
    """``numerator / denominator`` within each repeat, then :func:`spread` of those.

    A repeat where either side is missing or the denominator is not positive gives no
    ratio (it still counts in ``repeats``).
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators but {len(denominators)} denominators")
    ratios = [
        None if a is None or b is None or b <= 0 else a / b
        for a, b in zip(numerators, denominators, strict=True)
    ]
    return spread(ratios)
