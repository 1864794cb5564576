"""Reactive rescaling in every test run: one scale-up and one scale-down, exactly once.

The bench's harness (:func:`flinkai_bench.scaling.harness.run_scaling`) at its smallest:
``jobs/embed_clicks.sql`` in application mode with the reactive scheduler, a
2-partition input, so ``maxReplicas`` 2. Every metric the chart's HPA renders with the
stated values is read from a real Prometheus (scraping each TaskManager) through the
prometheus-adapter queries of the rendered chart, and the Kubernetes controller's
arithmetic decides (:class:`~flinkai_bench.autoscaling.hpa.HorizontalPodAutoscaler`).
Windows and periods are the chart's times ``time_scale`` 0.03 (named in the output):
the down window is 18 s, the up policy +2 pods per 3.6 s. A second
HPA, rendered with the chart's default ``taskmanager.gpu.enabled=true``, decides on the
same reads: its GPU series is missing here, and it must hold the scale-down.
The longer run with three or more rescales is ``flinkai bench scaling``.
"""

from __future__ import annotations

import pytest

from flinkai.kafka.broker import LocalKafka
from flinkai_bench.autoscaling.timeline import reduce_timeline
from flinkai_bench.scaling.harness import BEAM_CANCEL_RACE, ScalingOptions, run_scaling
from flinkai_bench.scaling.load import LoadPlan
from flinkai_bench.scaling.report import summary

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OPTIONS = ScalingOptions(
    partitions=2,
    load=LoadPlan(seed=3000, lead_s=6.0),
    hold_s=2.0,
    load_timeout_s=90.0,
    time_scale=0.03,
    resource_stabilization="2s",
    cooldown="2s",
    submission_stabilization="1s",
    timeout_s=150.0,
    drain_wait_s=40.0,
)


def test_hpa_scales_up_and_down_on_every_chart_metric_exactly_once(
    kafka_broker: LocalKafka, model_artifacts: object
) -> None:
    lines: list[str] = []
    run = run_scaling(
        kafka_broker.bootstrap,
        OPTIONS,
        progress=lines.append,
        broker_metrics=kafka_broker.metrics_address,
    )
    figures = reduce_timeline(
        run.samples, run.events, target=run.target, load_stopped_t=run.load_stopped_t
    )
    s = summary(run, figures)
    print("\n".join(lines))  # every sample: shown with -s, and when an assert fails
    print("summary:", {k: v for k, v in s.items() if k != "backlog_signals"})
    print("backlog signals:", s["backlog_signals"])
    head = "\n".join(line for line in lines if "decide" in line or "load" in line)
    assert run.error is None, f"{run.error}; {run.exactly_once}\n{head}"
    # A TaskManager may exit at a rescale from PyFlink's cancel race (BEAM_CANCEL_RACE,
    # read from its log); it is replaced, as a Deployment restarts the pod, and every
    # check below still holds. Any other exit fails the test.
    unknown = [r for r in run.replaced if f"[{BEAM_CANCEL_RACE}]" not in r]
    assert not unknown, unknown

    # The values and shortcuts are stated; the HPA read every metric it renders with them.
    assert s["values"]["taskmanager.gpu.enabled"] is False and s["shortcuts"]
    assert s["chart_metrics"] == ["ai_operator_backlog_depth", "flinkai_embedded_rows_per_second"]
    assert s["metrics_used"] == s["chart_metrics"], (run.metrics_seen, head)
    # The backlog rule read the source lag: the broker's end offsets joined Flink's positions.
    assert s["backlog_signal"] == "source lag"
    assert s["backlog_signals"]["source_lag_ticks"] > 0, s["backlog_signals"]

    # Up once, down once, and Flink ran each at its new parallelism.
    assert [(e.before, e.after) for e in run.events] == [(1, 2), (2, 1)], head
    assert figures.parallelism_seen == [1, 2, 1], head
    assert s["rescales"] == 2

    # The chart's default (GPU metric, absent here) held every scale-down the run made.
    case = s["missing_metric_case"]
    assert "gpu_utilization_ratio" in case["metrics"]
    assert case["scale_downs"] == 0 and case["scale_downs_held"] > 0, case

    # Every input exactly once across both rescales, nothing dead-lettered.
    assert run.expected_ids and run.exactly_once_ok, run.exactly_once
    assert (s["lost"], s["duplicated"], s["dead_letters"]) == (0, 0, 0)
