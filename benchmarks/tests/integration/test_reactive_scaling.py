"""Reactive rescaling under load, the bench's full size: three or more rescales.

The harness of ``flinkai bench scaling`` with its defaults: a 3-partition input kept
backlogged, every HPA metric the chart renders with the stated values read from a real
Prometheus through the adapter's queries, the Kubernetes controller's arithmetic with
the chart's behaviour at ``time_scale`` 0.1. Not in the default run (a few minutes; the
short test, ``test_scaling_short.py``, is); run it with
``pytest -m scaling benchmarks/tests/integration/test_reactive_scaling.py``.
"""

from __future__ import annotations

import pytest

from flinkai.kafka.broker import LocalKafka
from flinkai_bench.autoscaling.timeline import reduce_timeline
from flinkai_bench.scaling.harness import ScalingOptions, run_scaling
from flinkai_bench.scaling.report import summary

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.scaling]


def test_three_rescales_on_every_chart_metric_exactly_once(
    kafka_broker: LocalKafka, model_artifacts: object
) -> None:
    lines: list[str] = []
    run = run_scaling(
        kafka_broker.bootstrap,
        ScalingOptions(hold_s=5.0, timeout_s=420.0, drain_wait_s=90.0),
        progress=lines.append,
    )
    figures = reduce_timeline(
        run.samples, run.events, target=run.target, load_stopped_t=run.load_stopped_t
    )
    s = summary(run, figures)
    print("\n".join(lines))
    print("summary:", s)
    head = "\n".join(line for line in lines if "decide" in line or "load" in line)
    assert run.error is None, f"{run.error}; {run.exactly_once}\n{head}"
    assert s["metrics_used"] == s["chart_metrics"], head
    assert s["rescales"] >= 3, head
    assert figures.parallelism_seen[0] == 1 and figures.parallelism_seen[-1] == 1, head
    assert max(figures.parallelism_seen) == 3, head
    assert s["missing_metric_case"]["scale_downs"] == 0
    assert run.exactly_once_ok and (s["lost"], s["duplicated"]) == (0, 0), run.exactly_once
