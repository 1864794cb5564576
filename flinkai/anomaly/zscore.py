"""Beam's z-score over a sliding window: the core of the operator's ``zscore`` model.

:class:`ZScore` follows the definition of Apache Beam's
``apache_beam.ml.anomaly.detectors.ZScore`` (Beam 2.64+) with its default trackers:
``|x - mean| / stdev`` over a sliding window of 1,000 values (incremental mean,
sample standard deviation with ``ddof = 1``). As in Beam, a point is scored before
it is learnt, a spread below ``1e-9`` scores 0, and fewer than two values score NaN.
Its state is plain data (:meth:`ZScore.snapshot`): the window as float64 bytes.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_WINDOW", "EPSILON", "ZScore"]

#: Beam's default sliding window of its trackers.
DEFAULT_WINDOW = 1000
#: Beam's ``univariate.base.EPSILON``: a smaller spread scores 0.
EPSILON = 1e-9


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
