"""Reactive rescaling under load: the embed job in application mode, TaskManagers
added and removed by the HPA's own decision step.

``jobs/embed_clicks.sql`` runs as the Helm chart runs it: Flink's ``standalone-job``
entry point (application mode) with ``scheduler-mode: reactive`` and one slot per
TaskManager, so the job always runs at the parallelism of the TaskManagers present.
The input topic has ``partitions`` partitions, the most parallelism that can help.

The chart is rendered with values stated for this machine (:func:`chart_values`:
no GPU, a rows target that fits the model, the partition count as ``maxReplicas``);
every metric its HPA names is read each tick from a real Prometheus, which scrapes each
TaskManager's reporter with the ``namespace`` and ``pod`` labels a PodMonitor adds,
through the rendered prometheus-adapter query
(:class:`~flinkai_bench.autoscaling.adapter.AdapterReader`). The Kubernetes
controller's arithmetic
(:class:`~flinkai_bench.autoscaling.hpa.HorizontalPodAutoscaler`: per-metric proposals
with the tolerance, the largest, a scale-down skipped while a metric is missing, the
chart's windows and policies) sets the replica count, and the harness starts
TaskManagers or stops them (SIGTERM, as a pod deletion does). The rescaling itself is
Flink's, with the chart's ``flink.rescale.*`` keys. What departs from Kubernetes is
named in :func:`shortcuts` (a time scale on every window, a 1 s sync period). A second
HPA rendered with the chart's default ``taskmanager.gpu.enabled=true`` decides on the
same reads without being applied: the missing-metric case.

The REST API still gives the job's state and vertex parallelism and the source's
``pendingRecords``, which the load follows; the consumer group's committed offsets
give the lag KEDA's Kafka scaler would read, for the comparison in the report.

Load (:mod:`.load`): while loading, the harness offers input at the job's measured
drain rate and keeps ``lead_s`` seconds of work waiting, so the signal stands far
above target at any machine speed until the top replica count has run for
``hold_s``. Then it offers nothing, the backlog drains, and the HPA scales down (one
Pods-policy step). Loading is bounded in records and in time. The run ends when the
scale-down runs and every input is committed; a run cut short by its timeout still
waits (bounded) for every offered record to be committed. Then the exact checker
reads the output to its end offsets.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flinkai_bench.autoscaling.adapter import AdapterReader
from flinkai_bench.autoscaling.chart import flink_label_value
from flinkai_bench.autoscaling.hpa import HorizontalPodAutoscaler, HpaDecision
from flinkai_bench.autoscaling.timeline import Sample, ScaleEvent
from flinkai_bench.scaling.load import LoadPlan, RateFollower

__all__ = [
    "BEAM_CANCEL_RACE",
    "ScalingOptions",
    "ScalingRun",
    "chart_values",
    "exit_cause",
    "run_scaling",
    "shortcuts",
]

log = logging.getLogger(__name__)

JOB = Path(__file__).resolve().parents[3] / "jobs" / "embed_clicks.sql"
BACKLOG_METRIC = "ai_operator_backlog_depth"
#: The ``namespace`` label the scrape adds, as a PodMonitor does.
NAMESPACE = "flinkai"


@dataclass(frozen=True)
class ScalingOptions:
    """Sizes and timings of one run (the chart's own values where they apply).

    Attributes:
        partitions: Input partitions; also the HPA's ``maxReplicas`` here
            (``kafka.sourcePartitions`` and ``autoscaling.maxReplicas``).
        load: The input offered while loading (:class:`~.load.LoadPlan`).
        hold_s: How long the top replica count runs under load (the rate after).
        load_timeout_s: Loading stops after this long even short of the top count
            (the run then fails its checks, but ends).
        tick_s: Sampling and decision period (the HPA's sync period is 15 s: a
            named shortcut).
        time_scale: Every window of the chart (the HPA's stabilisation windows and
            policy periods, the adapter's backlog and rows windows) times this: a
            named shortcut, so a run takes minutes, not an hour.
        rows_target: ``autoscaling.embeddedRows.averageValue``: a little below what
            one TaskManager embeds per second here with the model used (the null model
            ran at about 900 records/s on one TaskManager of this 2-core machine).
        resource_stabilization / cooldown / submission_stabilization: Flink's
            ``flink.rescale.*`` values (chart 30s / 30s / 10s), scaled like the windows.
        bundle: Python bundle and Arrow batch rows (small, so ``pendingRecords`` is
            not hidden in the worker's bundle).
        fetch_bytes: The consumer's prefetch per partition (``SOURCE_FETCH_BYTES``):
            ``pendingRecords`` does not count prefetched records, and Kafka's default
            1 MB holds thousands of click events per partition.
        timeout_s: Bound on the run's scaling loop.
        settle_s: After a scale-down, how long the run waits for the next one (down to
            ``minReplicas``) before it ends.
        drain_wait_s: After the loop, how long to wait for every offered record to
            be committed before the exact check (matters after a timeout).
        offset_retries: Attempts per tick at reading the group's committed offsets
            (the coordinator can be briefly unavailable).
        null_model: Embed with the null model (:mod:`flinkai_bench.research.null_model`): the whole
            data path (Kafka, Python worker, tokeniser, ONNX Runtime, exactly-once sink)
            without the model's cost. On 2 shared cores the real model ran at 15-60
            records/s, so one backlog took minutes to drain.
        text_words: Words per click text.
    """

    partitions: int = 3
    load: LoadPlan = field(default_factory=LoadPlan)
    hold_s: float = 15.0
    load_timeout_s: float = 300.0
    tick_s: float = 1.0
    time_scale: float = 0.1
    rows_target: int = 800
    resource_stabilization: str = "6s"  # the chart's 30s would add 30 s per scale-up
    cooldown: str = "3s"
    submission_stabilization: str = "1s"
    bundle: int = 64
    fetch_bytes: int = 65536
    timeout_s: float = 900.0
    drain_wait_s: float = 120.0
    settle_s: float = 120.0
    offset_retries: int = 3
    null_model: bool = True
    text_words: int = 24


@dataclass
class ScalingRun:
    """What a run recorded; :func:`flinkai_bench.autoscaling.timeline.reduce_timeline` reads it.

    Attributes:
        target: The HPA's ``averageValue`` for the backlog metric (batches per replica).
        batch_size: ``embedding.batch_size`` (records per batch).
        samples / events / decisions: The timeline, the replica changes, and each
            HPA reconcile (every metric's proposal).
        shadow_decisions: The same reconciles by the HPA the chart's default
            ``taskmanager.gpu.enabled=true`` renders (a metric missing here); not applied.
        chart_metrics: The HPA's metrics as rendered with the run's values.
        metrics_seen: Those the adapter's queries returned a value for at least once.
        lost / duplicated: Records missing from, and repeated in, the output.
        metric_read_errors: Failed Prometheus reads (each read as a missing metric).
        load_stopped_t: When input stopped being added.
        expected_ids: Every id sent.
        output_ids / dead_letters: Ids read from the output topic, dead-letter count.
        exactly_once: The checker's verdict as text; ``exactly_once_ok`` its flag.
        stop_mode: How TaskManagers were removed.
        settings: The options and what the chart gave, for the JSON.
        load_rates: ``(t, measured drain rate)`` the load followed, per tick (None
            before the first measurement).
        offset_read_errors: Failed reads of the group's committed offsets (retried).
        check_s: Seconds the exact check took (reading the output to its end).
        stopped_tms: TaskManagers that are gone (stopped by the harness, or exited).
        replaced: TaskManagers that exited on their own and were replaced (with the
            end of their output).
        error: Why the run fell short (a timeout, records left uncommitted), or None.
    """

    target: float
    batch_size: int
    samples: list[Sample] = field(default_factory=list)
    events: list[ScaleEvent] = field(default_factory=list)
    decisions: list[HpaDecision] = field(default_factory=list)
    shadow_decisions: list[HpaDecision] = field(default_factory=list)
    chart_metrics: list[str] = field(default_factory=list)
    metrics_seen: set[str] = field(default_factory=set)
    broker_metrics: str | None = None
    lost: int | None = None
    duplicated: int | None = None
    metric_read_errors: int = 0
    load_stopped_t: float | None = None
    expected_ids: list[str] = field(default_factory=list)
    output_ids: list[str] = field(default_factory=list)
    dead_letters: int = 0
    exactly_once: str = "not checked"
    exactly_once_ok: bool = False
    stop_mode: str = "SIGTERM (graceful TaskManager shutdown, as a pod deletion)"
    settings: dict[str, Any] = field(default_factory=dict)
    load_rates: list[tuple[float, float | None]] = field(default_factory=list)
    offset_read_errors: int = 0
    check_s: float | None = None
    stopped_tms: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    error: str | None = None


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    """Config overrides for the cluster's processes (they inherit this environment)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Probe:
    """REST and Kafka reads for one tick; every read tolerates a job mid-restart."""

    def __init__(
        self, cluster: Any, bootstrap: str, group: str, topic: str, retries: int = 3
    ) -> None:
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.retries = retries
        self.admin = self._new_admin()
        self.job_id: str | None = None
        self._metric: dict[str, str] = {}
        self.committed_errors = 0

    def _new_admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="flinkai-scaling")

    def close(self) -> None:
        self.admin.close()

    def _get(self, path: str) -> Any:
        try:
            return self.cluster.rest(path)
        except Exception:  # REST briefly unavailable while the job restarts
            return None

    def job(self) -> tuple[int | None, bool, list[dict[str, Any]]]:
        if self.job_id is None:
            jobs = (self._get("/jobs/overview") or {}).get("jobs") or []
            if not jobs:
                return None, False, []
            self.job_id = jobs[0]["jid"]
        detail = self._get(f"/jobs/{self.job_id}") or {}
        vertices = detail.get("vertices") or []
        if not vertices:
            return None, False, []
        parallelism = max(int(v["parallelism"]) for v in vertices)
        running = detail.get("state") == "RUNNING" and all(
            v.get("status") == "RUNNING" for v in vertices
        )
        return parallelism, running, vertices

    def pending(self, vertices: list[dict[str, Any]]) -> float | None:
        total = 0.0
        found = False
        for v in vertices:
            base = f"/jobs/{self.job_id}/vertices/{v['id']}/subtasks/metrics"
            name = self._metric.get(v["id"])
            if name is None:
                listed = self._get(base) or []
                names = [m["id"] for m in listed if m["id"].endswith(".pendingRecords")]
                if not names:
                    continue
                name = self._metric[v["id"]] = names[0]
            got = self._get(f"{base}?get={name}&agg=sum") or []
            for m in got:
                if "sum" in m:
                    total += float(m["sum"])
                    found = True
        return total if found else None

    def committed(self) -> int | None:
        """Input offsets the group has committed, summed; None if no read succeeded.

        The group coordinator can be briefly unavailable (``CoordinatorNotAvailable``
        while it loads or moves): each failure gets a fresh admin client and a short
        pause, ``retries`` attempts in all.
        """
        for attempt in range(self.retries):
            try:
                offsets = self.admin.list_group_offsets(self.group).get(self.group) or {}
            except Exception as e:
                self.committed_errors += 1
                log.warning(
                    "reading committed offsets of %s (attempt %d of %d): %s: %s",
                    self.group,
                    attempt + 1,
                    self.retries,
                    type(e).__name__,
                    e,
                )
                with contextlib.suppress(Exception):
                    self.admin.close()
                time.sleep(0.5 * (attempt + 1))
                with contextlib.suppress(Exception):
                    self.admin = self._new_admin()
                continue
            values = [
                o.offset for tp, o in offsets.items() if tp.topic == self.topic and o.offset >= 0
            ]
            return sum(values) if values else 0
        return None


_VOCAB = [
    "market",
    "rally",
    "stocks",
    "shares",
    "profit",
    "quarter",
    "league",
    "match",
    "season",
    "goal",
    "launch",
    "software",
    "chip",
    "network",
    "study",
    "space",
    "climate",
    "vote",
    "court",
    "energy",
]


def _null_model_env() -> dict[str, str]:
    """Config overrides that load the null model, built beside the exported one."""
    from flinkai.config import load_config
    from flinkai.models.artifacts import load_artifacts
    from flinkai.paths import models_dir
    from flinkai_bench.research.null_model import NULL_MODEL_NAME, build_null_model

    dest = models_dir() / NULL_MODEL_NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    null = build_null_model(load_artifacts(load_config().model), dest)
    return {
        "FLINKAI_MODEL_NAME": NULL_MODEL_NAME,
        "FLINKAI_MODEL_DIR": str(dest),
        "FLINKAI_MODEL_DIM": str(null.dim),
    }


def _texts(n: int, words: int, start: int) -> list[bytes]:
    vocab = _VOCAB
    out = []
    for i in range(start, start + n):
        text = " ".join(vocab[(i * 7 + k * 3) % len(vocab)] for k in range(words))
        out.append(
            json.dumps({"user_id": f"s{i}", "click_text": f"{text} {i}", "event_time": 1}).encode()
        )
    return out


class _Sender:
    """One librdkafka producer for the run: the load follows the job's rate each tick,
    and a Python client per send cost a core's share at a few thousand records/s."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer: Any = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )

    def send(self, values: list[bytes]) -> None:
        """Write and flush; every record acknowledged, or SetupError."""
        from flinkai.errors import SetupError

        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for v in values:
            while True:
                try:
                    self.producer.produce(self.topic, v, on_delivery=delivered)
                    break
                except BufferError:  # local queue full: let deliveries drain it
                    self.producer.poll(0.1)
        left = self.producer.flush(60.0)
        if left or failed:
            raise SetupError(
                f"writing the scaling input to {self.topic!r}: {left} records unflushed, "
                f"{len(failed)} failed ({failed[:1]})"
            )

    def close(self) -> None:
        self.producer.flush(10.0)
        # Dropped now, not at a later collection: a live client keeps reconnecting
        # (and logging) once the broker stops.
        self.producer = None


def chart_values(options: ScalingOptions) -> dict[str, Any]:
    """The chart values this machine runs with (``--set``), stated in the JSON and output.

    No GPU here: with ``taskmanager.gpu.enabled`` at its default (true) the HPA would also
    ask for ``gpu_utilization_ratio``, a series no pod serves, and hold every scale-down.
    """
    scale = options.time_scale
    return {
        "taskmanager.gpu.enabled": False,
        "kafka.sourcePartitions": options.partitions,
        "autoscaling.maxReplicas": options.partitions,
        "autoscaling.embeddedRows.averageValue": str(options.rows_target),
        # The adapter's windows, scaled like the HPA's (chart 30s and 2m).
        "autoscaling.backlog.window": f"{max(1, round(30 * scale))}s",
        # The step of the subquery averaging the source lag over that window (chart 5s).
        "autoscaling.backlog.resolution": f"{max(1, round(5 * scale))}s",
        "autoscaling.embeddedRows.window": f"{max(3, round(120 * scale))}s",
        "flink.rescale.stabilizationTimeout": options.resource_stabilization,
        "flink.rescale.cooldown": options.cooldown,
        "flink.rescale.submissionStabilizationTimeout": options.submission_stabilization,
    }


def shortcuts(options: ScalingOptions) -> list[str]:
    """Where the run departs from the chart on Kubernetes, each named."""
    return [
        f"time_scale {options.time_scale:g}: the HPA's stabilisation windows and policy "
        "periods, and the adapter's backlog and rows windows (and the backlog subquery's "
        "step), are the chart's times this",
        f"flink.rescale.* at {options.resource_stabilization} / {options.cooldown} / "
        f"{options.submission_stabilization} (chart 30s / 30s / 10s)",
        f"the HPA syncs every {options.tick_s:g} s (kube-controller-manager: 15 s)",
        "pods are local TaskManager processes (started and SIGTERMed by the harness as the "
        "Deployment's ReplicaSet would); Prometheus scrapes each one every 1 s",
        "the null model embeds (the data path without the model's cost)"
        if options.null_model
        else "the real model embeds",
    ]


def run_scaling(
    bootstrap: str,
    options: ScalingOptions | None = None,
    progress: Callable[[str], None] = lambda line: None,
    broker_metrics: str | None = None,
) -> ScalingRun:
    """One rescaling run on the broker at ``bootstrap``; see the module docstring.

    ``broker_metrics`` is the broker's Prometheus endpoint (``LocalKafka.metrics_address``):
    scraped, it gives the chart's backlog rule its log end offsets. Without it the rule
    falls back to ``pendingRecords``, and ``summary.backlog_signal`` says so.

    Raises:
        SetupError: The cluster or a TaskManager would not start.
    """
    from flinkai.config import load_config
    from flinkai.kafka.admin import create_topics
    from flinkai_bench.autoscaling.chart import render

    options = options or ScalingOptions()
    values = chart_values(options)
    chart = render(overrides=values)
    metric = chart.metrics[BACKLOG_METRIC]
    env = {
        "FLINKAI_RUNTIME_PYTHON_BUNDLE_SIZE": str(options.bundle),
        "FLINKAI_RUNTIME_ARROW_BATCH_SIZE": str(options.bundle),
        "FLINKAI_EMBEDDING_VECTOR_ENCODING": "f32",
    }
    if options.null_model:
        env.update(_null_model_env())
    with _env(env):
        batch = load_config().embedding.batch_size
    run = ScalingRun(target=metric.target, batch_size=batch)
    run.chart_metrics = list(chart.metrics)
    run.broker_metrics = broker_metrics
    run.settings = {
        "options": asdict(options),
        "values": values,
        "shortcuts": shortcuts(options),
        "chart": {
            "metrics": {
                m.name: {"type": m.type, "target": m.target} for m in chart.metrics.values()
            },
            "queries": {name: chart.rule(name).metrics_query for name in chart.metrics},
            "behavior": dict(chart.behavior),
            "min_replicas": chart.min_replicas,
            "max_replicas": chart.max_replicas,
            "rendered_by": chart.rendered_by,
        },
        "config_env": env,
    }
    progress(f"chart values: {values}")
    for line in run.settings["shortcuts"]:
        progress(f"shortcut: {line}")
    progress(f"HPA metrics as rendered: {run.settings['chart']['metrics']}")
    rid = uuid.uuid4().hex[:8]
    topics = {
        "CLICKS_TOPIC": f"scale-in-{rid}",
        "EMBEDDINGS_TOPIC": f"scale-out-{rid}",
        "DLQ_TOPIC": f"scale-dlq-{rid}",
    }
    group = f"g-scale-{rid}"
    create_topics(bootstrap, [topics["CLICKS_TOPIC"]], partitions=options.partitions)
    create_topics(bootstrap, [topics["EMBEDDINGS_TOPIC"], topics["DLQ_TOPIC"]])
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        **topics,
        "GROUP_ID": group,
        "SCAN_BOUNDED_MODE": "unbounded",
        "SOURCE_FETCH_BYTES": str(options.fetch_bytes),
    }
    args = ["-pym", "flinkai.cli.main", "run", str(JOB)]
    for k, v in variables.items():
        args += ["--var", f"{k}={v}"]
    # The chart's Flink keys (templates/configmap-flink.yaml) with the values above.
    conf = {
        "scheduler-mode": "reactive",
        "jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout": (
            options.resource_stabilization
        ),
        "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": options.cooldown,
        "jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout": (
            options.submission_stabilization
        ),
    }
    hpa = HorizontalPodAutoscaler.from_chart(
        chart.targets(),
        chart.behavior,
        chart.min_replicas,
        chart.max_replicas,
        time_scale=options.time_scale,
    )
    # The missing-metric case: the same values but the chart's default
    # taskmanager.gpu.enabled=true, so its HPA also asks for gpu_utilization_ratio, which no
    # process here serves. It decides on the same Prometheus every tick; nothing applies
    # its decisions. Kubernetes would hold every scale-down of it.
    gpu_chart = render(overrides={**values, "taskmanager.gpu.enabled": True})
    shadow = HorizontalPodAutoscaler.from_chart(
        gpu_chart.targets(),
        gpu_chart.behavior,
        gpu_chart.min_replicas,
        gpu_chart.max_replicas,
        time_scale=options.time_scale,
    )
    run.settings["missing_metric_case"] = {
        "values": {**values, "taskmanager.gpu.enabled": True},
        "metrics": list(gpu_chart.metrics),
    }
    produced = 0

    sender = _Sender(bootstrap, topics["CLICKS_TOPIC"])

    def send(n: int) -> None:
        nonlocal produced
        sender.send(_texts(n, options.text_words, produced))
        run.expected_ids.extend(f"s{i}" for i in range(produced, produced + n))
        produced += n

    work = Path(tempfile.mkdtemp(prefix="flinkai-scaling-"))
    try:
        done = _run_cluster(
            bootstrap,
            work,
            args,
            conf,
            env,
            (chart, gpu_chart),
            (hpa, shadow),
            run,
            options,
            send,
            topics,
            group,
            progress,
        )
    except BaseException:
        log.warning("scaling run failed; cluster logs kept in %s", work)
        raise
    finally:
        sender.close()
    if done.error or done.replaced or not done.exactly_once_ok:
        progress(f"cluster logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)  # logs, checkpoints, Python worker files
    return done


def _run_cluster(
    bootstrap: str,
    work: Path,
    args: list[str],
    conf: dict[str, str],
    env: dict[str, str],
    charts: tuple[Any, Any],
    hpas: tuple[HorizontalPodAutoscaler, HorizontalPodAutoscaler],
    run: ScalingRun,
    options: ScalingOptions,
    send: Callable[[int], None],
    topics: dict[str, str],
    group: str,
    progress: Callable[[str], None],
) -> ScalingRun:
    from flinkai.kafka.admin import read_to_end_offsets
    from flinkai.local.prometheus import LocalPrometheus
    from flinkai.runtime.cluster import LocalFlinkCluster
    from flinkai.testing import check_exactly_once, result_id

    with (
        _env(env),
        LocalFlinkCluster(
            work / "cluster",
            slots=1,
            application=args,
            flink_conf=conf,
            taskmanager_memory="1024m",
            start_timeout_s=240.0,
            prometheus=True,
        ) as cluster,
    ):
        prom = LocalPrometheus(
            work / "prometheus", _targets(cluster, run.broker_metrics), scrape_interval_s=1.0
        )
        prom.start()
        readers = (
            AdapterReader(charts[0], prom, NAMESPACE),
            AdapterReader(charts[1], prom, NAMESPACE),
        )
        probe = _Probe(
            cluster, bootstrap, group, topics["CLICKS_TOPIC"], retries=options.offset_retries
        )
        try:
            _loop(cluster, probe, prom, readers, hpas, run, options, send, progress)
            _wait_committed(probe, run, options.drain_wait_s, progress)
        finally:
            run.offset_read_errors = probe.committed_errors
            run.metric_read_errors = readers[0].errors
            probe.close()
            prom.stop()
        # Every input offset is committed (or the wait above says why not). The sink
        # commits its transaction on the same checkpoint notification, so read to the
        # end offsets while the job still runs; only missing ids (a commit still in
        # flight) are read again, a few seconds on.
        read_started = time.monotonic()
        for attempt in range(4):
            out = read_to_end_offsets(bootstrap, topics["EMBEDDINGS_TOPIC"], timeout_s=120.0)
            report = check_exactly_once(run.expected_ids, out.records)
            if report.ok or report.duplicated or report.unexpected or attempt == 3:
                break
            time.sleep(5.0)
        dlq = read_to_end_offsets(bootstrap, topics["DLQ_TOPIC"], timeout_s=60.0)
        run.check_s = time.monotonic() - read_started
    run.output_ids = [result_id(r) for r in out.records]
    run.dead_letters = len(dlq.records)
    run.exactly_once = str(report)
    run.exactly_once_ok = report.ok
    run.lost = sum(report.missing.values())
    run.duplicated = sum(report.duplicated.values())
    progress(
        f"exactly-once: {report}; dead letters {run.dead_letters} "
        f"(output read and checked in {run.check_s:.1f} s)"
    )
    return run


def _targets(cluster: Any, broker_metrics: str | None) -> list[Any]:
    """A scrape target per live process, labelled as a PodMonitor labels a pod; the
    broker's exporter in a namespace of its own, as a Kafka cluster beside the job runs."""
    from flinkai.local.prometheus import ScrapeTarget

    live = {"jobmanager"} | {tm.resource_id for tm in cluster.taskmanagers()}
    targets = [
        ScrapeTarget("flink", address, {"namespace": NAMESPACE, "pod": name})
        for name, address in cluster.metrics_addresses.items()
        if name in live
    ]
    if broker_metrics:
        targets.append(
            ScrapeTarget("kafka", broker_metrics, {"namespace": "kafka", "pod": "kafka-0"})
        )
    return targets


def source_lag_query(topic: str) -> str:
    """The source lag of ``topic`` now, in records: the chart rule's join, unaveraged.

    Flink's reporter writes the topic label with characters outside ``[a-zA-Z0-9:_]``
    as ``_``; the broker's series gets that same value to join on.
    """
    flink_topic = flink_label_value(topic)
    position = "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset"
    end = (
        f'label_replace(max by (partition) (kafka_log_log_logendoffset{{topic="{topic}"}}),'
        f' "topic", "{flink_topic}", "", "")'
    )
    return (
        f"sum({end} - 1 - on (topic, partition) group_right max by (topic, partition)"
        f' ({position}{{topic="{flink_topic}"}} >= 0))'
    )


def _source_lag(prom: Any, query: str) -> float | None:
    try:
        got = prom.query(query)
    except Exception:  # Prometheus briefly unreachable: not read this tick
        return None
    return got[0].value if got else None


def _wait_committed(
    probe: _Probe, run: ScalingRun, wait_s: float, progress: Callable[[str], None]
) -> None:
    """Wait, bounded, until every offered record is committed (no more are offered).

    The loop ends on that condition when the run went as planned; after a timeout the
    job may still hold a backlog, and an exact check now would count it as missing.
    """
    produced = len(run.expected_ids)
    deadline = time.monotonic() + wait_s
    committed = probe.committed()
    while committed != produced and time.monotonic() < deadline:
        time.sleep(1.0)
        committed = probe.committed()
    if committed != produced:
        left = "unknown" if committed is None else str(produced - committed)
        note = f"{left} of {produced} records not committed after a {wait_s:.0f} s wait"
        run.error = f"{run.error}; {note}" if run.error else note
        progress(note)


def _replace_exited(
    cluster: Any, replicas: int, run: ScalingRun, now: float, progress: Callable[[str], None]
) -> None:
    """Start a TaskManager for each one that exited on its own, as a Deployment's
    ReplicaSet replaces a pod that died; the exit is recorded (and the run fails its
    checks, which count TaskManagers and parallelism changes)."""
    for tm in cluster.exited_taskmanagers():
        if tm.resource_id in run.stopped_tms:
            continue
        code = tm.proc.poll()
        run.stopped_tms.append(tm.resource_id)
        if len(cluster.taskmanagers()) >= replicas:
            continue
        tail = " | ".join(line for line in _tail(tm.out_file, 5))
        cause = exit_cause(tm.out_file)
        run.replaced.append(f"{now:.1f}s {tm.resource_id} exited ({code}) [{cause}]: {tail}")
        progress(f"{now:6.1f}s TaskManager {tm.resource_id} exited ({code}); starting another")
        cluster.start_taskmanager(wait=False)


#: PyFlink's Beam runner, closing a Python operator whose task was cancelled mid-bundle
#: (every reactive rescale cancels the running tasks), can unreference the shared
#: Python environment twice. Flink treats an error while handling the cancellation as
#: fatal, and the TaskManager exits with 1; a Deployment restarts the pod.
BEAM_CANCEL_RACE = "beam-cancel-refcount"
_BEAM_CANCEL_RACE_LINE = "IllegalStateException: Reference count must not be negative"


def exit_cause(out_file: Path) -> str:
    """Why a TaskManager exited on its own, read from its output: a known cause or ``unknown``."""
    try:
        text = out_file.read_text(errors="replace")
    except OSError:
        return "unknown"
    fatal = "FATAL - exception in exception handler" in text
    return BEAM_CANCEL_RACE if fatal and _BEAM_CANCEL_RACE_LINE in text else "unknown"


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _loop(
    cluster: Any,
    probe: _Probe,
    prom: Any,
    readers: tuple[AdapterReader, AdapterReader],
    hpas: tuple[HorizontalPodAutoscaler, HorizontalPodAutoscaler],
    run: ScalingRun,
    options: ScalingOptions,
    send: Callable[[int], None],
    progress: Callable[[str], None],
) -> None:
    t0 = time.monotonic()
    replicas = 1
    follower = RateFollower(options.load)
    top_since: float | None = None
    produced = 0
    scraped: set[str] = set()
    hpa, shadow = hpas
    lag_query = source_lag_query(probe.topic)

    def stop_load(now: float, why: str) -> None:
        follower.stop()
        run.load_stopped_t = now
        progress(f"{now:6.1f}s load stopped ({why}) after {produced} records")

    while True:
        now = time.monotonic() - t0
        if now > options.timeout_s:
            # Keep the timeline and still run the exact check: both say what went wrong.
            run.error = f"scaling run did not finish within {options.timeout_s:.0f} s"
            progress(run.error)
            if not follower.stopped:
                stop_load(now, "timeout")
            return
        parallelism, running, vertices = probe.job()
        pending = probe.pending(vertices) if running else None
        committed = probe.committed()
        follower.observe(now, committed, running, parallelism)
        run.load_rates.append((now, follower.rate))
        _replace_exited(cluster, replicas, run, now, progress)
        targets = _targets(cluster, run.broker_metrics)
        if {t.address for t in targets} != scraped:
            prom.set_targets(targets)  # pods come and go; Prometheus follows, as with a PodMonitor
            scraped = {t.address for t in targets}
        registered = len(cluster.registered_taskmanagers() or [])
        # The HPA's reconcile: every metric through the adapter's query, the controller's
        # own arithmetic. No gate of the harness's own: what Kubernetes would set is set.
        pods = [tm.resource_id for tm in cluster.taskmanagers()]
        readings = readers[0].read(pods)
        decision = hpa.decide(replicas, readings, pods)
        run.decisions.append(decision)
        run.shadow_decisions.append(shadow.decide(replicas, readers[1].read(pods), pods))
        for name, r in readings.items():
            if r.total is not None or r.per_pod:
                run.metrics_seen.add(name)
        backlog = readings.get(BACKLOG_METRIC)
        signal = backlog.total if backlog is not None else None
        source_lag = _source_lag(prom, lag_query) if run.broker_metrics else None
        if decision.desired != replicas:
            run.events.append(ScaleEvent(now, replicas, decision.desired))
            progress(
                f"{now:6.1f}s decide {replicas} -> {decision.desired} TaskManagers "
                f"(proposals {dict(decision.proposals)})"
            )
            for _ in range(decision.desired - replicas):
                cluster.start_taskmanager(wait=False)
            for _ in range(replicas - decision.desired):
                run.stopped_tms.append(cluster.stop_taskmanager().resource_id)
            replicas = decision.desired
        run.samples.append(
            Sample(
                now,
                replicas,
                registered,
                parallelism,
                running,
                pending,
                signal,
                decision.metric_desired,
                committed,
                produced,
                source_lag,
            )
        )
        rate = "-" if follower.rate is None else f"{follower.rate:.0f}/s"
        lag = "-" if committed is None else str(produced - committed)
        progress(
            f"{now:6.1f}s tm={replicas}/{registered} p={parallelism} "
            f"{'RUNNING' if running else '-'} pending={pending} source-lag={source_lag} "
            f"group-lag={lag} "
            f"proposals={dict(decision.proposals)} {decision.reason} "
            f"committed={committed}/{produced} drain={rate}"
        )
        if not follower.stopped:
            offer = follower.offer(now, produced, committed, pending)
            if offer:
                send(offer)
                produced += offer
            at_top = replicas == options.partitions and running and parallelism == replicas
            top_since = (top_since or now) if at_top else None
            if top_since is not None and now - top_since >= options.hold_s:
                stop_load(now, f"top count ran {options.hold_s:g} s")
            elif now >= options.load_timeout_s:
                stop_load(now, f"not at the top count within {options.load_timeout_s:.0f} s")
            elif produced >= options.load.max_records:
                stop_load(now, f"record bound {options.load.max_records}")
        elif (
            any(e.after < e.before for e in run.events)
            and running
            and parallelism == replicas
            and committed == produced
            and (replicas == hpa.min_replicas or now - run.events[-1].t >= options.settle_s)
        ):
            # Scaled down to minReplicas, or held there for settle_s, with everything
            # offered committed. After a failover the surviving TaskManagers' reporters
            # may stop serving the source's metrics (seen here); the HPA then holds the
            # scale-down, as Kubernetes would, and the run must still end.
            return
        time.sleep(max(0.0, options.tick_s - (time.monotonic() - t0 - now)))
