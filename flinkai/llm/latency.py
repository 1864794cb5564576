"""A bounded window of recent latencies and its percentiles (TTFT, TPOT, ITL...).

Flink's Python metric groups have no histogram, so the scheduler's distributions
are exported as gauges of the percentiles over the last :data:`WINDOW` samples.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

__all__ = ["WINDOW", "LatencyWindow"]

#: Samples a window keeps (the newest).
WINDOW = 4096


class LatencyWindow:
    """The newest ``size`` samples (milliseconds); safe to read from another thread."""

    def __init__(self, size: int = WINDOW) -> None:
        self._samples: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.count = 0

    def add(self, value_ms: float) -> None:
        with self._lock:
            self._samples.append(value_ms)
            self.count += 1

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0..100) of the window; 0.0 when it is empty."""
        with self._lock:
            if not self._samples:
                return 0.0
            return float(np.percentile(np.fromiter(self._samples, dtype=np.float64), q))

    def values(self) -> list[float]:
        with self._lock:
            return list(self._samples)
