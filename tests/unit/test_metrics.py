"""The metric catalogue and the counter-backed gauge, without Flink."""

from __future__ import annotations

import pytest

from flinkai import metrics


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


class _Group:
    def __init__(self) -> None:
        self.counters: dict[str, _Counter] = {}

    def counter(self, name: str) -> _Counter:
        return self.counters.setdefault(name, _Counter())


def test_gauge_reads_the_last_value_set_scaled() -> None:
    group = _Group()
    set_jsd = metrics.gauge(group, metrics.DRIFT_JSD)
    for value in (0.125, 0.5, 0.031, 0.031):
        set_jsd(value)
    assert group.counters["drift_jsd_micro"].value == 31_000
    set_z = metrics.gauge(group, metrics.DRIFT_Z)
    set_z(-1.25)
    assert group.counters["drift_z_milli"].value == -1250


def test_exported_names_follow_flinks_prometheus_reporter() -> None:
    assert (
        metrics.prometheus_name(metrics.EMBEDDED_ROWS)
        == "flink_taskmanager_job_task_operator_flinkai_embedded_rows"
    )
    assert set(metrics.METRICS) >= {"embedded_rows", "drift_jsd_micro", "window_length_ms"}
    assert all(m.kind in ("counter", "gauge") for m in metrics.METRICS.values())


def test_a_labelled_metric_carries_its_label_key_in_the_name() -> None:
    # As scraped from a running llm_complete job by a real Prometheus (reason=store_unavailable).
    want = "flink_taskmanager_job_task_operator_flinkai_reason_llm_prefix_misses"
    assert metrics.prometheus_name(metrics.LLM_PREFIX_MISSES) == want
    assert metrics.prometheus_name("llm_prefix_misses") == want
    with pytest.raises(ValueError, match="per 'reason'"):
        metrics.labelled_counter(object(), metrics.LLM_PREFIX_MISSES, "cause")


def test_reporter_settings_and_jar() -> None:
    settings = metrics.reporter_settings(9249)
    assert settings["metrics.reporter.prom.port"] == "9249"
    assert settings["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
    jar = metrics.reporter_jar()
    assert jar is not None and jar.name.startswith("flink-metrics-prometheus-")
