"""The chart's autoscaling queries on real series: a real Prometheus scrapes a running job.

The embed job runs on the real broker and MiniCluster with Flink's Prometheus reporter
on; ``flinkai.gpu_metrics`` runs beside it as in a TaskManager pod. A real Prometheus
(``flinkai.local.prometheus``) scrapes both, with the ``namespace`` and ``pod`` labels a
PodMonitor adds. The prometheus-adapter rules come from the rendered chart (helm where
``.ci/deploy-check`` built it, as in CI), and their PromQL is filled and evaluated the
way the adapter does. A missing ``prometheus`` fails the test (CI installs it), never
skips it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flinkai import gpu_metrics, metrics
from flinkai.config import load_config
from flinkai.kafka.admin import produce
from flinkai.kafka.broker import LocalKafka
from flinkai.local.errors import ServiceError
from flinkai.local.process import free_port, spawn, stop_group, tcp_open, wait_until
from flinkai.local.prometheus import LocalPrometheus, ScrapeTarget
from flinkai_bench.autoscaling import render
from flinkai_bench.scaling.harness import source_lag_query
from tests.services import start_or_fail

from .streaming import POISON, StreamingJob, make_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMESPACE = "flinkai"
#: The MiniCluster is one JVM: JobManager and TaskManager metrics share one endpoint.
POD = "flinkai-taskmanager-0"
BACKLOG = "ai_operator_backlog_depth"
#: Rows sent at once: a few times what the job buffers in flight (the source's fetch
#: queue of up to 2 x 500 records, plus one Python bundle), so the rest waits in Kafka.
BURST = 3000
#: Bursts at most (each twice the last) until the windowed backlog reaches one batch:
#: how fast the job drains 3,000 rows ranges from about 1 s to tens of seconds.
MAX_BURSTS = 4
#: Small Python bundles: with the default 1,024 rows, a second thousand rows in flight
#: would hide most of the burst from ``pendingRecords``.
BUNDLE = 64
#: A short averaging window keeps the test short; the query is otherwise the chart's.
WINDOW = "5s"


@pytest.fixture
def gpu_endpoint(tmp_path: Path) -> Iterator[str]:
    """``python -m flinkai.gpu_metrics`` on a free loopback port, as the chart runs it."""
    import sys

    port = free_port()
    proc = spawn(
        [sys.executable, "-m", "flinkai.gpu_metrics", "--host", "127.0.0.1", "--port", str(port)],
        tmp_path / "gpu_metrics.log",
    )
    try:
        assert wait_until(
            lambda: tcp_open("127.0.0.1", port), 30, alive=lambda: proc.poll() is None
        )
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(proc)


def _prometheus(tmp_path: Path, targets: list[ScrapeTarget]) -> LocalPrometheus:
    prom = LocalPrometheus(tmp_path / "prometheus", targets, scrape_interval_s=1.0)
    return start_or_fail(prom, "Prometheus", (ServiceError,))


def test_chart_adapter_queries_on_a_running_job(
    kafka_broker: LocalKafka, model_artifacts: object, gpu_endpoint: str, tmp_path: Path
) -> None:
    chart = render(overrides={"autoscaling.backlog.window": WINDOW})
    backlog_metric = chart.metrics[BACKLOG]
    backlog_rule = chart.rule(BACKLOG)
    # The same rule where no broker series joins: its pendingRecords fallback.
    fallback_rule = render(
        overrides={
            "autoscaling.backlog.window": WINDOW,
            "autoscaling.backlog.endOffsetSeries": "no_such_broker_series",
        }
    ).rule(BACKLOG)
    assert f"[{WINDOW}]" in backlog_rule.metrics_query, backlog_rule.metrics_query

    reporter = free_port()
    config = load_config(env={}).with_overrides(
        runtime={
            "prometheus_port": reporter,
            "python_bundle_size": BUNDLE,
            "arrow_batch_size": BUNDLE,
        }
    )
    labels = {"namespace": NAMESPACE, "pod": POD}
    prom = _prometheus(
        tmp_path,
        [
            ScrapeTarget("flink", f"127.0.0.1:{reporter}", labels),
            ScrapeTarget("gpu-metrics", gpu_endpoint, labels),
            # The broker's JMX exporter (log end offsets), in a namespace of its own.
            ScrapeTarget(
                "kafka", str(kafka_broker.metrics_address), {"namespace": "kafka", "pod": "k-0"}
            ),
        ],
    )
    events, _, _ = make_events(BURST + 20, poison_every=10**9)
    job = StreamingJob(kafka_broker.bootstrap, config=config)
    timeline: list[tuple[float, float, float, float, float]] = []
    try:
        job.start()
        job.warm_up(events, 20)
        # An empty text reaches the model function as a failed row (embedding_failed_rows).
        produce(kafka_broker.bootstrap, job.topics[0], [POISON[2]])
        prom.wait_for_targets(timeout_s=30)

        # Every series an adapter rule selects exists under the name the rule expects.
        def discovered() -> dict[str, str]:
            found: dict[str, str] = {}
            for rule in chart.rules:
                for series in prom.series(rule.series_query):
                    name = rule.metric_name(series["__name__"])
                    if name:
                        found[name] = series["__name__"]
            return found

        want = {
            BACKLOG,
            "flinkai_embedded_rows_per_second",
            "flinkai_embedding_failed_rows_per_second",
            "flinkai_embedding_batch_ms",
        }
        names: dict[str, str] = {}

        def all_found() -> bool:
            nonlocal names
            names = discovered()
            return want <= set(names)

        assert wait_until(all_found, 60, poll_s=1.0), names
        assert names[BACKLOG] == (
            "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset"
        )
        assert names["flinkai_embedded_rows_per_second"] == metrics.prometheus_name(
            metrics.EMBEDDED_ROWS
        )
        # The GPU series exists exactly when NVML sees a GPU: absent, never a fake 0, here.
        has_gpu = gpu_metrics.load_nvml() is not None
        assert (gpu_metrics.GPU_UTILIZATION in names) == has_gpu, names

        # The external backlog query, as the adapter sends it for the HPA's selector.
        backlog_q = backlog_rule.promql(
            names[BACKLOG], {"namespace": NAMESPACE, **backlog_metric.selector}, ["namespace"]
        )
        fallback_q = fallback_rule.promql(
            names[BACKLOG], {"namespace": NAMESPACE, **backlog_metric.selector}, ["namespace"]
        )
        pending_q = (
            f'sum(flink_taskmanager_job_task_operator_pendingRecords{{namespace="{NAMESPACE}"}})'
        )
        lag_q = source_lag_query(job.topics[0])
        rate_rule = chart.rule("flinkai_embedded_rows_per_second")
        rate_q = rate_rule.promql(
            names["flinkai_embedded_rows_per_second"],
            {"namespace": NAMESPACE, "pod": POD},
            ["pod"],
        )

        def value(q: str) -> float:
            samples = prom.query(q)
            assert len(samples) <= 1, (q, samples)
            return samples[0].value if samples else 0.0

        # The rule divides by the chart's embedding.batch_size: the query's last term.
        batch = int(backlog_rule.metrics_query.rsplit("/", 1)[1])
        before = value(backlog_q)
        start = time.monotonic()
        burst = events[20:]
        produce(kafka_broker.bootstrap, job.topics[0], burst)
        # seen: pending rows scraped since the last burst was sent at sent_at
        sent, sent_at, peak, seen = 1, start, 0.0, False
        # Rise, then drain: bounded by time; sampled once a second like a scrape.
        while time.monotonic() - start < 150:
            v, raw = value(backlog_q), value(pending_q)
            lag, old = value(lag_q), value(fallback_q)
            timeline.append((round(time.monotonic() - start, 1), v, raw, lag, old))
            peak, seen = max(peak, v), seen or raw > 0
            drained = raw == 0 and (seen or time.monotonic() - sent_at > 5)
            if drained and peak < 1 and sent < MAX_BURSTS:
                # The job drained the burst before the 5 s average reached one batch
                # (a fast or idle machine): send it again, twice as large.
                burst = burst * 2
                produce(kafka_broker.bootstrap, job.topics[0], burst)
                sent, sent_at, seen = sent + 1, time.monotonic(), False
            elif peak > 0 and raw == 0 and lag < batch and v < peak / 2:
                break
            time.sleep(1.0)
        rows_per_s = [s.value for s in prom.query(rate_q)]
    finally:
        job.cancel()
        prom.stop()
    print(f"bursts sent: {sent};", "backlog timeline (s, ai_operator_backlog_depth, "
          "sum pendingRecords, source lag, the rule's pendingRecords fallback):",
          timeline)  # fmt: skip
    # Rises: input outpaced the job by far more than the job buffers (raw pending rows
    # above a few batches), and the windowed query saw it. How high the 5 s average gets
    # depends on how fast the machine drains the burst (about 1 s on a fast CI runner,
    # tens of seconds here), so the bound is one batch, not a fixed multiple.
    raw_peak = max(t[2] for t in timeline)
    lag_peak = max(t[3] for t in timeline)
    assert before < 1, (before, timeline)
    assert raw_peak >= 4 * batch, timeline
    assert peak >= 1, timeline
    # The source lag holds what pendingRecords holds and the prefetch besides; the rule
    # averages it, so never above its largest sample.
    assert lag_peak >= raw_peak, timeline
    assert peak <= lag_peak / batch + 1e-6, timeline
    # Without the broker series the rule is the pendingRecords sum: it rose, bounded by
    # its own samples.
    old_peak = max(t[4] for t in timeline)
    assert 0 < old_peak <= raw_peak / batch + 1e-6, timeline
    # Falls: the source caught up (nothing pending) and the windowed value came down.
    assert timeline[-1][2] == 0 and timeline[-1][1] < peak / 2, timeline
    # Caught up, the source lag is under a batch too.
    assert timeline[-1][3] < batch, timeline
    # The pod-level rate rule gave a positive rows/s for the pod doing the work.
    assert rows_per_s and rows_per_s[0] > 0, rows_per_s


def test_prometheus_scrapes_the_jobmanager_and_each_taskmanager(tmp_path: Path) -> None:
    """A standalone cluster, each process with its own reporter, as each pod has one."""
    from flinkai.runtime.cluster import LocalFlinkCluster

    def targets(cluster: LocalFlinkCluster) -> list[ScrapeTarget]:
        return [
            ScrapeTarget("flink", address, {"namespace": NAMESPACE, "pod": name})
            for name, address in cluster.metrics_addresses.items()
        ]

    def registered(prom: LocalPrometheus) -> float:
        samples = prom.query("flink_jobmanager_numRegisteredTaskManagers")
        return samples[0].value if samples else -1.0

    with LocalFlinkCluster(taskmanagers=1, prometheus=True, taskmanager_memory="1024m") as cluster:
        assert set(cluster.metrics_addresses) == {"jobmanager", "tm-1"}
        prom = _prometheus(tmp_path, targets(cluster))
        try:
            prom.wait_for_targets(timeout_s=60)
            assert wait_until(lambda: registered(prom) == 1.0, 30, poll_s=1.0)
            # A TaskManager that joins is scraped without restarting Prometheus.
            cluster.start_taskmanager()
            prom.set_targets(targets(cluster))
            prom.wait_for_targets(timeout_s=60)
            assert wait_until(lambda: registered(prom) == 2.0, 30, poll_s=1.0)
            pods = {
                s.labels["pod"]
                for s in prom.query('flink_taskmanager_Status_JVM_CPU_Load{namespace="flinkai"}')
            }
            assert pods == {"tm-1", "tm-2"}, pods
        finally:
            prom.stop()
