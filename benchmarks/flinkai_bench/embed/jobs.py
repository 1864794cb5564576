"""The Flink side of ``flinkai bench embed``: bounded runs, paced latency runs, a Triton server.

Everything here runs inside one variant's child process (see
:func:`flinkai_bench.embed.run_variant`), so the Kafka broker, the Flink
MiniCluster, its Python workers and a Triton server all count towards that
variant's peak RSS, and all of them end with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.config import Config
from flinkai_bench.embed.stats import (
    event_latencies_ms,
    latency_windows,
    pacing_schedule,
    percentiles,
)

__all__ = [
    "BoundedRun",
    "LatencyRun",
    "bounded_job_run",
    "latency_job_run",
    "triton_server",
    "triton_unavailable_reason",
]

log = logging.getLogger(__name__)

_POLL_S = 0.05


def _topics(prefix: str) -> tuple[str, str, str]:
    run_id = uuid.uuid4().hex[:8]
    return (f"{prefix}in-{run_id}", f"{prefix}out-{run_id}", f"{prefix}dlq-{run_id}")


def _variables(
    bootstrap: str, topics: tuple[str, str, str], bounded: bool, extra: Mapping[str, str]
) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": bootstrap,
        "CLICKS_TOPIC": topics[0],
        "EMBEDDINGS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        "SCAN_BOUNDED_MODE": "latest-offset" if bounded else "unbounded",
        "GROUP_ID": f"bench-{topics[0]}",
        **extra,
    }


def _create_topics(bootstrap: str, topics: tuple[str, str, str], config: Config) -> None:
    from flinkai.kafka.admin import create_topics

    # One input partition per source subtask: a subtask without a partition idles.
    create_topics(bootstrap, [topics[0]], partitions=max(1, config.runtime.parallelism))
    create_topics(bootstrap, list(topics[1:]))


def _event(user_id: str, text: str, event_time: int) -> bytes:
    return json.dumps({"user_id": user_id, "click_text": text, "event_time": event_time}).encode()


# -- bounded throughput run ----------------------------------------------------------------


@dataclass
class BoundedRun:
    """One bounded run of the embed job over a list of texts.

    Attributes:
        texts: Events produced.
        embedded: Embeddings read back.
        dead_letters: Dead letters read back.
        job_seconds: ``run_script`` wall time: submission, start-up, work, finish.
        output_times_s: Kafka timestamp of each embedding record, in seconds.
        dead_letter_reasons: ``reason: detail`` of the first dead letters (at most 3).
        output_partitions: Input partition of each embedding record's event (same
            order as ``output_times_s``), so a parallel job's subtasks can be told apart.
        submitted_s: Wall-clock time (``time.time()``) the job was submitted, on the
            clock of ``output_times_s``: the start of time-to-all-results.
    """

    texts: int
    embedded: int
    dead_letters: int
    job_seconds: float
    output_times_s: list[float] = field(default_factory=list)
    dead_letter_reasons: list[str] = field(default_factory=list)
    output_partitions: list[int] = field(default_factory=list)
    submitted_s: float | None = None


def bounded_job_run(
    texts: Sequence[str],
    bootstrap: str,
    config: Config,
    script: Path,
    variables: Mapping[str, str],
    udf_dirs: tuple[Path, ...],
    on_submit: Callable[[str], None] | None = None,
) -> BoundedRun:
    """Produce ``texts`` as click events, run the job to the end, read both outputs back.

    ``on_submit`` is called with the result topic just before the job is submitted
    (a profiler waits for the first results there).
    """
    from flinkai.kafka.admin import consume_all, produce
    from flinkai.runtime.guarantees import for_bounded_scan
    from flinkai.runtime.runner import RunOptions, run_script

    topics = _topics("b")
    _create_topics(bootstrap, topics, config)
    produce(bootstrap, topics[0], [_event(f"b-{i}", t, i) for i, t in enumerate(texts)])
    if on_submit is not None:
        on_submit(topics[1])
    started = time.monotonic()
    submitted = time.time()
    run_script(
        script,
        for_bounded_scan(config),
        RunOptions(variables=_variables(bootstrap, topics, True, variables), udf_dirs=udf_dirs),
    )
    seconds = time.monotonic() - started
    # A bounded job that FINISHED has committed everything: short timeouts suffice.
    out = consume_all(bootstrap, topics[1], timeout_s=60, expect=len(texts))
    dead = consume_all(bootstrap, topics[2], timeout_s=10) if len(out) < len(texts) else []
    partition_of: dict[str, int] = {}
    if config.runtime.parallelism > 1:
        for record in consume_all(bootstrap, topics[0], timeout_s=30, expect=len(texts)):
            partition_of[_user_id(record.value)] = record.partition
    reasons = []
    for record in dead[:3]:
        with contextlib.suppress(ValueError, AttributeError):
            letter = json.loads(record.value or b"{}")
            reasons.append(f"{letter.get('reason')}: {str(letter.get('detail'))[:200]}")
    return BoundedRun(
        len(texts),
        len(out),
        len(dead),
        seconds,
        [r.timestamp_ms / 1000.0 for r in out],
        reasons,
        [partition_of.get(_user_id(r.value), 0) for r in out],
        submitted,
    )


# -- paced latency run ------------------------------------------------------------------


@dataclass
class LatencyRun:
    """Per-event latency of the running job under a steady input rate.

    Attributes:
        rate: Input events per second asked for.
        achieved_rate: Events per second actually sent (first to last send).
        sent: Paced events produced (warm-up events excluded).
        received: Of those, results seen by the consumer.
        p50_ms / p99_ms / max_ms: Latency from producing the input record to the
            consumer receiving its result.
        ts_p50_ms / ts_p99_ms: The same, measured to the result record's Kafka
            timestamp (when the sink wrote it), not to its arrival at the consumer.
        warmup_s: From submitting the job to the first warm-up result.
        isolation: The consumer's isolation level.
        windows: p50/p99/max per 5 s of send time (growth or periodic stalls).
        paced_from_s / paced_to_s: Wall-clock times of the first and last measured send.
        warmup_paced: Events of the paced warm-up (same rate, before the measured ones).
        warmup_p99_ms: Their p99 latency: what a freshly started job shows (JIT, caches).
        p95_ms: p95 of the same latencies as ``p50_ms``.
    """

    rate: float
    achieved_rate: float
    sent: int
    received: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    ts_p50_ms: float | None
    ts_p99_ms: float | None
    warmup_s: float
    isolation: str
    windows: list[dict[str, float]] = field(default_factory=list)
    paced_from_s: float = 0.0
    paced_to_s: float = 0.0
    warmup_paced: int = 0
    warmup_p99_ms: float | None = None
    p95_ms: float | None = None


class _ResultWatcher:
    """Consumes the result topic in a thread; notes when each event id first shows up."""

    def __init__(self, bootstrap: str, topic: str, isolation: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.isolation = isolation
        self.arrived_s: dict[str, float] = {}
        self.written_s: dict[str, float] = {}
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watcher", daemon=True)

    def __enter__(self) -> _ResultWatcher:
        self._thread.start()
        if not self._ready.wait(60) and self.error is None:
            raise TimeoutError(f"the result consumer for {self.topic} did not start in 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def count(self, prefix: str) -> int:
        if self.error is not None:
            raise RuntimeError(f"the result consumer failed: {self.error}") from self.error
        with self._lock:
            return sum(1 for k in self.arrived_s if k.startswith(prefix))

    def snapshot(self) -> tuple[dict[str, float], dict[str, float]]:
        with self._lock:
            return dict(self.arrived_s), dict(self.written_s)

    def _run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id="flinkai-bench-latency",
                group_id=None,
                enable_auto_commit=False,
                isolation_level=self.isolation,
                fetch_max_wait_ms=20,
            )
            parts = [
                TopicPartition(self.topic, p)
                for p in sorted(consumer.partitions_for_topic(self.topic) or {0})
            ]
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            self._ready.set()
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=int(_POLL_S * 1000))
                now = time.time()
                for records in batch.values():
                    for r in records:
                        key = _user_id(r.value)
                        with self._lock:
                            if key not in self.arrived_s:  # at-least-once may repeat
                                self.arrived_s[key] = now
                                self.written_s[key] = r.timestamp / 1000.0
            consumer.close()
        except Exception as e:  # kafka-python raises plain Exceptions too; count() re-raises
            self.error = e
            self._ready.set()


def _user_id(value: bytes | None) -> str:
    try:
        return str(json.loads(value or b"{}").get("user_id") or "")
    except ValueError:
        return ""


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} within {timeout_s:.0f} s")


def latency_job_run(
    texts: Sequence[str],
    bootstrap: str,
    config: Config,
    script: Path,
    variables: Mapping[str, str],
    udf_dirs: tuple[Path, ...],
    *,
    rate: float,
    duration_s: float,
    isolation: str,
    warmup_paced_s: float = 0.0,
    warmup_events: int = 16,
    warmup_timeout_s: float = 300.0,
) -> LatencyRun:
    """Run the job unbounded, feed it ``rate`` events/s for ``duration_s``, time each result.

    The job first gets ``warmup_events`` events and must answer them all (it is then
    started and its model loaded). Then the paced input starts: its first
    ``warmup_paced_s`` seconds are a warm-up at the same rate (the JVM compiles the
    hot path, queues settle; reported apart as ``warmup_p99_ms``), and only the
    ``duration_s`` seconds after it are measured.
    Each input record carries its send time as its Kafka timestamp; a result's
    latency is its arrival at a consumer (``isolation``) minus that time, both read
    from this process's clock. The job is cancelled at the end.
    """
    from kafka import KafkaProducer

    from flinkai.runtime.runner import RunOptions, run_script

    topics = _topics("l")
    _create_topics(bootstrap, topics, config)
    count = max(1, int(rate * duration_s))
    warm = max(0, int(rate * warmup_paced_s))
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    result = None
    try:
        with _ResultWatcher(bootstrap, topics[1], isolation) as watcher:
            submitted = time.monotonic()
            result = run_script(
                script,
                config,
                RunOptions(
                    variables=_variables(bootstrap, topics, False, variables),
                    udf_dirs=udf_dirs,
                    wait=False,
                ),
            )
            for i in range(warmup_events):
                producer.send(topics[0], _event(f"w-{i}", texts[i % len(texts)], i))
            producer.flush()
            _wait_for(
                lambda: watcher.count("w-") >= warmup_events,
                warmup_timeout_s,
                "the job did not answer its warm-up events",
            )
            warmup_s = time.monotonic() - submitted
            produced: dict[str, float] = {}
            produced_warm: dict[str, float] = {}
            t0 = time.time() + 0.2
            for i, at in enumerate(pacing_schedule(warm + count, rate, t0)):
                delay = at - time.time()
                if delay > 0:
                    time.sleep(delay)
                now = time.time()
                key = f"p-{i}" if i < warm else f"l-{i}"
                producer.send(
                    topics[0],
                    _event(key, texts[i % len(texts)], i),
                    timestamp_ms=int(now * 1000),
                )
                (produced_warm if i < warm else produced)[key] = now
            producer.flush()
            sends = list(produced.values())
            achieved = (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 else 0.0
            drain_s = 10.0 + 2 * config.runtime.checkpoint_interval_ms / 1000.0
            with contextlib.suppress(TimeoutError):
                _wait_for(lambda: watcher.count("l-") >= count, drain_s, "results missing")
            arrived, written = watcher.snapshot()
    finally:
        producer.close(timeout=5)
        client = result.job_client if result is not None else None
        if client is not None:
            try:
                client.cancel().result()
            except Exception as e:  # Py4J error: a job that already ended cannot be cancelled
                log.warning("cancelling the latency job: %s", type(e).__name__)
    latencies, _missing = event_latencies_ms(produced, arrived)
    warm_latencies, _ = event_latencies_ms(produced_warm, arrived)
    ts_latencies, _ = event_latencies_ms(produced, written)
    p50, p99 = percentiles(latencies)
    ts50, ts99 = percentiles(ts_latencies)
    return LatencyRun(
        rate=rate,
        achieved_rate=achieved,
        sent=len(produced),
        received=len(latencies),
        p50_ms=p50,
        p99_ms=p99,
        max_ms=max(latencies) if latencies else None,
        ts_p50_ms=ts50,
        ts_p99_ms=ts99,
        warmup_s=warmup_s,
        isolation=isolation,
        windows=latency_windows(produced, arrived),
        paced_from_s=min(produced.values(), default=0.0),
        paced_to_s=max(produced.values(), default=0.0),
        warmup_paced=len(produced_warm),
        warmup_p99_ms=percentiles(warm_latencies)[1],
        p95_ms=float(np.percentile(latencies, 95)) if latencies else None,
    )


# -- Triton server ----------------------------------------------------------------------


def triton_unavailable_reason() -> str | None:
    """Why a local Triton server cannot start here without building anything, or None."""
    try:
        import tritonclient.grpc.aio  # noqa: F401
    except ImportError:
        return "tritonclient is not installed (pip install 'flinkai[triton]')"
    from flinkai.serve.triton_server import SERVER_VENV_REQUIREMENTS, server_venv_dir

    venv = server_venv_dir()
    try:
        marker = json.loads((venv / "flinkai-venv.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"Triton server venv missing at {venv}; build it with `flinkai serve venv`"
    if marker.get("requirements") != list(SERVER_VENV_REQUIREMENTS):
        return f"Triton server venv at {venv} is outdated; rebuild it: `flinkai serve venv`"
    if not (venv / "bin" / "python").exists():
        return f"Triton server venv at {venv} has no interpreter; `flinkai serve venv --rebuild`"
    return None


@contextlib.contextmanager
def triton_server(
    config: Config, threads: int = 0, timeout_s: float = 60.0
) -> Iterator[tuple[Config, dict[str, Any]]]:
    """A Triton server on free loopback ports for the duration of the block.

    Yields ``config`` pointed at it (``embedding.backend=triton``, its URL and model
    name, and a per-request deadline of ``timeout_s``: the default 10 s is a
    production setting that a throughput run on a loaded 2-core machine can exceed
    while sub-batches queue in the server) and facts about the server (pid, URL,
    start-up seconds). The server is stopped by its own pid (process group) on
    exit, whatever happens.
    """
    from flinkai.local.process import free_port
    from flinkai.serve.triton_server import TritonServer, TritonServerOptions

    ports: list[int] = []
    while len(ports) < 3:
        port = free_port()
        if port not in ports:
            ports.append(port)
    with contextlib.ExitStack() as stack:
        run_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flinkai-bench-")))
        options = TritonServerOptions(
            model=config.model,
            grpc_port=ports[0],
            http_port=ports[1],
            metrics_port=ports[2],
            threads=threads,
            run_dir=run_dir,
        )
        server = TritonServer(options)
        server.start()
        stack.callback(server.stop)
        served = config.with_overrides(
            embedding={"backend": "triton"},
            triton={
                "url": server.grpc_url,
                "model_name": server.model_name,
                "timeout_s": timeout_s,
            },
        )
        info = {
            "pid": server.pid,
            "grpc_url": server.grpc_url,
            "start_s": server.start_times_s[-1] if server.start_times_s else None,
            "server_ort_threads": threads,
            "client_timeout_s": timeout_s,
        }
        yield served, info
