"""Adaptive window length: the clamp edges, None/negative/NaN delays, the sizer."""

from __future__ import annotations

import math

import pytest

from flinkai.errors import ConfigError
from flinkai.functions.adaptive_window import (
    AdaptiveWindowConfig,
    AdaptiveWindowSizer,
    adaptive_window_ms,
)


@pytest.mark.parametrize(
    ("delay_ms", "expected"),
    [
        (0, 5000),
        (10_000, 6000),  # slope 0.1
        (549_990, 59_999),  # just under the ceiling
        (550_000, 60_000),  # exactly at it
        (10_000_000, 60_000),  # far above it
        (math.inf, 60_000),
        (-5_000, 5000),  # clock skew: treated as no delay
    ],
)
def test_defaults_and_upper_clamp(delay_ms: float, expected: int) -> None:
    assert adaptive_window_ms(delay_ms) == expected


def test_lower_clamp() -> None:
    cfg = AdaptiveWindowConfig(base_ms=500, min_ms=1000)
    assert adaptive_window_ms(0, cfg) == 1000
    assert adaptive_window_ms(4_000, cfg) == 1000  # 500 + 400 still below the floor
    assert adaptive_window_ms(6_000, cfg) == 1100


def test_none_means_base_length() -> None:
    assert adaptive_window_ms(None) == 5000
    assert adaptive_window_ms(None, AdaptiveWindowConfig(base_ms=100, min_ms=1000)) == 1000


def test_nan_delay_is_an_error() -> None:
    with pytest.raises(ValueError, match="NaN"):
        adaptive_window_ms(math.nan)


def test_result_is_int() -> None:
    assert isinstance(adaptive_window_ms(12_345.6), int)
    assert adaptive_window_ms(12_345.6) == 6234


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_ms": 0},
        {"min_ms": 2000, "max_ms": 1000},
        {"delay_divisor": 0},
        {"delay_divisor": math.nan},
    ],
)
def test_invalid_config(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        AdaptiveWindowConfig(**kwargs)  # type: ignore[arg-type]


def test_sizer_follows_delay_and_shrinks_once() -> None:
    sizer = AdaptiveWindowSizer()
    assert sizer.current_ms == 5000
    assert sizer.next_window_ms(10_000) == 6000
    sizer.shrink()
    sizer.shrink()  # idempotent until consumed
    assert sizer.shrink_pending
    assert sizer.next_window_ms(10_000) == 1000
    assert not sizer.shrink_pending
    assert sizer.next_window_ms(10_000) == 6000
    assert sizer.next_window_ms(None) == 5000


def test_sizer_rejects_nan_even_when_shrinking() -> None:
    sizer = AdaptiveWindowSizer()
    sizer.shrink()
    with pytest.raises(ValueError):
        sizer.next_window_ms(math.nan)
    assert sizer.shrink_pending  # the failed call did not consume the shrink


def test_sizer_snapshot_roundtrip() -> None:
    cfg = AdaptiveWindowConfig(min_ms=2000)
    sizer = AdaptiveWindowSizer(cfg)
    sizer.next_window_ms(100_000)
    sizer.shrink()
    restored = AdaptiveWindowSizer.from_snapshot(sizer.snapshot(), cfg)
    assert restored.current_ms == sizer.current_ms == 15_000
    assert restored.next_window_ms(0) == 2000
