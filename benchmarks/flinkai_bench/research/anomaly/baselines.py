"""Streaming baseline detectors of the anomaly benchmark (research, not the operator's).

The statistical detectors follow the definitions of Apache Beam's
``apache_beam.ml.anomaly.detectors`` (Beam 2.64+), with its default trackers:

* :class:`~flinkai.anomaly.zscore.ZScore` (the product's, re-exported here);
* :class:`RobustZScore`: ``|0.6745 (x - median) / MAD|``. The median is a
  sliding-window (1,000) quantile with linear interpolation; the MAD is the same
  median of ``|x - median|``, each difference taken against the median right after
  ``x`` was added and never recomputed (Beam's online MAD).
* :class:`IQR`: ``(x - Q3) / IQR`` above Q3, ``(Q1 - x) / IQR`` below Q1, else 0,
  with Q1/Q3 sliding-window (1,000) quantiles with linear interpolation.

As in Beam, a point is scored before it is learnt, a spread below ``1e-9`` scores
0, and a detector without enough data scores NaN. :class:`HalfSpaceTrees` wraps
river's ``anomaly.HalfSpaceTrees`` behind a ``preprocessing.MinMaxScaler`` (the
trees expect features in [0, 1]), scored then learnt the same way.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Protocol

from sortedcontainers import SortedList

from flinkai.anomaly.zscore import DEFAULT_WINDOW, EPSILON, ZScore

__all__ = [
    "IQR",
    "HalfSpaceTrees",
    "RobustZScore",
    "SlidingQuantile",
    "StreamingDetector",
    "ZScore",
]


class StreamingDetector(Protocol):
    """Scores a value against what came before it, then learns it."""

    def score_one(self, x: float) -> float: ...

    def learn_one(self, x: float) -> None: ...


class SlidingQuantile:
    """Quantile of the last ``window`` values, linear interpolation between ranks."""

    def __init__(self, q: float, window: int = DEFAULT_WINDOW) -> None:
        self.q = q
        self._queue: deque[float] = deque()
        self._sorted: SortedList = SortedList()
        self._window = window

    def push(self, x: float) -> None:
        if len(self._queue) >= self._window:
            self._sorted.discard(self._queue.popleft())
        self._queue.append(x)
        self._sorted.add(x)

    def get(self) -> float:
        n = len(self._sorted)
        if n == 0:
            return math.nan
        pos = self.q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        lo_v, hi_v = float(self._sorted[lo]), float(self._sorted[hi])
        return lo_v + (hi_v - lo_v) * (pos - lo)


class RobustZScore:
    """Beam's ``RobustZScore``: median and online MAD over sliding windows of 1,000."""

    SCALE_FACTOR = 0.6745

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self._median = SlidingQuantile(0.5, window)
        self._mad = SlidingQuantile(0.5, window)

    def learn_one(self, x: float) -> None:
        self._median.push(x)
        self._mad.push(abs(x - self._median.get()))

    def score_one(self, x: float) -> float:
        median, mad = self._median.get(), self._mad.get()
        if math.isnan(median) or math.isnan(mad):
            return math.nan
        if abs(mad) < EPSILON:
            return 0.0
        return abs(self.SCALE_FACTOR * (x - median) / mad)


class IQR:
    """Beam's ``IQR``: distance outside [Q1, Q3] in IQRs, sliding window of 1,000."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self._q1 = SlidingQuantile(0.25, window)
        self._q3 = SlidingQuantile(0.75, window)

    def learn_one(self, x: float) -> None:
        self._q1.push(x)
        self._q3.push(x)

    def score_one(self, x: float) -> float:
        q1, q3 = self._q1.get(), self._q3.get()
        if math.isnan(q1) or math.isnan(q3):
            return math.nan
        iqr = q3 - q1
        if abs(iqr) < EPSILON:
            return 0.0
        if x > q3:
            return (x - q3) / iqr
        if x < q1:
            return (q1 - x) / iqr
        return 0.0


class HalfSpaceTrees:
    """river's ``HalfSpaceTrees`` (defaults: 10 trees, height 8, window 250) on min-max scaled values.

    Args:
        seed: Tree seed.
    """

    def __init__(self, seed: int = 42) -> None:
        from river import anomaly, compose, preprocessing

        self._model: Any = compose.Pipeline(
            preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(seed=seed)
        )

    def score_one(self, x: float) -> float:
        return float(self._model.score_one({"x": x}))

    def learn_one(self, x: float) -> None:
        self._model.learn_one({"x": x})
