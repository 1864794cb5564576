"""Exactly-once across a TaskManager SIGKILL, on a real standalone Flink cluster.

The job runs on a separate JobManager and TaskManager, with its Python UDF workers
as child processes of the TaskManager. Killing the TaskManager's process group (the
JVM and its workers) is what a crashed host does. The test first asserts the fault:
the processes died, the job restarted and recorded the failure, and the killed
attempt's open transaction left aborted records. Then the job must have failed over
to a freshly started TaskManager without losing or duplicating a single committed
record, checked exactly after the job stopped.
"""

from __future__ import annotations

import time

import pytest

from flinkai.config import load_config
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target

from .streaming import (
    StreamingJob,
    gone,
    loopback_workers_here,
    make_events,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 300
WARM = 20
RATE = 15.0
#: 3 s, not the default 5 s: half an interval still holds about 20 records in the open
#: transaction at the kill, and every wait for a commit is shorter.
CHECKPOINT_INTERVAL_S = 3.0


def test_sigkill_taskmanager_mid_stream(
    kafka_broker: LocalKafka, model_artifacts: object, flink_cluster: LocalFlinkCluster
) -> None:
    events, ids, _ = make_events(N)
    config = load_config(env={}).with_overrides(
        runtime={"checkpoint_interval_ms": int(CHECKPOINT_INTERVAL_S * 1000)}
    )
    job = StreamingJob(
        kafka_broker.bootstrap, config=config, target=Target(flink_cluster.jobmanager)
    )
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
        # On the clock (19 s): the kill below still comes while the stream runs (it did
        # in two runs, with about 40 records in the open transaction).
        producer = job.produce_paced(events[WARM:], per_second=RATE, on_clock=True)
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
        died = wait_until(lambda: all(gone(p) for p in [killed.pid, *workers]), 10)
        assert killed in flink_cluster.exited_taskmanagers()
        assert killed not in flink_cluster.taskmanagers()
        flink_cluster.start_taskmanager()
        restarted = wait_until(lambda: flink_cluster.restarts(job.job_id) >= 1, 120)
        restarts = flink_cluster.restarts(job.job_id)
        exceptions = flink_cluster.job_exceptions(job.job_id)
        producer.join(timeout=60)
        assert not producer.is_alive()
        outcome = job.finish(ids, api, timeout_s=150)
    except BaseException:
        # Shown by pytest on failure: why the job failed, from the cluster's side.
        for e in flink_cluster.job_exceptions(job.job_id)[:3]:
            print(e.get("exceptionName"), (e.get("stacktrace") or "")[:1500])
        print(flink_cluster.log_tail())
        raise
    finally:
        job.cancel()
    print(f"{restarts} restart(s); killed {killed.resource_id}; {outcome.summary()}")

    # Evidence: the TaskManager and its Python workers died, the job restarted and
    # recorded the failure.
    assert died, f"TaskManager {killed.pid} or its workers {sorted(workers)} outlived SIGKILL"
    assert restarted, f"job did not restart after TaskManager {killed.resource_id} died"
    assert exceptions, "no failure recorded in the job's exception history"
    # Negative control: the same topics read uncommitted show the aborted writes of
    # the killed attempt, so read_committed is what filters them out.
    assert outcome.aborted > 0, "no aborted transaction records: nothing was in flight at the kill"
    assert outcome.replayed_ids, "read_uncommitted shows no replayed records"
    # Outcome: the committed output is exactly the input.
    outcome.assert_exactly_once()
