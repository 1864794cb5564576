"""An adaptive-resonance detector after ARTime (Mark Hampton, 2021; NAB scoreboard 74.9).

ARTime clusters short windows of a downsampled series with a dual-vigilance fuzzy
ART network (:mod:`flinkai_bench.research.anomaly.fuzzy_art`) and reports an anomaly when a window
resonates with no known cluster. This module re-implements the published
ARTimeNAB algorithm in the project's own code, with each constant named. Per value:

1. **Downsample.** Every ``step`` values (``probation // 104``, at least 1) one
   sample is taken: the window's mean, or its extreme (the one further from a
   running average) when that is at least 10% away from the mean.
2. **Discretise.** The sample is scaled into the value range, rounded to one of 80
   levels and snapped to a running median level when within 0.075 of it.
3. **Features.** The last 8 samples, min-max scaled, and their 3-level Haar
   transform, min-max scaled: 16 numbers in ``[0, 1]``.
4. **Probation.** The first ``probation / step`` feature windows are held back, an
   initial vigilance is found by training a scratch network on them (most typical
   first), and then the real network learns them in order; nothing is scored.
5. **Detect.** Later windows train the network. A window that founds a new cluster
   is an anomaly unless alerts are masked (after a recent anomaly or a recent new
   cluster) and it is not far below the last anomaly's match. Its score is a
   confidence from the match and the vigilance bounds.
6. **Vigilance.** After an anomaly, or every half probation, the upper bound moves
   to the mean match (at most 0.97) and the lower bound moves up towards the
   recent worst match, or down by the recent shortfall.

Inputs, and where NAB's come from:

* **The value range.** NAB hands every detector the whole file's min/max (future
  data). Without one, the range is learnt from the probationary values themselves
  and widened by ``margin`` of their span on each side; the probation is replayed
  once the range is known, which gives the same output as an online run because
  nothing is scored before the probation ends. A value outside the range is
  clipped to it.
* **The probation.** NAB's is 15% of the file's length (at most 750 values), so it
  also carries future data: the length. A stream has none and must fix it.

The constants are ARTime's own. They were set by its author on the NAB corpus, so
its NAB score is in-sample in the sense of ``docs/anomaly.md``. Run on NAB with
NAB's inputs, this code reproduces the published ARTime results file point by
point (docs/anomaly.md, "ARTime").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flinkai.anomaly.errors import DetectorInputError
from flinkai_bench.research.anomaly.fuzzy_art import DualVigilanceArt

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_MAX_CATEGORIES",
    "FEATURE_WINDOW",
    "ArtimeConfig",
    "ArtimeDetector",
    "haar_features",
    "initial_vigilance",
]

#: Samples per feature window (a power of two for the Haar transform).
FEATURE_WINDOW = 8
#: Feature windows per probationary period: sets the downsampling step.
WINDOWS_PER_PROBATION = 13
#: Discretisation levels over the value range.
LEVELS = 80
#: A level this close to the running median (share of the range) is snapped to it.
MEDIAN_SNAP = 0.075
#: An extreme is kept over the mean only if at least this share of the mean away.
SPIKE_SHARE = 0.1
#: Vigilance of the scratch network that finds the initial vigilance.
INITIAL_RHO = 0.80
#: Windows after an anomaly during which alerts are masked and the bounds are reset.
MASK_WINDOWS = int(FEATURE_WINDOW * 1.5)
#: Cap on the upper vigilance bound.
RHO_UB_CAP = 0.97
#: Share of the gap to the recent worst match the lower bound climbs per update.
RHO_LB_CLIMB = 0.19
#: Shortfalls below the upper bound that count when the lower bound falls, and their cap.
SHORTFALL_FLOOR, SHORTFALL_CAP = 0.05, 0.37
#: Smallest fall of the lower bound per update (halved when applied).
MIN_FALL = 0.01
#: A masked new cluster still alerts if its match is below this share of the last
#: anomaly's: within ``MASK_WINDOWS`` of it, and later.
BELOW_LAST_MASKED, BELOW_LAST_LATER = 0.90, 0.70
#: Confidence weights: upper bound, lower bound, energy mismatch.
CONF_UB, CONF_LB, CONF_ENERGY = 0.35, 0.65, 1.5
#: Largest match used in the confidence (keeps ``1 - match`` off zero).
CONF_MATCH_CAP = 0.999
#: Learnt range: share of the probation's span added on each side. Every fold of the
#: leave-one-group-out choice over 0-3 chose 1.0 (docs/anomaly.md, "ARTime").
DEFAULT_MARGIN = 1.0
#: Categories kept per key: 200 x 32 float64 weights are 51 KB, inside the operator's
#: 64 KB per key with the rest of the state (set by the budget; on NAB with NAB's
#: inputs 74.81 against 74.85 unbounded, docs/anomaly.md).
DEFAULT_MAX_CATEGORIES = 200
_SNAPSHOT_VERSION = 1


def _even(n: int) -> int:
    return n - n % 2


@dataclass(frozen=True)
class ArtimeConfig:
    """Inputs of one series.

    Attributes:
        probation: Leading values learnt before scoring (NAB's probationary length;
            rounded down to even).
        value_min: Lowest value expected (NAB: the file's minimum); ``None`` (with
            ``value_max``) learns the range from the probation.
        value_max: Highest value expected (NAB: the file's maximum).
        margin: Learnt range only: share of the probation's span added on each side.
        max_categories: Categories kept (the least recently best dropped past it);
            0 keeps all, as ARTime does.

    Raises:
        DetectorInputError: A probation under two feature windows, one end of the
            range only, a non-finite or inverted range, or a negative margin.
    """

    probation: int
    value_min: float | None = None
    value_max: float | None = None
    margin: float = DEFAULT_MARGIN
    max_categories: int = DEFAULT_MAX_CATEGORIES

    def __post_init__(self) -> None:
        if _even(self.probation) < 2 * FEATURE_WINDOW:
            raise DetectorInputError(
                f"ARTime: probation must be >= {2 * FEATURE_WINDOW} values, got {self.probation}"
            )
        if (self.value_min is None) != (self.value_max is None):
            raise DetectorInputError("ARTime: give both value_min and value_max, or neither")
        if self.value_min is not None and self.value_max is not None:
            if not (math.isfinite(self.value_min) and math.isfinite(self.value_max)):
                raise DetectorInputError("ARTime: the value range must be finite")
            if self.value_max < self.value_min:
                raise DetectorInputError(
                    f"ARTime: value_max {self.value_max} is below value_min {self.value_min}"
                )
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise DetectorInputError(f"ARTime: margin must be >= 0, got {self.margin}")
        if self.max_categories != 0 and self.max_categories < 2:
            raise DetectorInputError(
                f"ARTime: max_categories must be 0 (all) or >= 2, got {self.max_categories}"
            )

    @property
    def step(self) -> int:
        """Values per downsampled sample."""
        return max(1, _even(self.probation) // (FEATURE_WINDOW * WINDOWS_PER_PROBATION))

    @property
    def trend_windows(self) -> int:
        """Samples in the probationary period (the trend window)."""
        return _even(self.probation) // self.step

    def learnt_range(self, values: list[float]) -> tuple[float, float]:
        """The range learnt from the probation's values: their span, widened by
        ``margin`` of it on each side (a flat probation counts its level's size, or 1)."""
        low, high = min(values), max(values)
        span = (high - low) or max(abs(low), 1.0)
        return low - self.margin * span, high + self.margin * span


def _haar(x: np.ndarray) -> np.ndarray:
    """Full orthonormal Haar transform of a power-of-two length signal.

    Order: the coarsest average, then details coarse to fine. A detail is
    ``(later - earlier) / sqrt(2)``, the sign of ARTime's wavelet library; the sign
    changes the scaled features, so it changes which windows resonate.
    """
    out: list[np.ndarray] = []
    a = x
    while len(a) > 1:
        even, odd = a[0::2], a[1::2]
        out.append((odd - even) / math.sqrt(2.0))
        a = (even + odd) / math.sqrt(2.0)
    return np.concatenate([a, *reversed(out)])


def _unit(x: np.ndarray) -> np.ndarray:
    x = x - x.min()
    top = x.max()
    return x / top if top != 0 else x


def haar_features(window: np.ndarray) -> np.ndarray:
    """The 16 features of one window of samples: scaled Haar transform, then the samples."""
    return np.concatenate([_unit(_haar(_unit(window))), window])


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity, with ``1 - |other|`` against a zero vector."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0:
        return 1.0 - nb
    if nb == 0.0:
        return 1.0 - na
    return float(a @ b) / (na * nb)


def initial_vigilance(features: np.ndarray, trend_windows: int) -> float:
    """The vigilance to start with: train a scratch network at ``INITIAL_RHO`` on the
    probation's windows, most typical last (ascending total similarity), and take its
    mean match over the second half.

    Args:
        features: One row per window.
        trend_windows: Samples in the probationary period.
    """
    n = len(features)
    sims = np.ones((n, n))
    for i in range(n):
        for j in range(i):
            sims[i, j] = sims[j, i] = _similarity(features[i], features[j])
    order = np.argsort(sims.sum(axis=0), kind="stable")
    art = DualVigilanceArt(features.shape[1], INITIAL_RHO, INITIAL_RHO)
    matches = [art.train(features[k]).match for k in order]
    return float(np.mean(matches[trend_windows // 2 - 1 :]))


@dataclass
class _Median:
    """A running median over discretised levels (approximate, as ARTime's)."""

    bins: list[int] = field(default_factory=lambda: [0] * (LEVELS + 1))
    level: int = 0
    below: int = 0
    above: int = 0

    def add(self, level: int, count: int) -> int:
        """Count ``level`` as the ``count``-th sample; the median level after it."""
        self.bins[level] += 1
        if count == 1:
            self.level = level
        if self.level > level:
            self.below += 1
        elif self.level < level:
            self.above += 1
        half = count // 2
        if half < self.above:
            self.below += self.bins[self.level]
            self.level += 1
            while self.bins[self.level] == 0:
                self.level += 1
            self.above -= self.bins[self.level]
        elif half < self.below:
            self.above += self.bins[self.level]
            self.level -= 1
            while self.bins[self.level] == 0:
                self.level -= 1
            self.below -= self.bins[self.level]
        return self.level


class ArtimeDetector:
    """One series' ARTime state; :meth:`update` scores each value in order.

    The state is plain data (:meth:`snapshot`): the network's weights (one row of
    32 floats per category, at most ``max_categories`` rows), the held probation and
    a few counters.
    """

    def __init__(self, config: ArtimeConfig) -> None:
        self.config = config
        self.step = config.step
        self.trend = config.trend_windows
        self.art = DualVigilanceArt(2 * FEATURE_WINDOW, max_categories=config.max_categories)
        self.range: tuple[float, float] | None = None
        if config.value_min is not None and config.value_max is not None:
            self.range = (config.value_min, config.value_max)
        self._pending: list[float] = []  # learnt range: values before the range is known
        self._i = 0  # values seen
        self._n = 0  # samples taken
        self._raw: deque[float] = deque([0.0] * self.step, maxlen=self.step)
        self._average = 0.0
        self._median = _Median()
        self._window = np.zeros(FEATURE_WINDOW)
        self._held: list[np.ndarray] = []
        # detection state, indexed by sample number (1-based, as the windows count)
        self._last_anomaly = 0
        self._last_anomaly_match = 0.0
        self._last_update = 0
        self._mask_after_cluster = False
        self._since_new_cluster = 0
        self._match_sum = 0.0
        self._recent_match: deque[float] = deque([1.0] * (self.trend // 2 + 1))
        self._recent_shortfall: deque[float] = deque([0.0] * (self.trend + 1))
        # each anomaly's worst match while it is masked: the sum of all but the last, the count
        self._anomaly_sum = 0.0
        self._anomaly_count = 0
        self._anomaly_last = 0.0

    def update(self, value: float) -> float:
        """Score one value: 0.0 unless it completes a sample that raises an anomaly.

        Raises:
            DetectorInputError: A non-finite value (the state is left as it was).
        """
        if not math.isfinite(value):
            raise DetectorInputError(f"ARTime: value must be finite, got {value!r}")
        if self.range is None:
            self._pending.append(float(value))
            if len(self._pending) < self.step * self.trend:
                return 0.0
            # the probation is complete: fix the range and replay it (nothing is scored yet)
            self.range = self.config.learnt_range(self._pending)
            pending, self._pending = self._pending, []
            for v in pending:
                self._consume(v)
            return 0.0
        return self._consume(value)

    def _consume(self, value: float) -> float:
        self._i += 1
        self._raw.append(value)
        if self._i % self.step:
            return 0.0
        self._n += 1
        features = self._features(self._sample())
        if self._n <= self.trend:
            self._held.append(features)
            if self._n == self.trend:
                self._learn_probation()
            return 0.0
        return self._detect(features, self._n)

    def _sample(self) -> float:
        raw = np.asarray(self._raw)
        mean, hi, lo = float(raw.mean()), float(raw.max()), float(raw.min())
        if self._n == 1:
            self._average = mean
        self._average = (self._average + mean) / 2.0
        x = lo if abs(hi - self._average) < abs(lo - self._average) else hi
        if abs(x - mean) < SPIKE_SHARE * mean:
            x = mean
        assert self.range is not None
        low, high = self.range
        span = high - low
        x -= low
        if span != 0:
            x /= span
        level = min(LEVELS, max(0, round(x * LEVELS)))
        median = self._median.add(level, self._n) / LEVELS
        x = level / LEVELS
        return median if abs(x - median) < MEDIAN_SNAP else x

    def _features(self, sample: float) -> np.ndarray:
        self._window = np.append(self._window[1:], sample)
        if self._n < FEATURE_WINDOW:
            return np.zeros(2 * FEATURE_WINDOW)
        return haar_features(self._window)

    def _learn_probation(self) -> None:
        held = np.asarray(self._held)
        rho = initial_vigilance(held[FEATURE_WINDOW - 1 :], self.trend)
        self.art.rho_lb = self.art.rho_ub = rho
        for n, features in enumerate(self._held, start=1):
            self._detect(features, n)
        self._held = []

    def _detect(self, features: np.ndarray, n: int) -> float:
        art = self.art
        since_anomaly = n - self._last_anomaly
        reset_after_anomaly = since_anomaly == MASK_WINDOWS
        reset_for_trend = n - self._last_update >= self.trend // 2
        masked_by_anomaly = since_anomaly <= MASK_WINDOWS
        if (
            n > self.trend + MASK_WINDOWS
            and self._mask_after_cluster
            and self._since_new_cluster >= MASK_WINDOWS
        ):
            self._mask_after_cluster = False
        # windows before the first full one keep the indexes aligned but teach nothing
        result = art.train(features, learn=n >= FEATURE_WINDOW)
        new_cluster = result.new_cluster or n < FEATURE_WINDOW
        match = result.match
        self._since_new_cluster = 0 if new_cluster else self._since_new_cluster + 1
        self._match_sum += match
        self._recent_match.popleft()
        self._recent_match.append(match)
        self._recent_shortfall.popleft()
        self._recent_shortfall.append(art.rho_ub - match)
        if since_anomaly < MASK_WINDOWS and self._anomaly_count:
            self._anomaly_last = min(self._anomaly_last, match)
        masked = self._mask_after_cluster or masked_by_anomaly
        scale = BELOW_LAST_MASKED if masked_by_anomaly else BELOW_LAST_LATER
        below_last = match < self._last_anomaly_match * scale
        score = 0.0
        if n > self.trend and new_cluster and (not masked or below_last):
            score = self._confidence(match, result.energy)
            if self._anomaly_count:
                self._anomaly_sum += self._anomaly_last
            self._anomaly_count += 1
            self._anomaly_last = match
            self._last_anomaly_match = match
            self._last_anomaly = n
        self._mask_after_cluster = new_cluster or self._mask_after_cluster
        if n > self.trend and (reset_after_anomaly or reset_for_trend):
            self._move_vigilance(n)
        return score

    def _move_vigilance(self, n: int) -> None:
        art = self.art
        worst = min(self._recent_match)
        ub = min(RHO_UB_CAP, self._match_sum / n)
        lb = art.rho_lb
        if lb <= worst:
            lb += (worst - lb) * RHO_LB_CLIMB
        else:
            fall = 0.0
            if n > 2 * self.trend:
                short = [
                    min(SHORTFALL_CAP, s) for s in self._recent_shortfall if s > SHORTFALL_FLOOR
                ]
                if short:
                    fall = float(np.mean(short))
            lb -= max(MIN_FALL, fall) / 2.0
            if self._anomaly_count:
                mean = (self._anomaly_sum + self._anomaly_last) / self._anomaly_count
                lb = max(mean, lb)
        art.rho_lb, art.rho_ub = min(ub, lb), ub
        self._last_update = n
        self._mask_after_cluster = True

    def _confidence(self, match: float, energy: float) -> float:
        m = min(CONF_MATCH_CAP, match)
        ub = ((1.0 - m) - (1.0 - self.art.rho_ub)) / (1.0 - m)
        lb = ((1.0 - m) - (1.0 - self.art.rho_lb)) / (1.0 - m)
        score = CONF_UB * ub + CONF_LB * lb + CONF_ENERGY * (1.0 - energy)
        return round(min(1.0, score), 6)

    @property
    def categories(self) -> int:
        """Categories held by the network (its state grows with them)."""
        return self.art.categories

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data (the weights as float64 bytes)."""
        m = self._median
        return {
            "version": _SNAPSHOT_VERSION,
            "range": None if self.range is None else list(self.range),
            "pending": list(self._pending),
            "counts": [self._i, self._n],
            "raw": list(self._raw),
            "average": self._average,
            "median": [list(m.bins), m.level, m.below, m.above],
            "window": self._window.tolist(),
            "held": [f.tolist() for f in self._held],
            "art": [
                self.art.rho_lb,
                self.art.rho_ub,
                self.art.weights.tobytes(),
                self.art.last_best.tobytes(),
                self.art.inputs,
            ],
            "detect": [
                self._last_anomaly,
                self._last_anomaly_match,
                self._last_update,
                self._mask_after_cluster,
                self._since_new_cluster,
                self._match_sum,
                self._anomaly_sum,
                self._anomaly_count,
                self._anomaly_last,
            ],
            "recent_match": list(self._recent_match),
            "recent_shortfall": list(self._recent_shortfall),
        }

    @classmethod
    def from_snapshot(cls, state: Mapping[str, Any], config: ArtimeConfig) -> ArtimeDetector:
        """Rebuild from :meth:`snapshot` output with ``config``.

        Raises:
            DetectorInputError: Another layout version, or a malformed snapshot.
        """
        if state.get("version") != _SNAPSHOT_VERSION:
            raise DetectorInputError(
                f"ARTime snapshot version {state.get('version')!r} unsupported"
            )
        det = cls(config)
        try:
            if state["range"] is not None:
                low, high = (float(v) for v in state["range"])
                det.range = (low, high)
            det._pending = [float(v) for v in state["pending"]]
            det._i, det._n = (int(v) for v in state["counts"])
            det._raw.extend(float(v) for v in state["raw"])
            det._average = float(state["average"])
            bins, level, below, above = state["median"]
            det._median = _Median([int(b) for b in bins], int(level), int(below), int(above))
            det._window = np.asarray(state["window"], dtype=np.float64)
            det._held = [np.asarray(f, dtype=np.float64) for f in state["held"]]
            lb, ub, weights, last_best, inputs = state["art"]
            det.art.rho_lb, det.art.rho_ub = float(lb), float(ub)
            det.art.weights = (
                np.frombuffer(weights, dtype=np.float64).reshape(-1, 4 * FEATURE_WINDOW).copy()
            )
            det.art.last_best = np.frombuffer(last_best, dtype=np.int64).copy()
            det.art.inputs = int(inputs)
            d = state["detect"]
            det._last_anomaly, det._last_update = int(d[0]), int(d[2])
            det._last_anomaly_match, det._match_sum = float(d[1]), float(d[5])
            det._mask_after_cluster, det._since_new_cluster = bool(d[3]), int(d[4])
            det._anomaly_sum, det._anomaly_count = float(d[6]), int(d[7])
            det._anomaly_last = float(d[8])
            det._recent_match = deque(float(v) for v in state["recent_match"])
            det._recent_shortfall = deque(float(v) for v in state["recent_shortfall"])
        except (KeyError, TypeError, ValueError) as e:
            raise DetectorInputError(f"malformed ARTime snapshot: {e}") from e
        if (
            len(det._raw) != det.step
            or len(det._median.bins) != LEVELS + 1
            or det._window.shape != (FEATURE_WINDOW,)
            or len(det.art.last_best) != det.art.categories
            or (config.max_categories and det.art.categories > config.max_categories)
            or len(det._recent_match) != det.trend // 2 + 1
            or len(det._recent_shortfall) != det.trend + 1
        ):
            raise DetectorInputError("malformed ARTime snapshot: sizes do not match the config")
        return det
