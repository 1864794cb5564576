"""The HPA's full scaling step for one External metric: formula, windows and policies.

:class:`~flinkai_bench.autoscaling.hpa.HpaDecider` gives the stabilised recommendation;
the behaviour's ``policies`` then bound how far one step may move (``type: Pods``,
``value`` pods per ``periodSeconds``, counted over the changes made within the last
period). ``selectPolicy`` matters only with several policies; the chart has one per
direction, so only that case is modelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkai_bench.autoscaling.hpa import DEFAULT_TOLERANCE, HpaDecider

__all__ = ["PodsPolicy", "ScaleStep", "TaskManagerScaler", "behavior_from_chart"]


@dataclass(frozen=True)
class PodsPolicy:
    """``type: Pods``: at most ``pods`` added (or removed) per ``period_s``."""

    pods: int
    period_s: float

    def __post_init__(self) -> None:
        if self.pods < 1 or self.period_s <= 0:
            raise ValueError(f"a Pods policy needs pods >= 1 and period > 0, got {self}")


@dataclass(frozen=True)
class ScaleStep:
    """One decision: the per-replica value it saw, the raw proposal and the result."""

    current: int
    value: float
    proposal: int
    recommended: int
    desired: int


@dataclass
class TaskManagerScaler:
    """What the HPA would set the TaskManager Deployment's replicas to, step by step.

    Args:
        target: The metric's ``averageValue`` per replica.
        min_replicas / max_replicas: The HPA's bounds.
        up_window_s / down_window_s: Stabilisation windows.
        up / down: The Pods policy of each direction.
        tolerance: The controller's tolerance.
        clock: Monotonic seconds (injected by tests).
    """

    target: float
    min_replicas: int
    max_replicas: int
    up_window_s: float
    down_window_s: float
    up: PodsPolicy
    down: PodsPolicy
    tolerance: float = DEFAULT_TOLERANCE
    clock: Callable[[], float] = time.monotonic
    _decider: HpaDecider = field(init=False)
    _changes: list[tuple[float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._decider = HpaDecider(
            self.min_replicas,
            self.max_replicas,
            self.up_window_s,
            self.down_window_s,
            self.tolerance,
            self.clock,
        )

    def hold(self, current: int) -> None:
        """A tick without the metric: keep ``current`` in the windows (see HpaDecider.hold)."""
        self._decider.hold(current)

    def step(self, current: int, total: float) -> ScaleStep:
        """Decide from the metric's total (an External ``AverageValue`` is total / current)."""
        from flinkai_bench.autoscaling.hpa import desired_replicas

        value = total / current
        proposal = desired_replicas(current, value, self.target, self.tolerance)
        recommended = self._decider.decide(current, value, self.target)
        now = self.clock()
        desired = recommended
        if recommended > current:
            used = sum(d for t, d in self._changes if d > 0 and t > now - self.up.period_s)
            desired = min(recommended, current + max(0, self.up.pods - used))
        elif recommended < current:
            used = sum(-d for t, d in self._changes if d < 0 and t > now - self.down.period_s)
            desired = max(recommended, current - max(0, self.down.pods - used))
        if desired != current:
            self._changes.append((now, desired - current))
        return ScaleStep(current, value, proposal, recommended, desired)


def behavior_from_chart(behavior: Mapping[str, Any], time_scale: float = 1.0) -> dict[str, Any]:
    """Windows and Pods policies of the rendered HPA ``behavior``, times ``time_scale``.

    Returns:
        Keyword arguments for :class:`TaskManagerScaler` (all but target and bounds).

    Raises:
        ValueError: A direction without exactly one ``Pods`` policy.
    """
    out: dict[str, Any] = {}
    for key, name in (("scaleUp", "up"), ("scaleDown", "down")):
        block = behavior.get(key) or {}
        policies = [p for p in block.get("policies") or [] if p.get("type") == "Pods"]
        if len(policies) != 1:
            raise ValueError(f"behavior.{key}: expected one Pods policy, got {policies}")
        out[f"{name}_window_s"] = float(block.get("stabilizationWindowSeconds", 0)) * time_scale
        out[name] = PodsPolicy(
            int(policies[0]["value"]), float(policies[0]["periodSeconds"]) * time_scale
        )
    return out
