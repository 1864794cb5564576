"""Per-key online normalisation for the forecaster: inputs, targets and error scores.

Everything here is plain numbers, updated one point at a time, with a
``snapshot()`` / ``from_snapshot()`` pair, so the Flink operator can keep it in
keyed state and training can replay exactly what the operator will compute.

* :class:`InputNormalizer` scales raw values by the running mean and standard
  deviation of the key's values so far (Welford), so one model serves series of
  any level and unit.
* :func:`time_features` encodes time of day and day of week as sines and cosines:
  the periodic position the attention layer matches against its window.
* :class:`ErrorScorer` turns forecast errors into an anomaly score: how far the
  mean of the last few errors lies above the key's long-run error distribution
  (exponentially weighted, with an adaptive rate at the start), mapped to [0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLIP",
    "N_FEATURES",
    "ErrorScorer",
    "InputNormalizer",
    "ScorerConfig",
    "feature_row",
    "time_features",
]

#: Columns of one model input: normalised value, then four time features.
N_FEATURES = 5
#: Normalised values are clipped to +-CLIP: a jump of 1000 sigma says no more than 20.
CLIP = 20.0
_DAY_MS = 86_400_000
_WEEK_MS = 7 * _DAY_MS
# Relative floor of the standard deviation: a flat series must not divide by zero.
_REL_STD_FLOOR = 1e-3
_ABS_STD_FLOOR = 1e-6


def time_features(ts_ms: int) -> tuple[float, float, float, float]:
    """``sin``/``cos`` of the time of day and of the time of week (UTC)."""
    day = 2.0 * math.pi * (ts_ms % _DAY_MS) / _DAY_MS
    week = 2.0 * math.pi * (ts_ms % _WEEK_MS) / _WEEK_MS
    return (math.sin(day), math.cos(day), math.sin(week), math.cos(week))


def feature_row(x: float, ts_ms: int) -> npt.NDArray[np.float32]:
    """One model input row: the normalised value and the time features of ``ts_ms``."""
    return np.array([x, *time_features(ts_ms)], dtype=np.float32)


@dataclass
class InputNormalizer:
    """Running mean and standard deviation of a key's values (Welford).

    Attributes:
        count: Values seen.
        mean: Their mean.
        m2: Sum of squared deviations from the mean.
    """

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, value: float) -> None:
        """Add one finite value."""
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    @property
    def std(self) -> float:
        """Population standard deviation, floored (relative to the mean, then absolute)."""
        var = self.m2 / self.count if self.count > 1 else 0.0
        return max(math.sqrt(max(var, 0.0)), _REL_STD_FLOOR * abs(self.mean), _ABS_STD_FLOOR)

    def scale(self, value: float) -> float:
        """``(value - mean) / std``, clipped to ``[-CLIP, CLIP]``; 0 before any value."""
        if self.count == 0:
            return 0.0
        return float(min(max((value - self.mean) / self.std, -CLIP), CLIP))

    def snapshot(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> InputNormalizer:
        return cls(int(snap["count"]), float(snap["mean"]), float(snap["m2"]))


@dataclass(frozen=True)
class ScorerConfig:
    """How forecast errors become scores.

    Attributes:
        short_window: Errors averaged into the current one (1: no smoothing).
        long_rate: Floor of the exponential weight of the long-run error statistics;
            ``1/n`` is used while larger, so the start is a plain running mean.
        warmup: Errors seen before any score other than 0 is given.
        scale: The score is ``z / (z + scale)`` for ``z > 0``, where ``z`` is the
            short-window mean error in long-run standard deviations.
    """

    short_window: int = 5
    long_rate: float = 0.001
    warmup: int = 30
    scale: float = 4.0

    def __post_init__(self) -> None:
        if self.short_window < 1:
            raise ValueError("short_window must be >= 1")
        if not 0.0 < self.long_rate <= 1.0:
            raise ValueError("long_rate must be in (0, 1]")
        if self.warmup < 1 or self.scale <= 0:
            raise ValueError("warmup must be >= 1 and scale > 0")


@dataclass
class ErrorScorer:
    """Online anomaly score of absolute forecast errors for one key.

    Attributes:
        config: Parameters (not part of the snapshot: rebuilt from the job's config).
        n: Errors seen.
        mean: Long-run mean error.
        var: Long-run error variance.
        recent: The last ``short_window - 1`` errors, oldest first.
    """

    config: ScorerConfig = field(default_factory=ScorerConfig)
    n: int = 0
    mean: float = 0.0
    var: float = 0.0
    recent: list[float] = field(default_factory=list)

    def score(self, error: float) -> float:
        """Score one error against the errors before it, then learn it."""
        cfg = self.config
        window = [*self.recent, error]
        short = sum(window) / len(window)
        score = 0.0
        if self.n >= cfg.warmup:
            z = (short - self.mean) / math.sqrt(self.var + 1e-12)
            score = z / (z + cfg.scale) if z > 0 else 0.0
        self.n += 1
        rate = max(1.0 / self.n, cfg.long_rate)
        delta = error - self.mean
        self.mean += rate * delta
        self.var = (1.0 - rate) * (self.var + rate * delta * delta)
        self.recent = window[-(cfg.short_window - 1) :] if cfg.short_window > 1 else []
        return score

    def snapshot(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "var": self.var, "recent": list(self.recent)}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any], config: ScorerConfig) -> ErrorScorer:
        keep = config.short_window - 1
        recent = [float(e) for e in snap["recent"]][-keep:] if keep > 0 else []
        return cls(config, int(snap["n"]), float(snap["mean"]), float(snap["var"]), recent)
