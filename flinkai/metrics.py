"""Operator metrics: one catalogue of names, exported by Flink's Prometheus reporter.

flinkai functions and operators register their metrics on the Flink metric group
they are given (``FunctionContext.get_metric_group()`` /
``RuntimeContext.get_metrics_group()``), under the ``flinkai`` sub-group. Flink then
reports them with every other operator metric. With ``runtime.prometheus_port`` set,
the runner turns on Flink's own ``PrometheusReporter`` (it ships with PyFlink), so
one scrape of a TaskManager (or of the local MiniCluster) returns Flink's built-in
metrics (``pendingRecords``, ``busyTimeMsPerSecond``, checkpoints) and ours.

Why Flink's reporter and not a ``prometheus_client`` HTTP server in each Python
worker: workers come and go with restarts and share a TaskManager, so their own
ports would collide and vanish; Flink's reporter gives every metric the job, task,
operator and subtask labels an autoscaler needs. ``prometheus_client`` is used on
the reading side (:func:`scrape`).

An exported name is ``flink_taskmanager_job_task_operator_flinkai_<name>``
(:func:`prometheus_name`); the Helm chart's HPA rules use these names.

The two main autoscaling signals are not registered here. The backlog
(:data:`BACKLOG_DEPTH`) is Flink's own ``pendingRecords`` source metric, which the
chart's prometheus-adapter rule sums and divides by the embedding batch size: the
Python workers never see the Kafka source. GPU utilisation is a device property read
at scrape time by :mod:`flinkai.gpu_metrics`, so that it is absent without a GPU and
never stale on an idle TaskManager.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BACKLOG_DEPTH",
    "GROUP",
    "METRICS",
    "PROMETHEUS_PREFIX",
    "DriftKeyMetrics",
    "MetricSpec",
    "flinkai_group",
    "gauge",
    "labelled_counter",
    "prometheus_name",
    "reporter_jar",
    "reporter_settings",
    "scrape",
]

#: Sub-group every flinkai metric is registered under.
GROUP = "flinkai"
#: How Flink's Prometheus reporter prefixes an operator's user metrics.
PROMETHEUS_PREFIX = "flink_taskmanager_job_task_operator_"


@dataclass(frozen=True)
class MetricSpec:
    """One metric flinkai registers.

    Attributes:
        name: Name inside the ``flinkai`` group.
        kind: ``counter`` or ``gauge`` (Flink metric types).
        help: What it measures.
        scale: Gauges only: the exported integer is ``round(value * scale)``.
        label: For a metric counted per value of a label (:func:`labelled_counter`),
            that label's name. Flink's reporter puts the key of a key/value group into
            the exported name too (``..._flinkai_<label>_<name>{<label>="..."}``).
    """

    name: str
    kind: str
    help: str
    scale: float = 1.0
    label: str = ""


EMBEDDED_ROWS = MetricSpec("embedded_rows", "counter", "rows text_to_vector embedded")
EMBEDDING_FAILED_ROWS = MetricSpec(
    "embedding_failed_rows", "counter", "rows text_to_vector returned an error for (to the DLQ)"
)
EMBEDDING_BATCH_MS = MetricSpec(
    "embedding_batch_ms",
    "gauge",
    "wall time of the latest text_to_vector batch that ran the model, ms",
)
SCORED_ROWS = MetricSpec("scored_rows", "counter", "rows predict scored")
SCORING_FAILED_ROWS = MetricSpec("scoring_failed_rows", "counter", "rows predict rejected")
DRIFT_EVENTS = MetricSpec("drift_events", "counter", "drift events raised")
DRIFT_SKIPPED_ROWS = MetricSpec(
    "drift_skipped_rows", "counter", "rows without a usable embedding or time"
)
# PyFlink gauges carry integers, so fractional scores are exported scaled.
DRIFT_JSD = MetricSpec(
    "drift_jsd_micro",
    "gauge",
    "latest Jensen-Shannon divergence of a closed drift period, in 1e-6 nats",
    scale=1e6,
)
DRIFT_Z = MetricSpec(
    "drift_z_milli", "gauge", "z-score of that divergence against recent periods, x1000", scale=1e3
)
DRIFT_SCORE = MetricSpec(
    "drift_score_milli",
    "gauge",
    "drift score of the key (label key) after its latest event, x1000: jsd, the largest "
    "z-score of the last test; cusum, chart value over threshold (1000 = alarm)",
    scale=1e3,
    label="key",
)
DRIFT_DETECTED = MetricSpec(
    "drift_detected_total", "counter", "drift events raised for the key (label key)", label="key"
)
WINDOW_LENGTH_MS = MetricSpec(
    "window_length_ms", "gauge", "length chosen for the next adaptive window, ms"
)
INTERNAL_ERRORS = MetricSpec(
    "internal_errors",
    "counter",
    "rows a Python function raised on unexpectedly (dead-lettered as internal_error)",
)
LLM_PREFIX_MISSES = MetricSpec(
    "llm_prefix_misses",
    "counter",
    "prefix snapshots the store refused, and prefix store calls that failed, by label reason "
    "(checksum, model_version, store_unavailable, ...); each made the decoder recompute",
    label="reason",
)

LLM_RUNNING = MetricSpec("llm_running", "gauge", "sequences the LLM scheduler decodes or prefills")
LLM_WAITING = MetricSpec("llm_waiting", "gauge", "prompts waiting for admission to the scheduler")
LLM_HELD_PROMPTS = MetricSpec(
    "llm_held_prompts", "gauge", "prompts held in keyed state, waiting or running (llm.max_waiting)"
)
LLM_HELD_BYTES = MetricSpec(
    "llm_held_bytes", "gauge", "bytes of prompt text held in keyed state (llm.max_waiting_bytes)"
)
LLM_KV_BYTES = MetricSpec(
    "llm_kv_bytes", "gauge", "KV cache bytes the worker holds, padding included"
)
LLM_KV_BUDGET_BYTES = MetricSpec(
    "llm_kv_budget_bytes", "gauge", "the worker's KV budget (llm.kv_budget_bytes; 0: none)"
)
LLM_PREEMPTIONS = MetricSpec(
    "llm_preemptions", "counter", "running sequences preempted to the store under KV pressure"
)
LLM_GENERATED_TOKENS = MetricSpec("llm_generated_tokens", "counter", "tokens generated")
LLM_SESSION_OFFLOADS = MetricSpec(
    "llm_session_offloads", "counter", "resident session KV moved to the store under KV pressure"
)
LLM_STORE_WAIT_MS = MetricSpec(
    "llm_store_wait_ms",
    "counter",
    "ms the decode steps waited, at the KV budget, for store writes to free memory",
)
LLM_PREFILL_FIRST_STEPS = MetricSpec(
    "llm_prefill_first_steps",
    "counter",
    "decode steps that first waited for a prefill under a backlog (llm.prefill_first_at)",
)
LLM_QUEUE_FULL = MetricSpec(
    "llm_queue_full", "counter", "prompts dead-lettered as queue_full at the state limits"
)
#: Latency distributions as gauges of percentiles over the last 4,096 samples (PyFlink
#: metric groups have no histogram): TTFT, TPOT, ITL, end to end and queue wait.
LLM_LATENCIES = tuple(
    MetricSpec(f"llm_{what}_ms_p{q}", "gauge", f"{title}, p{q} of the last 4096, in ms")
    for what, title in (
        ("ttft", "time to first token"),
        ("tpot", "time per output token after the first"),
        ("itl", "inter-token latency"),
        ("e2e", "arrival to last token"),
        ("queue", "arrival to admission"),
    )
    for q in (50, 90, 99)
)

#: What the LLM operator exports, all as gauges (:func:`gauge`), in registration order;
#: :meth:`flinkai.functions.llm_service.CompletionService.gauges` gives their values.
LLM_GAUGES = (
    LLM_RUNNING,
    LLM_WAITING,
    LLM_HELD_PROMPTS,
    LLM_HELD_BYTES,
    LLM_KV_BYTES,
    LLM_KV_BUDGET_BYTES,
    LLM_PREEMPTIONS,
    LLM_GENERATED_TOKENS,
    LLM_QUEUE_FULL,
    LLM_SESSION_OFFLOADS,
    LLM_STORE_WAIT_MS,
    LLM_PREFILL_FIRST_STEPS,
    *LLM_LATENCIES,
)

#: The HPA's backlog metric: Kafka records the job's sources have not read yet, in
#: embedding batches (prometheus-adapter rule over Flink's pendingRecords).
BACKLOG_DEPTH = "ai_operator_backlog_depth"

#: Every metric flinkai registers, by name.
METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in (
        EMBEDDED_ROWS,
        EMBEDDING_FAILED_ROWS,
        EMBEDDING_BATCH_MS,
        SCORED_ROWS,
        SCORING_FAILED_ROWS,
        DRIFT_EVENTS,
        DRIFT_SKIPPED_ROWS,
        DRIFT_JSD,
        DRIFT_Z,
        DRIFT_SCORE,
        DRIFT_DETECTED,
        WINDOW_LENGTH_MS,
        INTERNAL_ERRORS,
        LLM_PREFIX_MISSES,
        *LLM_GAUGES,
    )
}


def prometheus_name(spec: MetricSpec | str) -> str:
    """The name Flink's Prometheus reporter exports a flinkai operator metric under.

    A labelled metric's name holds its label key as well: a scrape of a running job
    showed ``..._flinkai_reason_llm_prefix_misses{reason="store_unavailable"}``.
    """
    if isinstance(spec, str):
        spec = METRICS.get(spec) or MetricSpec(spec, "counter", "")
    key = f"{spec.label}_" if spec.label else ""
    return f"{PROMETHEUS_PREFIX}{GROUP}_{key}{spec.name}"


def flinkai_group(metric_group: Any) -> Any:
    """The ``flinkai`` sub-group of a Flink metric group."""
    return metric_group.add_group(GROUP)


def gauge(group: Any, spec: MetricSpec) -> Callable[[float], None]:
    """Register a gauge on ``group``; returns a setter for its value.

    Built on a counter moved by the difference to the last value, so it travels
    to the JVM exactly like the row counters (PyFlink's own ``group.gauge`` takes a
    callable that must return an int and is sampled only at bundle end). Flink's
    Prometheus reporter exports every counter as a Prometheus gauge, so the
    exported series reads the last value set.
    """
    counter = group.counter(spec.name)
    last: list[int | None] = [None]

    def set_value(value: float) -> None:
        scaled = round(float(value) * spec.scale)
        if scaled != last[0]:
            # The first call moves it even by 0: PyFlink creates the JVM-side metric on
            # its first update, so a gauge that stays 0 would never be exported at all.
            counter.inc(scaled - (last[0] or 0))
            last[0] = scaled

    return set_value


def labelled_counter(group: Any, spec: MetricSpec, label: str) -> Callable[[str, int], None]:
    """Register ``spec`` per value of ``label``; returns ``inc(value, n)``.

    Each value gets a Flink key/value sub-group, which the Prometheus reporter
    exports as the label ``label="value"`` on one series name (:func:`prometheus_name`).

    Raises:
        ValueError: ``spec`` is catalogued with another label.
    """
    if spec.label and label != spec.label:
        raise ValueError(f"{spec.name} is counted per {spec.label!r}, not {label!r}")
    counters: dict[str, Any] = {}

    def inc(value: str, n: int = 1) -> None:
        counter = counters.get(value)
        if counter is None:
            counter = counters[value] = group.add_group(label, value).counter(spec.name)
        counter.inc(n)

    return inc


class DriftKeyMetrics:
    """Per-key drift metrics on a passed-in metric group: score gauge and detection counter.

    Each key gets a Flink key/value sub-group ``key=<key>``, which the Prometheus
    reporter exports as the label ``key="<key>"``; the series of one key are
    registered on its first value.

    Args:
        group: The ``flinkai`` metric group (or any object with ``add_group`` and
            ``counter``, e.g. a test double).
    """

    def __init__(self, group: Any) -> None:
        self._group = group
        self._scores: dict[str, Callable[[float], None]] = {}
        self._detected: dict[str, Any] = {}

    def score(self, key: str, value: float) -> None:
        """Set the key's drift score."""
        setter = self._scores.get(key)
        if setter is None:
            setter = self._scores[key] = gauge(self._group.add_group("key", key), DRIFT_SCORE)
        setter(value)

    def detected(self, key: str) -> None:
        """Count one drift event of the key."""
        counter = self._detected.get(key)
        if counter is None:
            counter = self._detected[key] = self._group.add_group("key", key).counter(
                DRIFT_DETECTED.name
            )
        counter.inc()


def reporter_jar() -> Path | None:
    """Flink's Prometheus reporter jar as shipped in PyFlink's plugins folder, if present."""
    try:
        import pyflink
    except ImportError:
        return None
    folder = Path(pyflink.__file__).parent / "plugins" / "metrics-prometheus"
    jars = sorted(folder.glob("flink-metrics-prometheus-*.jar"))
    return jars[0] if jars else None


def reporter_settings(port: int | str) -> dict[str, str]:
    """Flink options that expose every metric on ``http://<host>:<port>/metrics``."""
    return {
        "metrics.reporter.prom.factory.class": (
            "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
        ),
        "metrics.reporter.prom.port": str(port),
        # Flink's default 10 s interval is for push reporters; the pull reporter
        # reads live values, this only bounds how often gauges are sampled.
        "metrics.reporter.prom.interval": "5 s",
    }


def scrape(url: str, timeout_s: float = 5.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Read a Prometheus endpoint: metric name -> [(labels, value)] of every sample.

    Raises:
        OSError: The endpoint cannot be reached.
    """
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out
