"""The chart's autoscaling contract as :mod:`flinkai_bench.autoscaling` reads it."""

from __future__ import annotations

import pytest

from flinkai_bench.autoscaling import ChartError, helm_command, render
from flinkai_bench.autoscaling.chart import _fill_values


def test_values_render_has_the_hpa_metrics_and_their_rules() -> None:
    chart = render(use_helm=False)
    assert chart.rendered_by == "values"
    backlog = chart.metrics["ai_operator_backlog_depth"]
    assert backlog.type == "External" and backlog.target == 10.0
    # Flink's reporter writes "-" as "_" in label values; the HPA selects on that form.
    assert backlog.selector == {"job_name": "flinkai_embed_clicks"}
    assert chart.metrics["gpu_utilization_ratio"].target == pytest.approx(0.75)
    for name in chart.metrics:
        chart.rule(name)  # every HPA metric is served by a rule
    assert chart.behavior["scaleUp"]["stabilizationWindowSeconds"] == 30


def test_rule_promql_is_filled_like_the_adapter_and_follows_overrides() -> None:
    chart = render(overrides={"autoscaling.backlog.window": "7s"}, use_helm=False)
    rule = chart.rule("ai_operator_backlog_depth")
    series = "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset"
    pending = "flink_taskmanager_job_task_operator_pendingRecords"
    assert rule.external and rule.metric_name(series) == "ai_operator_backlog_depth"
    assert rule.metric_name(pending) is None and rule.metric_name("something_else") is None
    q = rule.promql(series, {"namespace": "ns", "job_name": "j"}, ["namespace"])
    end = "max by (topic, partition) (kafka_log_log_logendoffset{})"
    for _ in range(6):  # the broker's topic label written as Flink's reporter writes it
        end = f'label_replace({end}, "topic", "${{1}}_${{2}}", "topic", "(.*)[^a-zA-Z0-9:_](.*)")'
    lag = (
        f"sum by (namespace) ({end} - 1 - on (topic, partition) group_right"
        " max by (namespace, topic, partition)"
        f' ({series}{{namespace="ns",job_name="j"}} >= 0))'
    )
    fallback = f'sum(avg_over_time({pending}{{namespace="ns",job_name="j"}}[7s])) by (namespace)'
    assert q == f"(avg_over_time(({lag})[7s:5s]) or {fallback}) / 64"
    assert "<<" not in q and "{{" not in q
    narrowed = render(
        overrides={"autoscaling.backlog.endOffsetMatchers": 'namespace="kafka"'}, use_helm=False
    ).rule("ai_operator_backlog_depth")
    assert 'kafka_log_log_logendoffset{namespace="kafka"}' in narrowed.metrics_query


def test_only_values_references_render_without_helm() -> None:
    assert _fill_values("x {{ .Values.a.b }} y", {"a": {"b": 3}}) == "x 3 y"
    with pytest.raises(ChartError, match="needs helm"):
        _fill_values('{{ include "x" . }}', {})
    with pytest.raises(ChartError, match=r"no a\.c"):
        _fill_values("{{ .Values.a.c }}", {"a": {"b": 3}})


def test_helm_render_matches_the_values_render() -> None:
    """Where .ci/deploy-check built helm (CI does, before the tests), both renders agree."""
    if helm_command() is None:
        pytest.skip("helm not set up here (.ci/deploy-check setup); CI builds it first")
    overrides = {
        "autoscaling.backlog.window": "5s",
        "autoscaling.backlog.endOffsetMatchers": 'namespace="kafka"',
    }
    by_helm = render(overrides=overrides, use_helm=True)
    by_values = render(overrides=overrides, use_helm=False)
    assert by_helm.rendered_by == "helm"
    assert by_helm.rules == by_values.rules
    assert by_helm.metrics == by_values.metrics
    assert by_helm.behavior == by_values.behavior
    assert (by_helm.min_replicas, by_helm.max_replicas) == (
        by_values.min_replicas,
        by_values.max_replicas,
    )
