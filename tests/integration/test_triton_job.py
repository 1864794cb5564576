"""The embed job with ``embedding.backend=triton`` while its Triton server fails.

A real Triton server (PyTriton, own venv) on free loopback ports serves the model;
``jobs/embed_clicks.sql`` runs on the MiniCluster with an unbounded source on fresh
topics. Two faults:

* the server is SIGKILLed mid-stream, then restarted on the same port;
* the server is overloaded: a queue of one request and a short client deadline.

Either way the rows of failed batches must go to the dead-letter topic as
``inference_failed`` (the job never fails), embedding must resume once the server
can serve again, and every input id must appear exactly once across the result and
dead-letter topics, read with ``read_committed`` to their end offsets.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import Record, produce, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port
from flinkai.runtime.cluster import FlinkRest
from flinkai.serve.triton_server import (
    TritonServer,
    TritonServerOptions,
    ensure_server_venv,
)
from flinkai.testing import compare_ids, result_id

from .streaming import (
    StreamingJob,
    completed_checkpoints,
    event,
    open_transaction_records,
    wait_until,
    with_rest,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

WARM = 20
RATE = 8.0


@pytest.fixture(scope="module")
def server_venv() -> Path:
    failure = ""
    try:
        return ensure_server_venv(progress=print)
    except Exception as e:  # SetupError; any failure to build must fail, not skip
        failure = f"cannot build the Triton server venv: {e}"
    pytest.fail(failure, pytrace=False)
    raise AssertionError("unreachable")


@contextmanager
def _triton(run_dir: Path, venv: Path, *, max_queue_size: int = 0) -> Iterator[TritonServer]:
    options = TritonServerOptions(
        grpc_port=free_port(),
        http_port=free_port(),
        metrics_port=free_port(),
        threads=1,  # two cores are shared with Flink, Kafka and the UDF worker
        max_queue_size=max_queue_size,
        start_timeout_s=120.0,
        stop_timeout_s=15.0,
        run_dir=run_dir,
        venv=venv,
    )
    server = TritonServer(options, progress=print)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _job(
    bootstrap: str, server: TritonServer, prefix: str, *, timeout_s: float, batch_size: int
) -> tuple[StreamingJob, FlinkRest]:
    """The embed job on the Triton backend, with the MiniCluster's REST API on a free port.

    Checkpoints every 2 s, not 5: every wait for committed output (the warm-up, the
    outage's first dead letter, the final counts and two more checkpoints) is a wait
    for a checkpoint, and no fault here touches Flink.
    """
    config, api = with_rest(
        load_config(env={}).with_overrides(
            runtime={"checkpoint_interval_ms": 2000},
            embedding={"backend": "triton", "batch_size": batch_size},
            triton={
                "url": server.grpc_url,
                "model_name": server.model_name,
                "timeout_s": timeout_s,
                "max_retries": 1,
                "backoff_initial_s": 0.05,
                "backoff_max_s": 0.2,
                "circuit_failure_threshold": 3,
                "circuit_reset_s": 1.0,
            },
        )
    )
    return StreamingJob(bootstrap, config=config, prefix=prefix), api


def _port_refused(url: str) -> bool:
    host, _, port = url.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return False
    except ConnectionRefusedError:
        return True


def _wait_accounted(job: StreamingJob, n: int, timeout_s: float) -> tuple[int, int]:
    """Poll until ``n`` outputs (results + dead letters) are committed; the last counts."""
    counts = (0, 0)

    def done() -> bool:
        nonlocal counts
        counts = job.committed()
        return sum(counts) >= n

    wait_until(done, timeout_s, interval_s=2.0)
    return counts


def _finish(
    job: StreamingJob, api: FlinkRest, n: int, timeout_s: float
) -> tuple[list[Record], list[Record], int]:
    """Wait for ``n`` outputs and two more checkpoints, stop the job, read both topics exactly.

    Returns the results and dead letters (``read_committed``, each topic read to its
    end offsets after the job stopped) and the job's restart count.
    """
    _wait_accounted(job, n, timeout_s)
    seen = completed_checkpoints(api, job.job_id)
    interval_s = job.config.runtime.checkpoint_interval_ms / 1000
    # A late duplicate would be committed by then, so the read below would see it.
    wait_until(lambda: completed_checkpoints(api, job.job_id) >= seen + 2, 6 * interval_s + 30)
    restarts = api.restarts(job.job_id)
    job.stop(api)
    out, dlq = (read_to_end_offsets(job.bootstrap, t, timeout_s=60.0) for t in job.topics[1:])
    open_records = open_transaction_records(job.bootstrap, list(job.topics[1:]))
    assert not open_records, f"{len(open_records)} records still in open transactions"
    return out.records, dlq.records, restarts


def _value(record: Record) -> dict[str, object]:
    assert record.value is not None
    value: dict[str, object] = json.loads(record.value)
    return value


def _payload(dead: dict[str, object]) -> bytes:
    return base64.b64decode(str(dead["payload_base64"]))


def _inference_failures(dlq: list[Record], events: list[bytes]) -> list[dict[str, object]]:
    """The ``inference_failed`` dead letters, each checked to carry its valid input event."""
    failed = [d for d in map(_value, dlq) if d["reason"] == "inference_failed"]
    for dead in failed:
        payload = _payload(dead)
        assert events[int(str(dead["source_offset"]))] == payload, dead
        parsed = json.loads(payload)  # the event was valid; only the model call failed
        assert parsed["user_id"] == dead["user_id"] and parsed["click_text"], dead
        assert str(dead["detail"]).startswith("inference_failed: "), dead
    return failed


def _error_type(dead: dict[str, object]) -> str:
    """``BackendUnavailableError`` from ``inference_failed: BackendUnavailableError: ...``."""
    return str(dead["detail"]).split(":")[1].strip()


def _check_each_input_once(out: list[Record], dlq: list[Record], ids: set[str]) -> None:
    """Every input id exactly once across results and dead letters: none lost, none twice."""
    seen = [result_id(r) for r in out]
    seen += [str(json.loads(_payload(_value(r)))["user_id"]) for r in dlq]
    compare_ids(ids, seen).assert_ok()


def _dlq_summary(job: StreamingJob, n_out: int, n_dlq: int) -> str:
    """For a failure message: what the dead letters say."""
    dlq = read_to_end_offsets(job.bootstrap, job.topics[2], timeout_s=30.0).records
    details = Counter(str(_value(r).get("detail"))[:300] for r in dlq)
    return f"{n_out} embedded, {n_dlq} dead letters: {details.most_common(3)}"


def _ids(events: list[bytes]) -> set[str]:
    return {str(json.loads(e)["user_id"]) for e in events}


def test_triton_killed_mid_job_then_restarted(
    kafka_broker: LocalKafka, model_artifacts: object, server_venv: Path, tmp_path: Path
) -> None:
    n, n_before = 200, 140  # events[WARM:n_before] around the kill, events[n_before:] after restart
    events = [event(i) for i in range(n)]
    with _triton(tmp_path / "triton", server_venv) as server:
        job, api = _job(kafka_broker.bootstrap, server, "tkill-", timeout_s=2.0, batch_size=16)
        job.start()
        try:
            job.warm_up(events, WARM, timeout_s=180)
            # On the clock (15 s): the kill comes a few seconds in (after WARM + 10
            # commits), so the rest of the stream still meets the outage.
            producer = job.produce_paced(events[WARM:n_before], per_second=RATE, on_clock=True)
            assert job.wait_for(lambda c: c >= WARM + 10, timeout_s=60) >= WARM + 10
            pid, port = server.pid, server.options.grpc_port
            killed_at = time.time()
            server.kill()  # SIGKILL to the process group of the server this test started
            dead = pid is not None and not Path(f"/proc/{pid}").exists()
            refused = _port_refused(server.grpc_url)
            # Restart only once a dead letter of the outage is committed: the fault reached rows.
            saw_dlq = wait_until(lambda: job.committed()[1] > 0, timeout_s=60, interval_s=2.0)
            producer.join(timeout=60)
            server.start()
            ready_at = time.time()
            job.produce_paced(events[n_before:], per_second=RATE, on_clock=True).join(timeout=60)
            out, dlq, restarts = _finish(job, api, n, timeout_s=120)
        finally:
            job.cancel()
    # Evidence of the fault first.
    assert dead and refused, f"server pid {pid} alive={not dead}, port {port} refused={refused}"
    assert server.options.grpc_port == port
    assert saw_dlq, "no dead letter was committed while the server was down"
    failed = _inference_failures(dlq, events)
    assert failed and len(failed) == len(dlq), Counter(d["reason"] for d in map(_value, dlq))
    types = Counter(map(_error_type, failed))
    assert set(types) <= {"BackendUnavailableError", "CircuitOpenError", "BackendTimeoutError"}, (
        types
    )
    # Then the outcome: the task never failed, embedding resumed, each input exactly once.
    assert restarts == 0, f"the job restarted {restarts} time(s): a backend error escaped"
    resumed = sorted(r.timestamp_ms / 1000 for r in out if r.timestamp_ms / 1000 > ready_at)
    late_ids = _ids(events[n_before:])
    late_ok = [r for r in out if result_id(r) in late_ids]
    first_dead = min(r.timestamp_ms for r in dlq) / 1000 - killed_at
    print(
        f"kill: {len(out)} embedded, {len(failed)} dead letters {dict(types)}; first dead "
        f"letter {first_dead:.1f}s after the kill; server ready {ready_at - killed_at:.1f}s "
        f"after the kill; first embedding {(resumed or [float('nan')])[0] - ready_at:.1f}s "
        f"after ready; {len(late_ok)}/{len(late_ids)} post-restart events embedded"
    )
    assert resumed and late_ok, "no embedding arrived after the restart"
    _check_each_input_once(out, dlq, _ids(events))


def test_triton_overloaded_sheds_to_the_dlq(
    kafka_broker: LocalKafka, model_artifacts: object, server_venv: Path, tmp_path: Path
) -> None:
    n_burst, n_calm = 160, 20
    n = WARM + n_burst + n_calm
    events = [event(i) for i in range(n)]
    calm = events[WARM + n_burst :]
    with _triton(tmp_path / "triton", server_venv, max_queue_size=1) as server:
        # Sub-batches of 4 and 4 requests in flight per call: a bundle of more than a
        # few rows overfills a queue of one.
        job, api = _job(kafka_broker.bootstrap, server, "tload-", timeout_s=1.0, batch_size=4)
        job.start()
        try:
            # One event until the job runs, then paced ones: single-row bundles fit the
            # queue, so the job starts clean (20 events waiting at start would be one bundle).
            produce(job.bootstrap, job.topics[0], events[:1])
            assert sum(_wait_accounted(job, 1, timeout_s=180)) == 1, "the job never started"
            job.produce_paced(events[1:WARM], per_second=5.0).join(timeout=60)
            warm_out, warm_dlq = _wait_accounted(job, WARM, timeout_s=120)
            assert warm_out >= WARM // 2, _dlq_summary(job, warm_out, warm_dlq)
            produce(job.bootstrap, job.topics[0], events[WARM : WARM + n_burst])
            _wait_accounted(job, WARM + n_burst, timeout_s=90)
            # Load gone: the breaker must close again and single events embed.
            job.produce_paced(calm, per_second=2.0, on_clock=True).join(timeout=60)
            out, dlq, restarts = _finish(job, api, n, timeout_s=90)
        finally:
            job.cancel()
    # Evidence of the overload first: the server refused requests or they ran out of time.
    failed = _inference_failures(dlq, events)
    assert failed and len(failed) == len(dlq), Counter(d["reason"] for d in map(_value, dlq))
    named = {"Exceeds maximum queue size": "queue full", "DEADLINE_EXCEEDED": "deadline"}
    causes = Counter(
        (_error_type(d), next((v for k, v in named.items() if k in str(d["detail"])), "?"))
        for d in failed
    )
    # Each detail quotes the server's own refusal or the deadline; a CircuitOpenError one
    # quotes the failure that opened the breaker (often a sub-batch of the same call).
    assert all(cause != "?" for _, cause in causes), [d["detail"] for d in failed][:3]
    # Then the outcome: the task never failed, calm traffic embeds again, each input once.
    assert restarts == 0, f"the job restarted {restarts} time(s): a backend error escaped"
    calm_ok = [r for r in out if result_id(r) in _ids(calm)]
    print(
        f"overload: {len(out)} embedded, {len(failed)} dead letters "
        f"{ {f'{k} ({c})': v for (k, c), v in causes.items()} }; "
        f"{len(calm_ok)}/{len(calm)} calm events embedded"
    )
    assert len(calm_ok) >= len(calm) // 2, f"only {len(calm_ok)}/{len(calm)} embedded after load"
    _check_each_input_once(out, dlq, _ids(events))
