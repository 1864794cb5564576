"""Median, min and max over repeats, and ratios paired within a repeat."""

from __future__ import annotations

import pytest

from flinkai_bench.shared.repeats import ratio_spread, spread


def test_spread_is_median_min_max_of_the_values_present() -> None:
    s = spread([3.0, None, 1.0, 2.0])
    assert s is not None
    assert (s.median, s.min, s.max, s.n, s.repeats) == (2.0, 1.0, 3.0, 3, 4)
    assert s.text(1) == "2.0 (min 1.0, max 3.0; 3 of 4 repeats)"
    assert spread([None, None]) is None


def test_one_repeat_says_so() -> None:
    s = spread([0.83])
    assert s is not None and s.text() == "0.83 (1 repeat)"


def test_ratios_pair_within_a_repeat_not_across() -> None:
    # Medians of each side would give 20/20 = 1.0; the per-repeat ratios are 2, 0.5, 1.
    s = ratio_spread([40.0, 10.0, 20.0], [20.0, 20.0, 20.0])
    assert s is not None and (s.median, s.min, s.max) == (1.0, 0.5, 2.0)
    s = ratio_spread([40.0, 10.0, None], [20.0, 0.0, 5.0])
    assert s is not None and s.values == (2.0,) and s.repeats == 3


def test_ratio_sides_must_have_one_value_per_repeat() -> None:
    with pytest.raises(ValueError):
        ratio_spread([1.0, 2.0], [1.0])
