"""The HPA controller's decision over every metric, as kube-controller-manager makes it."""

from __future__ import annotations

import pytest

from flinkai.local.prometheus import Sample
from flinkai_bench.autoscaling import render
from flinkai_bench.autoscaling.adapter import AdapterReader
from flinkai_bench.autoscaling.hpa import (
    HorizontalPodAutoscaler,
    MetricReading,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
)

BACKLOG = MetricTarget("backlog", "External", 10.0)
ROWS = MetricTarget("rows", "Pods", 400.0)
GPU = MetricTarget("gpu", "Pods", 0.75)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def rules(window_s: float, *policies: ScalingPolicy, select: str = "Max") -> ScalingRules:
    return ScalingRules(window_s, select, policies)


def hpa(
    clock: Clock,
    metrics: tuple[MetricTarget, ...] = (BACKLOG, ROWS),
    up_pods: int = 4,
    *,
    up: ScalingRules | None = None,
    down: ScalingRules | None = None,
    max_replicas: int = 6,
) -> HorizontalPodAutoscaler:
    """No windows, +``up_pods`` and -1 pod per 60 s, 1 to 6 replicas, unless told."""
    return HorizontalPodAutoscaler(
        metrics=metrics,
        min_replicas=1,
        max_replicas=max_replicas,
        up=up or rules(0.0, ScalingPolicy("Pods", up_pods, 60.0)),
        down=down or rules(0.0, ScalingPolicy("Pods", 1, 60.0), select="Min"),
        clock=clock,
    )


def pods(n: int) -> list[str]:
    return [f"tm-{i}" for i in range(n)]


def backlog(total: float) -> dict[str, MetricReading]:
    return {"backlog": MetricReading(total=total)}


def test_the_metric_asking_for_most_replicas_wins() -> None:
    clock = Clock()
    # backlog: 25 batches over 1 replica -> ceil(25 / 10) = 3; rows 800/400 -> 2.
    d = hpa(clock).decide(
        1,
        {"backlog": MetricReading(total=25.0), "rows": MetricReading(per_pod={"tm-0": 800.0})},
        pods(1),
    )
    assert d.proposals == {"backlog": 3, "rows": 2}
    assert d.metric_desired == 3 and d.desired == 3


def test_within_tolerance_keeps_the_count() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG,))
    # 21 batches on 2 replicas: ratio 1.05, inside 0.1 -> 2, where ceil(21/10) would be 3.
    assert h.decide(2, backlog(21.0), pods(2)).desired == 2
    clock.t = 1.0
    # 23 batches: ratio 1.15 -> ceil(2.3) = 3.
    assert h.decide(2, backlog(23.0), pods(2)).desired == 3


def test_a_missing_metric_holds_the_scale_down_but_not_the_scale_up() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG, ROWS, GPU))
    idle = {"backlog": MetricReading(total=0.0), "rows": MetricReading(per_pod={"tm-0": 0.0})}
    # The GPU series is absent (a CPU-only pod): every scale-down is skipped.
    held = h.decide(3, idle, pods(3))
    assert held.proposals["gpu"] is None and held.metric_desired is None
    assert held.desired == 3 and "held" in held.reason
    clock.t = 100.0
    busy = backlog(60.0)
    # rows and gpu both missing; the backlog alone asks for 6: a scale-up proceeds.
    up = h.decide(3, busy, pods(3))
    assert up.desired == 6 and up.proposals["rows"] is None


def test_no_metric_at_all_never_scales_to_zero() -> None:
    clock = Clock()
    d = hpa(clock).decide(2, {}, pods(2))
    assert d.desired == 2 and d.metric_desired is None and d.reason == "no metric available"
    # An empty Pods reading with a 0-valued External one: min replicas, never 0.
    clock.t = 1000.0
    h = hpa(clock, (BACKLOG,))
    assert h.decide(1, backlog(0.0), pods(1)).desired == 1


def test_pods_without_a_value_count_as_at_target_on_a_scale_down() -> None:
    clock = Clock()
    h = hpa(clock, (ROWS,))
    # tm-0 reports 100 rows/s (ratio 0.25), tm-1 none: filled with the target, the
    # ratio is 0.625 -> ceil(1.25) = 2, so no scale-down from 2.
    d = h.decide(2, {"rows": MetricReading(per_pod={"tm-0": 100.0})}, pods(2))
    assert d.proposals["rows"] == 2 and d.desired == 2
    # On a scale-up the missing pod counts as 0: 1000 alone is ratio 2.5, with tm-1 at 0
    # 1.25 -> ceil(2.5) = 3.
    d = h.decide(2, {"rows": MetricReading(per_pod={"tm-0": 1000.0})}, pods(2))
    assert d.proposals["rows"] == 3


def test_scale_down_window_takes_the_highest_recent_recommendation() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG,), down=rules(30.0, ScalingPolicy("Pods", 4, 1.0), select="Min"))
    # A new HPA starts with the current count in its down-window: no scale-down yet.
    assert h.decide(4, backlog(0.0), pods(4)).desired == 4
    clock.t = 20.0
    assert h.decide(4, backlog(0.0), pods(4)).desired == 4
    clock.t = 31.0  # the first recommendation (4) left the window
    assert h.decide(4, backlog(0.0), pods(4)).desired == 1


def test_pods_policy_and_max_replicas_bound_each_period() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG,), up_pods=2)
    # 100 batches ask for 10 TaskManagers; the chart's +2 pods per period: 1 -> 3 in one
    # step (not 1 -> 2), then wait.
    first = h.decide(1, backlog(100.0), pods(1))
    assert (first.metric_desired, first.recommended, first.desired) == (10, 10, 3)
    clock.t = 30.0
    assert h.decide(3, backlog(100.0), pods(3)).desired == 3
    clock.t = 61.0
    assert h.decide(3, backlog(100.0), pods(3)).desired == 5
    clock.t = 122.0
    assert h.decide(5, backlog(100.0), pods(5)).desired == 6  # max_replicas


def test_percent_policy_and_disabled_direction() -> None:
    clock = Clock()
    h = hpa(
        clock,
        (BACKLOG,),
        up=rules(0.0, ScalingPolicy("Percent", 100, 60.0)),
        down=rules(0.0, ScalingPolicy("Pods", 1, 60.0), select="Disabled"),
        max_replicas=20,
    )
    assert h.decide(2, backlog(200.0), pods(2)).desired == 4
    clock.t = 100.0
    assert h.decide(4, backlog(0.0), pods(4)).desired == 4


@pytest.mark.parametrize(
    ("current", "per_replica", "proposal"),
    [
        (1, 25.0, 3),  # ceil(1 x 2.5)
        (2, 25.0, 5),  # ceil(2 x 2.5)
        (3, 10.9, 3),  # ratio 1.09: within the tolerance
        (3, 11.5, 4),  # ratio 1.15: ceil(3.45)
        (4, 1.0, 1),  # ratio 0.1: ceil(0.4)
    ],
)
def test_external_proposal_is_ceil_of_current_times_ratio(
    current: int, per_replica: float, proposal: int
) -> None:
    # An External AverageValue target: the per-replica value is the total / current.
    d = hpa(Clock(), (BACKLOG,)).decide(current, backlog(current * per_replica), pods(current))
    assert d.proposals == {"backlog": proposal} and d.metric_desired == proposal


def test_up_window_takes_the_lowest_recent_recommendation() -> None:
    clock = Clock()
    h = hpa(
        clock,
        (BACKLOG,),
        up=rules(30.0, ScalingPolicy("Pods", 4, 60.0)),
        down=rules(60.0, ScalingPolicy("Pods", 4, 1.0)),
        max_replicas=4,
    )
    assert h.decide(1, backlog(5.0), pods(1)).desired == 1  # under target at 1 replica
    clock.t = 10.0
    # A spike asks for 3; the up-window still holds the 1 of t=0: no scale-up yet.
    spike = h.decide(1, backlog(30.0), pods(1))
    assert spike.metric_desired == 3 and spike.desired == 1
    clock.t = 41.0
    assert h.decide(1, backlog(30.0), pods(1)).desired == 3
    clock.t = 50.0
    # 300 batches ask for 30; the up-window still holds the 3 of t=41.
    assert h.decide(3, backlog(300.0), pods(3)).desired == 3
    clock.t = 81.0
    assert h.decide(3, backlog(300.0), pods(3)).desired == 4  # capped at max_replicas
    clock.t = 90.0
    # Drained: the down-window still holds the high recommendations.
    assert h.decide(4, backlog(0.0), pods(4)).desired == 4
    clock.t = 151.0
    assert h.decide(4, backlog(0.0), pods(4)).desired == 1  # min_replicas, never 0


def test_scale_down_waits_for_the_window_then_one_pod_per_period() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG,), down=rules(5.0, ScalingPolicy("Pods", 1, 60.0)), max_replicas=3)
    assert h.decide(3, backlog(30.0), pods(3)).desired == 3  # at target
    clock.t = 1.0
    idle = h.decide(3, backlog(0.0), pods(3))
    assert idle.metric_desired == 0 and idle.desired == 3  # the down-window holds a 3
    clock.t = 7.0
    assert h.decide(3, backlog(0.0), pods(3)).desired == 2  # window passed: one pod
    clock.t = 20.0
    assert h.decide(2, backlog(0.0), pods(2)).desired == 2  # the next only after the period
    clock.t = 68.0
    assert h.decide(2, backlog(0.0), pods(2)).desired == 1


def test_ticks_without_any_metric_leave_no_recommendation_in_the_windows() -> None:
    clock = Clock()
    h = hpa(clock, (BACKLOG,), down=rules(5.0, ScalingPolicy("Pods", 1, 60.0)))
    assert h.decide(3, backlog(30.0), pods(3)).desired == 3  # at target
    for t in range(1, 10):  # the job restarts at 3 TaskManagers: no metric for 9 s
        clock.t = float(t)
        held = h.decide(3, {}, pods(3))
        assert held.desired == 3 and held.reason == "no metric available"
    # Kubernetes records nothing on a tick whose metrics all failed, so the 3 of t=0
    # has left the 5 s window and the first idle read scales down (one pod: the policy).
    clock.t = 10.0
    assert h.decide(3, backlog(0.0), pods(3)).desired == 2


def test_time_scale_shortens_every_window_and_period() -> None:
    behavior = {
        "scaleUp": {
            "stabilizationWindowSeconds": 30,
            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 120}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "selectPolicy": "Min",
            "policies": [
                {"type": "Pods", "value": 1, "periodSeconds": 300},
                {"type": "Percent", "value": 50, "periodSeconds": 60},
            ],
        },
    }
    h = HorizontalPodAutoscaler.from_chart((BACKLOG,), behavior, 1, 4, time_scale=0.1)
    assert h.up == rules(3.0, ScalingPolicy("Pods", 2, 12.0))
    assert h.down == rules(
        60.0,
        ScalingPolicy("Pods", 1, 30.0),
        ScalingPolicy("Percent", 50, 6.0),
        select="Min",
    )


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        ScalingPolicy("Pods", 0, 60.0)
    with pytest.raises(ValueError, match="selectPolicy"):
        ScalingRules.parse({"selectPolicy": "Largest"})


def test_the_chart_defaults_render_three_metrics_and_hold_scale_down_without_a_gpu() -> None:
    chart = render(use_helm=False)
    clock = Clock()
    h = HorizontalPodAutoscaler.from_chart(
        chart.targets(), chart.behavior, chart.min_replicas, chart.max_replicas, clock=clock
    )
    assert {m.name for m in h.metrics} == {
        "ai_operator_backlog_depth",
        "flinkai_embedded_rows_per_second",
        "gpu_utilization_ratio",
    }
    assert h.up.policies == (ScalingPolicy("Pods", 2, 120.0),)
    assert h.down.window_s == 600.0
    idle = {
        "ai_operator_backlog_depth": MetricReading(total=0.0),
        "flinkai_embedded_rows_per_second": MetricReading(per_pod={"tm-0": 0.0, "tm-1": 0.0}),
    }
    clock.t = 10_000.0  # long past every window: only the missing GPU series holds it
    assert h.decide(2, idle, pods(2)).desired == 2
    # With taskmanager.gpu.enabled=false the chart renders two metrics, and the idle
    # job scales down (one pod: the down policy).
    cpu = render(overrides={"taskmanager.gpu.enabled": False}, use_helm=False)
    h2 = HorizontalPodAutoscaler.from_chart(
        cpu.targets(),
        cpu.behavior,
        cpu.min_replicas,
        cpu.max_replicas,
        time_scale=0.01,
        clock=clock,
    )
    assert len(h2.metrics) == 2
    clock.t = 20_000.0
    # A new HPA's down-window starts with the current count (6 s at time scale 0.01).
    assert h2.decide(2, idle, pods(2)).desired == 2
    clock.t = 20_007.0
    assert h2.decide(2, idle, pods(2)).desired == 1


class _Prometheus:
    """Answers series discovery and queries from a table; ``fail`` raises on queries."""

    def __init__(self, values: dict[str, list[Sample]], fail: bool = False) -> None:
        self.values = values
        self.fail = fail
        self.asked: list[str] = []

    def series(self, match: str) -> list[dict[str, str]]:
        name = match.split("{", 1)[0]
        return [{"__name__": name}] if any(name in q for q in self.values) else []

    def query(self, q: str) -> list[Sample]:
        self.asked.append(q)
        if self.fail:
            raise ConnectionError("refused")
        return next((v for k, v in self.values.items() if k in q), [])


def test_adapter_reader_fills_each_rule_and_reads_a_failure_as_missing() -> None:
    chart = render(overrides={"taskmanager.gpu.enabled": False}, use_helm=False)
    position = "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset"
    rows = "flink_taskmanager_job_task_operator_flinkai_embedded_rows"
    prom = _Prometheus(
        {
            position: [Sample({"namespace": "ns"}, 30.0)],
            rows: [Sample({"pod": "tm-1"}, 120.0), Sample({"pod": "tm-2"}, 80.0)],
        }
    )
    reader = AdapterReader(chart, prom, "ns")
    got = reader.read(["tm-1", "tm-2"])
    assert got["ai_operator_backlog_depth"].total == 30.0
    assert got["flinkai_embedded_rows_per_second"].per_pod == {"tm-1": 120.0, "tm-2": 80.0}
    rows_q = next(q for q in prom.asked if rows in q)
    assert 'pod=~"tm-1|tm-2"' in rows_q and "by (pod)" in rows_q and "[2m]" in rows_q
    # Prometheus down: every metric unavailable, no exception, and the HPA holds.
    prom.fail = True
    down = reader.read(["tm-1", "tm-2"])
    assert all(r.total is None and not r.per_pod for r in down.values())
    assert reader.errors == 2
    h = HorizontalPodAutoscaler.from_chart(chart.targets(), chart.behavior, 1, 3, clock=Clock())
    assert h.decide(2, down, ["tm-1", "tm-2"]).desired == 2
