"""Exactly-once across a TaskManager SIGKILL, on a real standalone Flink cluster.

On the embedded MiniCluster the Python UDF workers are threads of the test process
(PyFlink's "loopback" mode), so killing the visible ``beam_boot`` process does not
fail anything. Here the job runs on a separate JobManager and TaskManager; killing
the TaskManager JVM (and its Python workers with it) is what a crashed host does, and
the job must fail over to a freshly started TaskManager without losing or duplicating
a single committed record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target

from .streaming import (
    StreamingJob,
    check_exactly_once,
    loopback_workers_here,
    make_events,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 300
WARM = 20
RATE = 15.0
CHECKPOINT_INTERVAL_S = 5.0


@pytest.fixture
def flink_cluster(tmp_path: Path) -> Iterator[LocalFlinkCluster]:
    """A standalone cluster with one single-slot TaskManager; logs stay in tmp_path."""
    with LocalFlinkCluster(tmp_path / "flink", slots=1) as cluster:
        yield cluster


def test_sigkill_taskmanager_mid_stream(
    kafka_broker: LocalKafka, model_artifacts: object, flink_cluster: LocalFlinkCluster
) -> None:
    events, ids, poison = make_events(N)
    job = StreamingJob(kafka_broker.bootstrap, target=Target(flink_cluster.jobmanager))
    # Earlier MiniCluster jobs in this session may hold loopback workers; count new ones only.
    loopback_before = loopback_workers_here()
    job.start()
    try:
        job.warm_up(events, WARM, timeout_s=150)
        # The UDF workers are child processes of the TaskManager, not threads of this
        # process (PyFlink's loopback mode), so the kill below takes them down too.
        workers = flink_cluster.taskmanager_children()
        assert any("beam_boot" in cmd for cmd in workers.values()), workers
        assert loopback_workers_here() == loopback_before, (
            "UDFs run in the test process, not on the cluster"
        )
        producer = job.produce_paced(events[WARM:], per_second=RATE)
        # Kill while output flows and halfway between two checkpoints, so the sink
        # has records in an open transaction: those must be aborted, not committed.
        assert job.wait_for(lambda n: n >= WARM + 10, timeout_s=60) >= WARM + 10
        api = flink_cluster.api
        first_ack = api.latest_checkpoint_ack_ms(job.job_id)
        assert wait_until(
            lambda: api.latest_checkpoint_ack_ms(job.job_id) > first_ack,
            timeout_s=3 * CHECKPOINT_INTERVAL_S,
        ), "no checkpoint completed while streaming"
        time.sleep(CHECKPOINT_INTERVAL_S / 2)
        killed = flink_cluster.kill_taskmanager()
        flink_cluster.start_taskmanager()
        producer.join(timeout=60)
        assert not producer.is_alive()
        done = job.wait_for(lambda n: n >= N, timeout_s=150)
        out, dlq = job.outputs(expect=N, expect_dlq=poison)
        raw_out, raw_dlq = job.outputs(isolation="read_uncommitted")
        restarts = flink_cluster.restarts(job.job_id)
        exceptions = flink_cluster.job_exceptions(job.job_id)
    except BaseException:
        # Shown by pytest on failure: why the job failed, from the cluster's side.
        for e in flink_cluster.job_exceptions(job.job_id)[:3]:
            print(e.get("exceptionName"), (e.get("stacktrace") or "")[:1500])
        print(flink_cluster.log_tail())
        raise
    finally:
        job.cancel()
    aborted = len(raw_out) + len(raw_dlq) - len(out) - len(dlq)
    print(
        f"committed {len(out)} + {len(dlq)} dead letters; read_uncommitted saw {aborted} more; "
        f"{restarts} restart(s); killed {killed.resource_id}"
    )
    assert done >= N, f"only {done} of {N} results committed; logs:\n{flink_cluster.log_tail()}"
    check_exactly_once(out, dlq, ids, poison)
    # The fault really happened and was recovered from by a restart.
    assert restarts >= 1, f"job did not restart after TaskManager {killed.resource_id} died"
    assert exceptions, "no failure recorded in the job's exception history"
    # Negative control: the same topics read uncommitted show the aborted writes of
    # the killed attempt, so read_committed is what filters them out.
    assert aborted > 0, "no aborted transaction records: nothing was in flight at the kill"
    raw_ids = [json.loads(r.value)["user_id"] for r in raw_out if r.value]
    assert len(raw_ids) > len(set(raw_ids)), "read_uncommitted shows no replayed records"
