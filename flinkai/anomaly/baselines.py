"""Streaming baseline detectors for the anomaly benchmark.

The three statistical detectors follow the definitions of Apache Beam's
``apache_beam.ml.anomaly.detectors`` (Beam 2.64+), with its default trackers:

* :class:`ZScore`: ``|x - mean| / stdev`` over a sliding window of 1,000 values
  (incremental mean, sample standard deviation with ``ddof = 1``; NaN below two
  values).
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
from array import array
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from sortedcontainers import SortedList

__all__ = [
    "DEFAULT_WINDOW",
    "EPSILON",
    "IQR",
    "HalfSpaceTrees",
    "RobustZScore",
    "SlidingQuantile",
    "StreamingDetector",
    "ZScore",
]

#: Beam's default sliding window of its trackers.
DEFAULT_WINDOW = 1000
#: Beam's ``univariate.base.EPSILON``: a smaller spread scores 0.
EPSILON = 1e-9


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


class ZScore:
    """Beam's ``ZScore`` with its default sliding trackers (window 1,000)."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        # A float64 array, oldest first: the operator's state round trip copies it as
        # bytes in one step (a deque would cost one Python float per value).
        self._queue: array[float] = array("d")
        self._window = window
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0

    def learn_one(self, x: float) -> None:
        # Sliding Welford: add x, and drop the oldest value once the window is full.
        self._n += 1
        delta1 = x - self._mean
        old: float | None = None
        if len(self._queue) >= self._window:
            old = self._queue[0]
            del self._queue[0]
            self._n -= 1
        self._queue.append(x)
        delta2 = self._mean - old if old is not None else 0.0
        self._mean += (delta1 + delta2) / self._n
        self._m2 += delta1 * (x - self._mean)
        if old is not None:
            self._m2 += delta2 * (old - self._mean)

    def snapshot(self) -> dict[str, Any]:
        """Plain data: the window as float64 bytes (oldest first) and the running sums."""
        values = self._queue.tobytes()
        return {"window": self._window, "n": self._n, "mean": self._mean, "m2": self._m2,
                "values": values}  # fmt: skip

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> ZScore:
        """Rebuild from :meth:`snapshot`.

        Raises:
            ValueError: The snapshot is inconsistent (more values than its window, or a
                count that does not match them).
        """
        det = cls(int(snap["window"]))
        values: array[float] = array("d")
        values.frombytes(snap["values"])
        if len(values) > det._window or int(snap["n"]) != len(values):
            raise ValueError(
                f"z-score snapshot holds {len(values)} values for n={snap['n']} "
                f"and window {det._window}"
            )
        det._queue = values
        det._n, det._mean, det._m2 = len(values), float(snap["mean"]), float(snap["m2"])
        return det

    def score_one(self, x: float) -> float:
        if self._n < 2:
            return math.nan
        stdev = math.sqrt(max(self._m2 / (self._n - 1), 0.0))
        if stdev < EPSILON:
            return 0.0
        return abs((x - self._mean) / stdev)


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
