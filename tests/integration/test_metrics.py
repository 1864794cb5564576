"""Operator metrics reach Prometheus: the embed job on the real MiniCluster, scraped live."""

from __future__ import annotations

import pytest

from flinkai import metrics
from flinkai.config import load_config
from flinkai.kafka.admin import produce
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port

from .streaming import POISON, StreamingJob, make_events, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 40


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


def test_embed_job_exports_flinkai_and_flink_metrics(
    kafka_broker: LocalKafka, model_artifacts: object
) -> None:
    port = free_port()
    config = load_config(env={}).with_overrides(runtime={"prometheus_port": port})
    events, _, _ = make_events(N, poison_every=10**9)
    job = StreamingJob(kafka_broker.bootstrap, config=config)
    job.start()
    url = f"http://127.0.0.1:{port}/metrics"
    rows = metrics.prometheus_name(metrics.EMBEDDED_ROWS)
    failed = metrics.prometheus_name(metrics.EMBEDDING_FAILED_ROWS)
    batch_ms = metrics.prometheus_name(metrics.EMBEDDING_BATCH_MS)
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def counted() -> bool:
        nonlocal samples
        try:
            samples = metrics.scrape(url)
        except OSError:
            return False
        return _total(samples, rows) >= N and _total(samples, failed) >= 1

    try:
        job.warm_up(events, N)
        # An empty text passes parsing and reaches the model function as a failed row.
        produce(kafka_broker.bootstrap, job.topics[0], [POISON[2]])
        assert wait_until(counted, timeout_s=60, interval_s=2.0), {
            k: v for k, v in samples.items() if "flinkai" in k
        }
    finally:
        job.cancel()
    assert _total(samples, rows) == N
    assert _total(samples, batch_ms) > 0
    labels = samples[rows][0][0]
    # The reporter rewrites characters Prometheus does not allow in label values.
    assert labels.get("job_name") == "flinkai_embed_clicks", labels
    # Flink's own operator metrics come through the same endpoint (the HPA uses them).
    assert any(name.endswith("_numRecordsIn") for name in samples), sorted(samples)[:20]
