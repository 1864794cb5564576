"""Numenta's anomaly likelihood, as NAB's ``numenta`` detector applies it to raw scores.

Written from the published description (Ahmad, Lavin, Purdy & Agha, "Unsupervised
real-time anomaly detection for streaming data", Neurocomputing 262, 2017, section
4; the documentation of NuPIC's / htm.core's ``AnomalyLikelihood``; NAB's
``numenta`` detector). Per point, with ``s`` the detector's raw anomaly score in
[0, 1] and ``v`` the series value:

1. **Learning and estimation periods.** The first ``learning_period +
   estimation_samples`` points have likelihood 0.5 (no opinion; about 0.03 after
   the log scale of step 5). In NAB both come from the
   file's probationary period ``p`` (15% of the file, at most 750 rows):
   ``learning_period = floor(p / 2)``, ``estimation_samples = p - learning_period``
   (:meth:`NumentaConfig.for_nab`).
2. **Distribution.** The last ``historic_window`` (8,640) raw scores are kept.
   Whenever the point count is a multiple of ``reestimation_period`` (100), and at
   the first scored point, a Gaussian is fitted to the ``averaging_window`` (10)-point
   moving averages of that history (the average restarts at the history's first
   point), skipping the points still inside the learning period; the mean is
   floored at ``MEAN_FLOOR`` and the variance at ``VARIANCE_FLOOR``. If the series
   values over the same points are flat (variance below ``FLAT_VALUE_VARIANCE``) the
   distribution is the null one (mean 0.5, variance 1e6), so nothing is unlikely.
3. **Two-sided tail.** The moving average ``a`` of the last 10 raw scores (this one
   included) is compared with the Gaussian: an ``a`` below the mean is mirrored
   above it (``2 mean - a``), and ``q = P[N(0, 1) > z]``; so an unusually *low*
   score is as unlikely as an unusually high one.
4. **Alert suppression.** When ``q`` is in the red zone (``q <= RED_TAIL`` = 1e-5)
   and the previous point's ``q`` was too, ``q`` becomes ``YELLOW_TAIL`` (1e-3):
   a run of red points reports its first only.
5. **Likelihood and log scale.** ``L = 1 - q``; the score is
   ``log(1 + LOG_EPSILON - L) / log(LOG_EPSILON)`` (NAB's ``computeLogLikelihood``:
   0 at ``L = 0``, 1 at ``L = 1``).
6. **Range override.** A value more than ``SPATIAL_TOLERANCE`` (5%) of the range of
   values seen so far outside that range scores 1.0 (once two distinct values have
   been seen); then the range grows to include it.

The history is scored before the point is added, so the distribution never sees the
point it scores. The state is plain data (:meth:`NumentaLikelihood.snapshot`): the
history as float64 bytes (about 138 KB at the full 8,640-point window, so above the
operator's 64 KB per-key budget; a smaller ``historic_window`` fits).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "AVERAGING_WINDOW",
    "DEFAULT_ESTIMATION_SAMPLES",
    "DEFAULT_LEARNING_PERIOD",
    "FLAT_VALUE_VARIANCE",
    "HISTORIC_WINDOW",
    "LOG_EPSILON",
    "MEAN_FLOOR",
    "RED_TAIL",
    "REESTIMATION_PERIOD",
    "SPATIAL_TOLERANCE",
    "VARIANCE_FLOOR",
    "YELLOW_TAIL",
    "Gaussian",
    "NumentaConfig",
    "NumentaLikelihood",
    "log_likelihood",
    "moving_averages",
    "tail_probability",
]

#: Raw scores averaged into the value that is compared with the distribution.
AVERAGING_WINDOW = 10
#: Raw scores kept for estimating the distribution (30 days of 5-minute points).
HISTORIC_WINDOW = 8640
#: The distribution is re-fitted whenever the point count is a multiple of this.
REESTIMATION_PERIOD = 100
#: Defaults outside NAB (NuPIC's): learning period and estimation samples.
DEFAULT_LEARNING_PERIOD = 288
DEFAULT_ESTIMATION_SAMPLES = 100
#: Floors of the fitted Gaussian: a near-silent detector must not turn every blip red.
MEAN_FLOOR = 0.03
VARIANCE_FLOOR = 0.0003
#: Values this flat over the history give the null distribution (nothing is unlikely).
FLAT_VALUE_VARIANCE = 1.5e-5
NULL_MEAN = 0.5
NULL_VARIANCE = 1e6
#: Tail probabilities of the red and yellow alert zones (likelihood 0.99999 and 0.999).
RED_TAIL = 1e-5
YELLOW_TAIL = 1e-3
#: ``computeLogLikelihood``'s offset: the score is ``log(1 + eps - L) / log(eps)``.
LOG_EPSILON = 1e-10
#: A value this share of the seen range outside that range scores 1.0.
SPATIAL_TOLERANCE = 0.05
#: Likelihood while the distribution is being learnt (before the log scale).
NO_OPINION = 0.5


@dataclass(frozen=True)
class Gaussian:
    """A fitted normal distribution of averaged raw scores."""

    mean: float
    variance: float

    @property
    def stdev(self) -> float:
        return math.sqrt(self.variance)


NULL_DISTRIBUTION = Gaussian(NULL_MEAN, NULL_VARIANCE)


def tail_probability(x: float, dist: Gaussian) -> float:
    """Probability of a sample at least as far from the mean as ``x``, on ``x``'s side."""
    if x < dist.mean:
        x = 2.0 * dist.mean - x  # mirrored: unusually low is as unlikely as unusually high
    z = (x - dist.mean) / dist.stdev
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def log_likelihood(likelihood: float) -> float:
    """NAB's log scale of a likelihood in [0, 1]: 0 at 0, 1 at 1, 0.5 at ``1 - 1e-5``."""
    return math.log(1.0 + LOG_EPSILON - likelihood) / math.log(LOG_EPSILON)


def moving_averages(raw: np.ndarray, window: int) -> np.ndarray:
    """Trailing means of ``window`` points; the first ``window - 1`` average fewer."""
    sums = np.cumsum(raw, dtype=np.float64)
    out = sums.copy()
    out[window:] = sums[window:] - sums[:-window]
    counts = np.minimum(np.arange(1, len(raw) + 1), window)
    return np.asarray(out / counts, dtype=np.float64)


def _fit(raw: np.ndarray, values: np.ndarray, skip: int, window: int) -> Gaussian:
    averaged = moving_averages(raw, window)[skip:]
    if len(averaged) == 0:
        return NULL_DISTRIBUTION
    if float(np.var(values[skip:])) < FLAT_VALUE_VARIANCE:
        return NULL_DISTRIBUTION
    mean = max(float(np.mean(averaged)), MEAN_FLOOR)
    return Gaussian(mean, max(float(np.var(averaged)), VARIANCE_FLOOR))


@dataclass(frozen=True)
class NumentaConfig:
    """Constants of the likelihood; the defaults are Numenta's published ones.

    Attributes:
        learning_period: Points whose raw scores are left out of every fit.
        estimation_samples: Further points before the first fit (score 0.5 until then).
        historic_window: Raw scores kept for the fit.
        reestimation_period: The fit is redone when the point count is a multiple of it.
        averaging_window: Raw scores in each moving average.
        suppress_repeats: Red tails right after a red tail become yellow.
        spatial: A value more than 5% of the seen range outside it scores 1.0.
    """

    learning_period: int = DEFAULT_LEARNING_PERIOD
    estimation_samples: int = DEFAULT_ESTIMATION_SAMPLES
    historic_window: int = HISTORIC_WINDOW
    reestimation_period: int = REESTIMATION_PERIOD
    averaging_window: int = AVERAGING_WINDOW
    suppress_repeats: bool = True
    spatial: bool = True

    def __post_init__(self) -> None:
        if self.learning_period < 0 or self.estimation_samples < 0:
            raise ValueError("learning_period and estimation_samples must be >= 0")
        if min(self.historic_window, self.reestimation_period, self.averaging_window) < 1:
            raise ValueError("historic_window, reestimation_period, averaging_window must be >= 1")

    @classmethod
    def for_nab(cls, probation: int, **overrides: Any) -> NumentaConfig:
        """NAB's ``numenta`` detector: half the probationary rows learn, half estimate."""
        learning = probation // 2
        return cls(learning_period=learning, estimation_samples=probation - learning, **overrides)


@dataclass
class NumentaLikelihood:
    """Numenta's anomaly likelihood for one key (the steps are in the module doc).

    Attributes:
        config: Constants (not part of the snapshot).
        iteration: Points seen.
        raw: The last ``historic_window`` raw scores, oldest first.
        values: The series values of the same points.
        dist: The current fit, None before the first.
        recent: The last ``averaging_window`` raw scores (the moving average's terms).
        prev_tail: The previous point's tail probability before suppression (None: none yet).
        lo, hi: The range of values seen so far.
    """

    config: NumentaConfig = field(default_factory=NumentaConfig)
    iteration: int = 0
    # float64 arrays, not deques: the operator rebuilds them from bytes at every point,
    # and an array does that in one copy instead of one Python float per element.
    raw: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))
    dist: Gaussian | None = None
    recent: deque[float] = field(default_factory=deque)
    prev_tail: float | None = None
    lo: float | None = None
    hi: float | None = None

    def score(self, raw_score: float, value: float) -> float:
        """Score one point (raw score in [0, 1], series value), then learn it."""
        cfg = self.config
        outside = self._outside_range(value)
        if self.iteration < cfg.learning_period + cfg.estimation_samples:
            out = log_likelihood(NO_OPINION)
        else:
            if self.dist is None or self.iteration % cfg.reestimation_period == 0:
                self._refit()
            assert self.dist is not None
            self.recent.append(raw_score)
            while len(self.recent) > cfg.averaging_window:
                self.recent.popleft()
            tail = tail_probability(sum(self.recent) / len(self.recent), self.dist)
            shown = tail
            if (
                cfg.suppress_repeats
                and tail <= RED_TAIL
                and (self.prev_tail is not None and self.prev_tail <= RED_TAIL)
            ):
                shown = YELLOW_TAIL
            self.prev_tail = tail
            out = log_likelihood(1.0 - shown)
        self._learn(raw_score, value)
        return 1.0 if (cfg.spatial and outside) else out

    def _outside_range(self, value: float) -> bool:
        if self.lo is None or self.hi is None or self.lo == self.hi:
            return False
        tolerance = (self.hi - self.lo) * SPATIAL_TOLERANCE
        return value > self.hi + tolerance or value < self.lo - tolerance

    def _refit(self) -> None:
        cfg = self.config
        shifted_out = max(0, self.iteration - cfg.historic_window)
        skip = min(self.iteration, max(0, cfg.learning_period - shifted_out))
        raw = np.frombuffer(self.raw, dtype=np.float64).copy()
        values = np.frombuffer(self.values, dtype=np.float64).copy()
        self.dist = _fit(raw, values, skip, cfg.averaging_window)
        # The moving average continues from the history's last raw scores, and the
        # previous tail is that of the history's last average under the new fit.
        tail = self.raw[-cfg.averaging_window :].tolist()
        self.recent = deque(tail)
        if tail:
            self.prev_tail = tail_probability(sum(tail) / len(tail), self.dist)

    def _learn(self, raw_score: float, value: float) -> None:
        cfg = self.config
        self.raw.append(raw_score)
        self.values.append(value)
        excess = len(self.raw) - cfg.historic_window
        if excess > 0:
            del self.raw[:excess]
            del self.values[:excess]
        self.iteration += 1
        self.lo = value if self.lo is None else min(self.lo, value)
        self.hi = value if self.hi is None else max(self.hi, value)

    def snapshot(self) -> dict[str, Any]:
        """Plain data: numbers, float64 byte strings, None."""
        return {
            "iteration": self.iteration,
            "raw": self.raw.tobytes(),
            "values": self.values.tobytes(),
            "dist": None if self.dist is None else [self.dist.mean, self.dist.variance],
            "recent": list(self.recent),
            "prev_tail": self.prev_tail,
            "lo": self.lo,
            "hi": self.hi,
        }

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any], config: NumentaConfig) -> NumentaLikelihood:
        def floats(blob: bytes) -> array[float]:
            out = array("d")
            out.frombytes(blob)
            excess = len(out) - config.historic_window
            if excess > 0:
                del out[:excess]
            return out

        dist = snap["dist"]
        return cls(
            config=config,
            iteration=int(snap["iteration"]),
            raw=floats(snap["raw"]),
            values=floats(snap["values"]),
            dist=None if dist is None else Gaussian(float(dist[0]), float(dist[1])),
            recent=deque(float(r) for r in snap["recent"]),
            prev_tail=None if snap["prev_tail"] is None else float(snap["prev_tail"]),
            lo=None if snap["lo"] is None else float(snap["lo"]),
            hi=None if snap["hi"] is None else float(snap["hi"]),
        )
