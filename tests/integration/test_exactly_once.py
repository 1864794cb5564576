"""Exactly-once under failures, on the real broker and the real Flink runtime.

Each test streams events with unique ids (and 1 % poison) through the unbounded
embed job on the MiniCluster, breaks something mid-stream, and first asserts that
the fault happened (evidence), then that the read_committed output, read to its end
offsets after the job stopped, is exactly the input: no loss, no duplicate, every
poison event dead-lettered once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import Record
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port

from .streaming import (
    StreamingJob,
    between_checkpoints,
    gone,
    kill_python_workers,
    loopback_workers_here,
    make_events,
    open_transaction_records,
    python_workers,
    wait_until,
    with_rest,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 300
WARM = 20
RATE = 15.0
#: The Python-worker kill's checkpoints: 3 s (the default is 5 s) still leaves 1.5 s of
#: records, about 20, in the open transaction at the kill, and shortens every wait for
#: a commit, the last two checkpoints included.
CHECKPOINTS = {"checkpoint_interval_ms": 3000}
#: PyFlink's own switch: "process" runs each Python UDF worker as a child process of
#: the MiniCluster JVM; the default ("loopback") runs it as a thread of this process.
WORKER_MODE = "_python_worker_execution_mode"


def test_sigkill_python_worker_mid_stream(
    kafka_broker: LocalKafka, model_artifacts: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_MODE, "process")
    events, ids, _ = make_events(N)
    config, api = with_rest(load_config(env={}).with_overrides(runtime=CHECKPOINTS))
    job = StreamingJob(kafka_broker.bootstrap, config=config)
    interval_s = config.runtime.checkpoint_interval_ms / 1000
    # Earlier loopback jobs in this session may hold harness threads; count new ones only.
    loopback_before = loopback_workers_here()
    job.start()
    try:
        job.warm_up(events, WARM)
        workers = python_workers()
        in_process = loopback_workers_here() - loopback_before
        restarts_before = api.restarts(job.job_id)
        # On the clock (19 s): the kill, a checkpoint and half an interval after WARM + 10
        # commits, still comes while the stream runs (about 8 s of it left in two runs
        # with 5 s checkpoints).
        producer = job.produce_paced(events[WARM:], per_second=RATE, on_clock=True)
        assert job.wait_for(lambda n: n >= WARM + 10, timeout_s=60) >= WARM + 10
        between_checkpoints(api, job.job_id, interval_s)
        killed_at_ms = time.time() * 1000
        killed = kill_python_workers()
        restarted = wait_until(lambda: api.restarts(job.job_id) > restarts_before, 90)
        exceptions = api.job_exceptions(job.job_id)
        killed_gone = all(gone(pid) for pid in killed)
        producer.join(timeout=60)
        assert not producer.is_alive()
        assert wait_until(lambda: api.tasks_running(job.job_id), 120), "job did not run again"
        workers_after = python_workers()
        outcome = job.finish(ids, api)
    finally:
        job.cancel()
    print(f"killed workers {killed}; new workers {sorted(workers_after)}; {outcome.summary()}")

    # Evidence: the UDFs ran in the workers that were killed, the kill failed the
    # task, Flink recorded it and restarted the job with new workers.
    assert workers, "no Python UDF worker process under the MiniCluster"
    assert in_process == 0, "UDFs ran as threads of the test process (loopback mode)"
    assert sorted(killed) == sorted(workers), (killed, workers)
    assert killed_gone, f"a killed worker is still alive: {killed}"
    assert restarted, f"numRestarts did not rise above {restarts_before} after the kill"
    assert any(int(e.get("timestamp", 0)) >= killed_at_ms - 1000 for e in exceptions), (
        f"no failure recorded after the kill: {exceptions[:2]}"
    )
    assert workers_after and not set(workers_after) & set(killed), (workers_after, killed)
    # The kill landed while a transaction held records; the restore aborted them.
    assert outcome.aborted > 0, "no aborted records: nothing was in flight at the kill"
    # Outcome: the committed output is exactly the input.
    outcome.assert_exactly_once()


def test_kafka_broker_sigkill_with_open_transaction(
    tmp_path: Path, model_artifacts: object
) -> None:
    events, ids, _ = make_events(N)
    config, api = with_rest()
    interval_s = config.runtime.checkpoint_interval_ms / 1000
    with LocalKafka(port=free_port(), data_dir=tmp_path / "kafka") as broker:
        job = StreamingJob(broker.bootstrap, config=config)
        job.start()
        try:
            job.warm_up(events, WARM)
            # Input pauses while the broker is down, so no event is lost or sent twice
            # by a producer that gives up or retries. On the clock (19 s plus the pause):
            # the kill comes one or two checkpoints after WARM + 10 commits.
            paused = threading.Lock()
            producer = job.produce_paced(events[WARM:], per_second=RATE, lock=paused, on_clock=True)
            assert job.wait_for(lambda n: n >= WARM + 10, timeout_s=60) >= WARM + 10
            # Kill only once the sink's open transaction holds records on the log;
            # halfway between checkpoints its commit is seconds away.
            in_flight: list[Record] = []
            for _ in range(5):
                between_checkpoints(api, job.job_id, interval_s)
                in_flight = open_transaction_records(broker.bootstrap, list(job.topics[1:]))
                if in_flight:
                    break
            with paused:
                old_pid = broker.kill() if in_flight else None
                exit_code = broker.wait() if in_flight else None
                clean_marker = (broker.log_dir / ".kafka_cleanshutdown").exists()
                recoveries_before = _unclean_recoveries(broker)
                broker.start()  # same port, same data dir
            status = broker.status()
            recovered = _unclean_recoveries(broker) > recoveries_before
            producer.join(timeout=180)
            assert not producer.is_alive()
            # Either recovery path is right (the sink resumes, or the task fails and
            # restores); the count only tells which one this run took.
            restarts = api.restarts(job.job_id)
            outcome = job.finish(ids, api)
        finally:
            job.cancel()
    print(
        f"{len(in_flight)} record(s) in an open transaction at the kill; broker pid "
        f"{old_pid} -> {status.pid}; {restarts} job restart(s); {outcome.summary()}"
    )

    # Evidence: records of an open transaction were on the log when the broker was
    # SIGKILLed (not stopped), and a new broker process recovered the same data dir
    # on the same port.
    assert in_flight, "no open transaction with records seen in 5 checkpoint intervals"
    assert exit_code == -9, f"broker exit code {exit_code}, not SIGKILL"
    assert old_pid is not None and gone(old_pid)
    assert not clean_marker, "the broker left a clean-shutdown marker: it was not killed"
    assert status.running and status.pid != old_pid
    assert status.port == broker.port and status.data_dir == broker.data_dir
    assert recovered, "the restarted broker did not recover its logs after an unclean stop"
    # Outcome: the committed output is exactly the input, and no transaction is left open.
    outcome.assert_exactly_once()


def _unclean_recoveries(broker: LocalKafka) -> int:
    """How often the broker's log says it recovered logs after an unclean shutdown."""
    text = broker.log_file.read_text(errors="replace") if broker.log_file.exists() else ""
    return text.count("since no clean shutdown file was found")
