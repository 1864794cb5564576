"""The HorizontalPodAutoscaler's replica calculation, for a harness that scales by hand.

Kubernetes computes ``desired = ceil(current x value / target)`` per metric, keeps the
current count while ``value / target`` is within the tolerance (0.1 by default), takes
the largest proposal over the metrics, and smooths with the behaviour's stabilisation
windows: a scale-up takes the lowest recommendation of the up-window, a scale-down the
highest of the down-window. Only that decision step lives here; the rescaling itself
is Flink's (reactive mode, when a TaskManager joins or leaves).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["HpaDecider", "desired_replicas"]

#: kube-controller-manager's --horizontal-pod-autoscaler-tolerance default.
DEFAULT_TOLERANCE = 0.1


def desired_replicas(
    current: int, value: float, target: float, tolerance: float = DEFAULT_TOLERANCE
) -> int:
    """One metric's proposal: ``ceil(current x value / target)``, or ``current`` within tolerance.

    Args:
        current: Replicas now (at least 1).
        value: The metric's per-replica average (``AverageValue`` targets).
        target: Its target.
        tolerance: Relative band around the target that changes nothing.
    """
    if current < 1 or target <= 0:
        raise ValueError(f"need current >= 1 and target > 0, got {current} and {target}")
    ratio = value / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    return max(1, math.ceil(current * ratio))


@dataclass
class HpaDecider:
    """Stabilised HPA decisions over time.

    Args:
        min_replicas / max_replicas: The HPA's bounds.
        up_window_s / down_window_s: The behaviour's ``stabilizationWindowSeconds``.
        tolerance: See :func:`desired_replicas`.
        clock: Seconds, monotonic; injected so tests drive time.
    """

    min_replicas: int
    max_replicas: int
    up_window_s: float
    down_window_s: float
    tolerance: float = DEFAULT_TOLERANCE
    clock: Callable[[], float] = time.monotonic
    _history: deque[tuple[float, int]] = field(default_factory=deque)

    def hold(self, current: int) -> None:
        """Record ``current`` as this moment's recommendation, without a metric.

        For a tick whose metric is missing (the job restarting after a rescale): the
        HPA counts pods without metrics as at target when it scales down, so such a
        tick must keep the down-window from emptying.
        """
        self._record(self.clock(), current)

    def _record(self, now: float, recommendation: int) -> None:
        self._history.append((now, recommendation))
        keep = max(self.up_window_s, self.down_window_s)
        while self._history and self._history[0][0] < now - keep:
            self._history.popleft()

    def decide(self, current: int, value: float, target: float) -> int:
        """The replica count to run now, given the metric's per-replica value."""
        now = self.clock()
        proposal = desired_replicas(current, value, target, self.tolerance)
        proposal = min(self.max_replicas, max(self.min_replicas, proposal))
        self._record(now, proposal)
        if proposal > current:
            # Up: the lowest recommendation in the window, so one spike does not scale.
            recent = [r for t, r in self._history if t >= now - self.up_window_s]
            return max(current, min(recent))
        if proposal < current:
            # Down: the highest in the window, so a dip does not scale down.
            recent = [r for t, r in self._history if t >= now - self.down_window_s]
            return min(current, max(recent))
        return current
