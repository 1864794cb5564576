"""Per-key online normalisation for the forecaster: inputs, targets and error scores.

Everything here is plain numbers, updated one point at a time, with a
``snapshot()`` / ``from_snapshot()`` pair, so the Flink operator can keep it in
keyed state and training can replay exactly what the operator will compute.

* :class:`InputNormalizer` scales raw values by the running mean and standard
  deviation of the key's values so far (Welford), so one model serves series of
  any level and unit.
* :func:`time_features` encodes time of day and day of week as sines and cosines:
  the periodic position the attention layer matches against its window.
* :class:`ErrorScorer` turns forecast errors into an anomaly score, after
  Numenta's anomaly likelihood: the Gaussian tail probability of the (short-window
  mean) error under the key's long-run error distribution (exponentially
  weighted, with an adaptive rate at the start), on a log scale in [0, 1); then a
  peak gate keeps a score only where it rises above every score of the last
  ``peak_window`` points, so one burst of large errors reports its onset and each
  new high instead of every point of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.likelihood import (
    DEFAULT_ESTIMATION_SAMPLES,
    DEFAULT_LEARNING_PERIOD,
    HISTORIC_WINDOW,
    NumentaConfig,
    NumentaLikelihood,
)

__all__ = [
    "CLIP",
    "N_FEATURES",
    "STREAM_NUMENTA",
    "ErrorScorer",
    "InputNormalizer",
    "ScorerConfig",
    "feature_row",
    "log_likelihood_score",
    "neg_log10_tail",
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
        decades: Log scale of the likelihood: with ``d = -log10(tail probability)``
            the score is ``d / (d + decades)``, so 0.5 means a tail probability of
            ``10 ** -decades``.
        peak_window: Points a score must exceed to be reported (0: no gate).
        likelihood: ``gaussian`` (the steps above) or ``numenta``: Numenta's anomaly
            likelihood (:mod:`flinkai.anomaly.likelihood`) over ``e / (1 + e)`` and
            the point's value, with the three ``numenta_*`` constants below
            (``short_window``, ``long_rate``, ``warmup`` and ``decades`` then do
            nothing; set ``peak_window`` to 0 for Numenta's own post-processing).
            Its history costs 16 bytes per point of pickled state: the full 8,640
            is about 140 KB per key, over the operator's 64 KB budget; 1,500 (25 KB)
            fits beside the hybrid's 38.6 KB, 3,500 (57 KB) beside the LSTM-only
            model's 2.2 KB.
        numenta_learning_period: Points left out of every fit.
        numenta_estimation_samples: Further points before the first fit.
        numenta_history: Raw scores kept for the fit.
    """

    short_window: int = 1
    long_rate: float = 0.0002
    warmup: int = 100
    decades: float = 10.0
    peak_window: int = 100
    likelihood: Literal["gaussian", "numenta"] = "gaussian"
    numenta_learning_period: int = DEFAULT_LEARNING_PERIOD
    numenta_estimation_samples: int = DEFAULT_ESTIMATION_SAMPLES
    numenta_history: int = HISTORIC_WINDOW

    def __post_init__(self) -> None:
        if self.short_window < 1:
            raise ValueError("short_window must be >= 1")
        if not 0.0 < self.long_rate <= 1.0:
            raise ValueError("long_rate must be in (0, 1]")
        if self.warmup < 1 or self.decades <= 0:
            raise ValueError("warmup must be >= 1 and decades > 0")
        if self.peak_window < 0:
            raise ValueError("peak_window must be >= 0")
        if self.likelihood not in ("gaussian", "numenta"):
            raise ValueError(f"likelihood must be 'gaussian' or 'numenta', got {self.likelihood!r}")
        # NumentaConfig checks the numenta_* constants.
        self.numenta_config()

    def numenta_config(self) -> NumentaConfig:
        """The constants of the ``numenta`` likelihood."""
        return NumentaConfig(
            learning_period=self.numenta_learning_period,
            estimation_samples=self.numenta_estimation_samples,
            historic_window=self.numenta_history,
        )


#: The operator's default scorer: Numenta's likelihood as a stream runs it, with the
#: setting leave-one-group-out chose on the full NAB corpus (docs/anomaly.md): NuPIC's
#: fixed learning and estimation periods (a stream has no file length to take NAB's
#: from) and a 3,000-point history (48 KB of state; with Beam's z-score window
#: the key holds about 57 KB, inside the 64 KB budget. A forecaster's state plus this
#: history is over it: use ``numenta_history`` 1,500 there).
STREAM_NUMENTA = ScorerConfig(
    likelihood="numenta",
    peak_window=0,
    numenta_learning_period=DEFAULT_LEARNING_PERIOD,
    numenta_estimation_samples=DEFAULT_ESTIMATION_SAMPLES,
    numenta_history=3000,
)

# Above this z, erfc nears underflow: the tail's log comes from its asymptotic series.
_Z_ASYMPTOTIC = 30.0


def neg_log10_tail(z: float) -> float:
    """``-log10(P[N(0, 1) > z])``, finite and increasing for every finite ``z``."""
    if z < _Z_ASYMPTOTIC:
        return -math.log10(0.5 * math.erfc(z / math.sqrt(2.0)))
    # Mills ratio: P[N > z] = phi(z) / z * (1 - 1/z^2 + 3/z^4 - 15/z^6 + ...).
    inv2 = 1.0 / (z * z)
    log_tail = (-0.5 * z * z - math.log(z) - 0.5 * math.log(2.0 * math.pi)
                + math.log1p(-inv2 + 3.0 * inv2 * inv2 - 15.0 * inv2**3))  # fmt: skip
    return -log_tail / math.log(10.0)


def log_likelihood_score(z: float, decades: float) -> float:
    """``d / (d + decades)`` with ``d = -log10(P[N(0, 1) > z])``: in [0, 1), rising with z."""
    d = neg_log10_tail(z)
    return d / (d + decades)


@dataclass
class ErrorScorer:
    """Online anomaly score of absolute forecast errors for one key.

    Attributes:
        config: Parameters (not part of the snapshot: rebuilt from the job's config).
        n: Errors seen.
        mean: Long-run mean error.
        var: Long-run error variance.
        recent: The last ``short_window - 1`` errors, oldest first.
        peaks: The last ``peak_window`` likelihood scores (before the gate), oldest first.
    """

    config: ScorerConfig = field(default_factory=ScorerConfig)
    n: int = 0
    mean: float = 0.0
    var: float = 0.0
    recent: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    numenta: NumentaLikelihood | None = None

    def score(self, error: float, value: float = 0.0) -> float:
        """Score one error (of a point with this value) against the errors before it, then learn it."""
        cfg = self.config
        window = [*self.recent, error]
        short = sum(window) / len(window)
        likelihood = 0.0
        if cfg.likelihood == "numenta":
            if self.numenta is None:
                self.numenta = NumentaLikelihood(cfg.numenta_config())
            likelihood = self.numenta.score(error / (1.0 + error), value)
        elif self.n >= cfg.warmup:
            z = (short - self.mean) / math.sqrt(self.var + 1e-12)
            likelihood = log_likelihood_score(z, cfg.decades)
        score = likelihood
        if cfg.peak_window:
            if self.peaks and likelihood <= max(self.peaks):
                score = 0.0
            self.peaks = [*self.peaks, likelihood][-cfg.peak_window :]
        self.n += 1
        rate = max(1.0 / self.n, cfg.long_rate)
        delta = error - self.mean
        self.mean += rate * delta
        self.var = (1.0 - rate) * (self.var + rate * delta * delta)
        self.recent = window[-(cfg.short_window - 1) :] if cfg.short_window > 1 else []
        return score

    def snapshot(self) -> dict[str, Any]:
        numenta = None if self.numenta is None else self.numenta.snapshot()
        return {"n": self.n, "mean": self.mean, "var": self.var, "recent": list(self.recent),
                "peaks": list(self.peaks), "numenta": numenta}  # fmt: skip

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any], config: ScorerConfig) -> ErrorScorer:
        keep = config.short_window - 1
        recent = [float(e) for e in snap["recent"]][-keep:] if keep > 0 else []
        # A snapshot from before the peak gate has no "peaks": the gate starts empty.
        peaks = [float(p) for p in snap.get("peaks", [])]
        peaks = peaks[-config.peak_window :] if config.peak_window else []
        # Numenta state is kept only while that likelihood is configured (older snapshots have none).
        numenta = snap.get("numenta")
        restored = None
        if config.likelihood == "numenta" and numenta is not None:
            restored = NumentaLikelihood.from_snapshot(numenta, config.numenta_config())
        return cls(config, int(snap["n"]), float(snap["mean"]), float(snap["var"]), recent, peaks,
                   restored)  # fmt: skip
