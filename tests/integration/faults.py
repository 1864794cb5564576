"""A TaskManager SIGKILLed halfway between two checkpoints, and the evidence that it was.

The keyed-state fault tests (anomaly scores, risk decisions) share the whole sequence:
warm the job up, stream at a paced rate, wait for a checkpoint, kill the TaskManager
mid-interval while results flow into an open transaction, start a new one, let the job
restore and finish, then read both isolation levels and the dead-letter topic.
:meth:`KillRun.assert_fault` asserts the fault happened before a test checks outcomes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flinkai.kafka.admin import IsolationLevel, TopicSnapshot, end_offsets, read_to_end_offsets
from flinkai.runtime.cluster import FlinkRest, LocalFlinkCluster

from .streaming import completed_checkpoints, gone, wait_until


class PacedJob(Protocol):
    """What the sequence drives: a streaming job started on ``cluster``'s JobManager."""

    bootstrap: str
    config: Any
    topics: Sequence[str]
    job_id: str

    def start(self) -> None: ...
    def warm_up(self, records: list[bytes], n: int, timeout_s: float) -> None: ...
    def produce_paced(self, records: list[bytes], per_second: float) -> Any: ...
    def wait_for(self, predicate: Callable[[int], bool], timeout_s: float) -> int: ...
    def committed(self) -> tuple[int, ...]: ...
    def stop(self, api: FlinkRest) -> None: ...
    def read(self, isolation: IsolationLevel) -> TopicSnapshot: ...
    def cancel(self) -> None: ...


@dataclass
class KillRun:
    """What happened around the kill, and the job's outputs read after it stopped."""

    killed: Any
    killed_at_ms: float
    workers: dict[int, str]
    died: bool
    restarted: bool
    exceptions: list[Any]
    before: dict[str, Any]
    restored: dict[str, Any]
    committed_at_kill: int
    committed: TopicSnapshot
    raw: TopicSnapshot
    dead: TopicSnapshot
    #: Whether every record had been produced when the TaskManager was killed.
    input_done_at_kill: bool = False

    @property
    def aborted(self) -> int:
        """Records of the killed attempt's open transaction: written, never committed."""
        return len(self.raw.records) - len(self.committed.records)

    def summary(self) -> str:
        return (
            f"killed {self.killed.resource_id} after {self.committed_at_kill} committed; "
            f"checkpoint {self.before.get('id')} before, restored {self.restored.get('id')}; "
            f"{self.aborted} aborted record(s)"
        )

    def assert_fault(self) -> None:
        """The TaskManager and its Python workers died, the job restarted, recorded the
        failure and restored a checkpoint taken before the kill; a transaction was open."""
        restored, before = self.restored, self.before
        assert self.died, (
            f"TaskManager {self.killed.pid} or its workers {sorted(self.workers)} outlived SIGKILL"
        )
        assert self.restarted, f"job did not restart after TaskManager {self.killed.resource_id}"
        assert self.exceptions, "no failure recorded in the job's exception history"
        assert before.get("id") is not None, "no checkpoint completed before the kill"
        assert restored.get("id") is not None, "the job did not restore from a checkpoint"
        assert int(restored["id"]) >= int(before["id"]), (restored, before)
        assert not restored.get("is_savepoint"), restored
        assert int(restored["restore_timestamp"]) > self.killed_at_ms, (restored, self.killed_at_ms)
        assert self.aborted > 0, "no aborted records: nothing was in flight at the kill"


def _in_flight(job: PacedJob) -> bool:
    """Whether an output topic holds records of an open transaction (its high watermark
    is past its last stable offset)."""
    for topic in job.topics[1:]:
        stable = end_offsets(job.bootstrap, topic, "read_committed")
        high = end_offsets(job.bootstrap, topic, "read_uncommitted")
        if any(high[p] > stable.get(p, 0) for p in high):
            return True
    return False


def kill_between_checkpoints(
    cluster: LocalFlinkCluster,
    job: PacedJob,
    records: list[bytes],
    warm: int,
    per_second: float,
) -> KillRun:
    """Run ``job`` over ``records`` with a TaskManager SIGKILL mid-checkpoint-interval.

    The first ``warm`` records start the job; the rest are paced at ``per_second``.
    Returns once every record is committed, two more checkpoints completed (a late
    duplicate would be committed by then) and the job stopped.
    """
    interval_s = job.config.runtime.checkpoint_interval_ms / 1000
    api = cluster.api
    job.start()
    try:
        job.warm_up(records, warm, timeout_s=150)
        workers = cluster.taskmanager_children()
        assert any("beam_boot" in cmd for cmd in workers.values()), workers
        producer = job.produce_paced(records[warm:], per_second=per_second)
        assert job.wait_for(lambda n: n >= warm + 20, timeout_s=60) >= warm + 20
        # Kill halfway between two checkpoints, while results flow into an open transaction.
        first_ack = api.latest_checkpoint_ack_ms(job.job_id)
        assert wait_until(
            lambda: api.latest_checkpoint_ack_ms(job.job_id) > first_ack, timeout_s=3 * interval_s
        ), "no checkpoint completed while streaming"
        # Then kill at the first moment the open transaction holds records, a quarter to
        # three quarters of an interval after the last checkpoint. Sleeping half an
        # interval instead missed on a loaded machine: the backlog could drain first,
        # or a late checkpoint commit what the kill was meant to catch.
        deadline = time.monotonic() + 4 * interval_s + 30
        while time.monotonic() < deadline:
            age_s = time.time() - api.latest_checkpoint_ack_ms(job.job_id) / 1000
            if interval_s / 4 <= age_s <= 3 * interval_s / 4 and _in_flight(job):
                break
            time.sleep(0.05)
        # Kill at once: reading the output topic first gave a checkpoint time to commit the
        # open transaction in between (0 aborted records, one run in four). With the
        # TaskManager gone no checkpoint completes, so these reads still describe the kill.
        killed = cluster.kill_taskmanager()
        killed_at_ms = time.time() * 1000
        input_done_at_kill = not producer.is_alive()
        before = (api.checkpoints(job.job_id).get("latest") or {}).get("completed") or {}
        committed_at_kill = job.committed()[0]
        died = wait_until(lambda: all(gone(p) for p in [killed.pid, *workers]), 10)
        cluster.start_taskmanager()
        restarted = wait_until(lambda: cluster.restarts(job.job_id) >= 1, 120)
        exceptions = cluster.job_exceptions(job.job_id)
        producer.join(timeout=60)
        assert not producer.is_alive()
        wait_until(lambda: job.committed()[0] >= len(records), 120, interval_s=2.0)
        seen = completed_checkpoints(api, job.job_id)
        wait_until(lambda: completed_checkpoints(api, job.job_id) >= seen + 2, 6 * interval_s + 30)
        restored = (api.checkpoints(job.job_id).get("latest") or {}).get("restored") or {}
        job.stop(api)
        committed, raw = job.read("read_committed"), job.read("read_uncommitted")
        dead = read_to_end_offsets(job.bootstrap, job.topics[2], timeout_s=30.0)
    except BaseException:
        for e in cluster.job_exceptions(job.job_id)[:3]:
            print(e.get("exceptionName"), (e.get("stacktrace") or "")[:1500])
        print(cluster.log_tail())
        raise
    finally:
        job.cancel()
    run = KillRun(
        killed,
        killed_at_ms,
        workers,
        died,
        restarted,
        exceptions,
        before,
        restored,
        committed_at_kill,
        committed,
        raw,
        dead,
        input_done_at_kill,
    )
    print(run.summary())
    return run
