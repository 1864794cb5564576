"""The HorizontalPodAutoscaler's replica calculation, for a harness that scales by hand.

Kubernetes computes ``desired = ceil(current x value / target)`` per metric, keeps the
current count while ``value / target`` is within the tolerance (0.1 by default), takes
the largest proposal over the metrics, and smooths with the behaviour's stabilisation
windows (a scale-up takes the lowest recommendation of the up-window, a scale-down the
highest of the down-window), then bounds the step by the behaviour's policies and the
replica bounds. Only that decision step lives here
(:class:`HorizontalPodAutoscaler`); the rescaling itself is Flink's (reactive mode,
when a TaskManager joins or leaves).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HorizontalPodAutoscaler",
    "HpaDecision",
    "MetricReading",
    "MetricTarget",
    "ScalingPolicy",
    "ScalingRules",
]

#: kube-controller-manager's --horizontal-pod-autoscaler-tolerance default.
DEFAULT_TOLERANCE = 0.1


# --- The controller's whole reconcile step, over every metric of the HPA -----------------
#
# Follows kube-controller-manager's podautoscaler (horizontal.go, replica_calculator.go):
# computeReplicasForMetrics, calcPlainMetricReplicas / GetExternalMetricReplicas,
# stabilizeRecommendationWithBehaviors and convertDesiredReplicasWithBehaviorRate.


@dataclass(frozen=True)
class ScalingPolicy:
    """One ``behavior.<direction>.policies`` entry: ``Pods`` or ``Percent`` per period."""

    type: str
    value: int
    period_s: float

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent") or self.value < 1 or self.period_s <= 0:
            raise ValueError(f"a policy needs type Pods|Percent, value >= 1, period > 0: {self}")


@dataclass(frozen=True)
class ScalingRules:
    """One direction of the HPA ``behavior``: window, ``selectPolicy`` and policies."""

    window_s: float
    select_policy: str
    policies: tuple[ScalingPolicy, ...]

    @classmethod
    def parse(cls, block: Mapping[str, Any], time_scale: float = 1.0) -> ScalingRules:
        """From the rendered block; windows and periods times ``time_scale`` (a shortcut)."""
        select = str(block.get("selectPolicy", "Max"))
        if select not in ("Max", "Min", "Disabled"):
            raise ValueError(f"selectPolicy {select!r} is not Max, Min or Disabled")
        return cls(
            window_s=float(block.get("stabilizationWindowSeconds", 0)) * time_scale,
            select_policy=select,
            policies=tuple(
                ScalingPolicy(
                    str(p["type"]), int(p["value"]), float(p["periodSeconds"]) * time_scale
                )
                for p in block.get("policies") or []
            ),
        )


@dataclass(frozen=True)
class MetricTarget:
    """One HPA metric with an ``AverageValue`` target (External or Pods)."""

    name: str
    type: str
    target: float


@dataclass(frozen=True)
class MetricReading:
    """What the adapter served for one metric at one tick.

    Attributes:
        total: An External metric's value (the adapter's query result), None when the
            query returned nothing or failed.
        per_pod: A Pods metric's value per pod that has one (missing pods are absent);
            empty when the query returned nothing.
    """

    total: float | None = None
    per_pod: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HpaDecision:
    """One reconcile: each metric's proposal (None: invalid), and what was set.

    Attributes:
        proposals: Metric name -> its replica proposal, None where the metric was
            unavailable.
        metric_desired: The largest proposal, None when the controller skipped the
            tick (every metric invalid, or some invalid and the rest would scale down).
        recommended: After the stabilisation windows.
        desired: After the policies and the bounds: the replicas the HPA sets.
        reason: Why the tick kept the count, if it did.
    """

    t: float
    current: int
    proposals: Mapping[str, int | None]
    metric_desired: int | None
    recommended: int
    desired: int
    reason: str


def _external_replicas(current: int, total: float, target: float, tolerance: float) -> int:
    # GetExternalMetricReplicas with an AverageValue target.
    ratio = total / (target * current)
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(total / target)


def _pods_replicas(
    current: int, pods: list[str], per_pod: Mapping[str, float], target: float, tolerance: float
) -> int:
    # calcPlainMetricReplicas: pods without a value count as at target on a scale-down
    # and as 0 on a scale-up, and the tick keeps the count if that flips the direction.
    metrics = {p: v for p, v in per_pod.items() if p in pods} if pods else dict(per_pod)
    if not metrics:
        raise LookupError("no pod has a value")
    missing = [p for p in pods if p not in metrics]
    ratio = sum(metrics.values()) / len(metrics) / target
    if not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * len(metrics))
    filled = dict(metrics)
    for p in missing:
        filled[p] = target if ratio < 1.0 else 0.0
    new_ratio = sum(filled.values()) / len(filled) / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


@dataclass
class HorizontalPodAutoscaler:
    """The HPA controller's decision, tick by tick, over every metric it names.

    Args:
        metrics: The HPA's metrics (``AverageValue`` targets, External or Pods).
        min_replicas / max_replicas: Its bounds.
        up / down: ``behavior.scaleUp`` / ``scaleDown``.
        tolerance: The controller's tolerance.
        clock: Seconds, monotonic (tests drive it).
    """

    metrics: tuple[MetricTarget, ...]
    min_replicas: int
    max_replicas: int
    up: ScalingRules
    down: ScalingRules
    tolerance: float = DEFAULT_TOLERANCE
    clock: Callable[[], float] = time.monotonic
    _recommendations: list[tuple[float, int]] = field(default_factory=list)
    _events: list[tuple[float, int]] = field(default_factory=list)

    def decide(
        self, current: int, readings: Mapping[str, MetricReading], pods: Sequence[str] = ()
    ) -> HpaDecision:
        """One reconcile at ``current`` replicas; ``pods`` names the running pods."""
        now = self.clock()
        if not self._recommendations:
            # maybeInitScaleDownStabilizationWindow: a new HPA starts with the current
            # count in its window, so it cannot scale down within its first window.
            self._recommendations.append((now, current))
        if current > self.max_replicas or current < self.min_replicas:
            bounded = min(self.max_replicas, max(self.min_replicas, current))
            return self._set(now, current, {}, bounded, bounded, bounded, "outside the bounds")
        proposals: dict[str, int | None] = {}
        for m in self.metrics:
            r = readings.get(m.name) or MetricReading()
            try:
                if m.type == "External":
                    if r.total is None:
                        raise LookupError("no value")
                    proposals[m.name] = _external_replicas(
                        current, r.total, m.target, self.tolerance
                    )
                else:
                    proposals[m.name] = _pods_replicas(
                        current, list(pods), r.per_pod, m.target, self.tolerance
                    )
            except LookupError:
                proposals[m.name] = None
        valid = [p for p in proposals.values() if p is not None]
        invalid = [n for n, p in proposals.items() if p is None]
        best = max(valid) if valid else None
        if best is None or (invalid and best < current):
            # computeReplicasForMetrics returns an error: the tick changes nothing and
            # records no recommendation (a missing metric never scales down, nor to 0).
            why = "no metric available" if best is None else f"scale-down held: {invalid} missing"
            return HpaDecision(now, current, proposals, None, current, current, why)
        recommended = self._stabilise(now, current, best)
        desired = self._limit(now, current, recommended)
        return self._set(now, current, proposals, best, recommended, desired, "")

    def _set(
        self,
        now: float,
        current: int,
        proposals: Mapping[str, int | None],
        best: int | None,
        recommended: int,
        desired: int,
        reason: str,
    ) -> HpaDecision:
        if desired != current:
            self._events.append((now, desired - current))
        return HpaDecision(now, current, proposals, best, recommended, desired, reason)

    def _stabilise(self, now: float, current: int, desired: int) -> int:
        up_cut, down_cut = now - self.up.window_s, now - self.down.window_s
        up_rec = desired
        down_rec = desired
        for t, r in self._recommendations:
            if t > up_cut:
                up_rec = min(up_rec, r)
            if t > down_cut:
                down_rec = max(down_rec, r)
        keep = max(self.up.window_s, self.down.window_s)
        self._recommendations = [(t, r) for t, r in self._recommendations if t > now - keep]
        self._recommendations.append((now, desired))
        return min(max(current, up_rec), down_rec)

    def _changed(self, now: float, period_s: float, up: bool) -> int:
        return sum(
            abs(d) for t, d in self._events if t > now - period_s and (d > 0) == up and d != 0
        )

    def _start_of_period(self, now: float, current: int, period_s: float) -> int:
        return current - self._changed(now, period_s, True) + self._changed(now, period_s, False)

    def _limit(self, now: float, current: int, desired: int) -> int:
        if desired > current:
            rules = self.up
            if rules.select_policy == "Disabled":
                return current
            limits = []
            for p in rules.policies:
                start = self._start_of_period(now, current, p.period_s)
                limits.append(
                    start + p.value if p.type == "Pods" else math.ceil(start * (1 + p.value / 100))
                )
            limit = (min if rules.select_policy == "Min" else max)(limits) if limits else desired
            return min(desired, self.max_replicas, max(limit, current))
        if desired < current:
            rules = self.down
            if rules.select_policy == "Disabled":
                return current
            limits = []
            for p in rules.policies:
                start = self._start_of_period(now, current, p.period_s)
                limits.append(
                    start - p.value if p.type == "Pods" else int(start * (1 - p.value / 100))
                )
            limit = (max if rules.select_policy == "Min" else min)(limits) if limits else desired
            return max(desired, self.min_replicas, min(limit, current))
        return desired

    @classmethod
    def from_chart(
        cls,
        metrics: Sequence[MetricTarget],
        behavior: Mapping[str, Any],
        min_replicas: int,
        max_replicas: int,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> HorizontalPodAutoscaler:
        """The HPA as the chart renders it; ``time_scale`` shortens windows and periods."""
        return cls(
            metrics=tuple(metrics),
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            up=ScalingRules.parse(behavior.get("scaleUp") or {}, time_scale),
            down=ScalingRules.parse(behavior.get("scaleDown") or {}, time_scale),
            clock=clock,
        )
