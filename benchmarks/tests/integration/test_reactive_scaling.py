"""Reactive rescaling under load, with the HPA's decision step: 1 -> 2 -> 3 -> 2.

The bench's harness (:func:`flinkai_bench.scaling.harness.run_scaling`) at a small
size: ``jobs/embed_clicks.sql`` in application mode with the reactive scheduler, a
3-partition input kept backlogged, TaskManagers started and stopped (SIGTERM) as the
HPA step decides. The evidence comes first (decisions, TaskManagers registered,
parallelism RUNNING from the REST API), then the exact exactly-once check.

The input follows the job's measured drain rate (:mod:`flinkai_bench.scaling.load`),
so the backlog stands above target until the third TaskManager ran, whatever the
machine's speed, then drains. Not in the default run (``make test``) yet; run it with
``pytest -m scaling tests/integration/test_reactive_scaling.py``.
"""

from __future__ import annotations

import pytest

from flinkai.kafka.broker import LocalKafka
from flinkai_bench.autoscaling.timeline import reduce_timeline
from flinkai_bench.scaling.harness import ScalingOptions, run_scaling

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.scaling]


def test_backlog_scales_up_twice_and_down_once_exactly_once(
    kafka_broker: LocalKafka, model_artifacts: object
) -> None:
    lines: list[str] = []
    run = run_scaling(
        kafka_broker.bootstrap,
        ScalingOptions(hold_s=5.0, down_window_s=20.0, timeout_s=420.0, drain_wait_s=90.0),
        progress=lines.append,
    )
    timeline = "\n".join(line for line in lines if "decide" in line or "load" in line)
    timeline += "\n" + "\n".join(lines[-30:])
    print("\n".join(lines))  # every sample: shown with -s, and when an assert fails
    assert run.error is None, f"{run.error}; {run.exactly_once}\n{timeline}"
    assert not run.replaced, f"TaskManagers exited on their own: {run.replaced}\n{timeline}"
    figures = reduce_timeline(
        run.samples, run.events, target=run.target, load_stopped_t=run.load_stopped_t
    )

    # The HPA step decided two scale-ups and one scale-down, in that order.
    assert [(e.before, e.after) for e in run.events] == [(1, 2), (2, 3), (3, 2)], timeline
    # Flink followed: each change ran at its new parallelism (REST), the removed
    # TaskManager left the cluster, and the job restarted rather than stopped.
    assert figures.parallelism_seen == [1, 2, 3, 2], timeline
    for f in figures.scale_events:
        assert f.running_t is not None and f.parallelism_after == f.after, (f, timeline)
    assert max(s.registered for s in run.samples) == 3, timeline
    assert run.samples[-1].registered == 2 and run.samples[-1].running, timeline
    # The scale-up was for a backlog: the signal stood above target x replicas.
    first = run.steps[0][1] if run.steps else None
    ups = [step for _, step in run.steps if step.desired > step.current]
    assert ups and all(step.value > run.target for step in ups), (first, timeline)

    # Every input exactly once across the three rescales (the exact checker's verdict
    # on the output read to its end offsets), and nothing dead-lettered.
    assert run.expected_ids and run.exactly_once_ok, run.exactly_once
    assert run.dead_letters == 0
