"""finetune_lora.sql across a TaskManager SIGKILL: the same adapter versions, byte for byte.

The job runs on a standalone Flink cluster (one JobManager, one single-slot
TaskManager whose Python worker trains the tiny model's adapter). Examples stream in
from the real broker; halfway between two checkpoints the TaskManager's process group
is killed and a fresh TaskManager started. The test first asserts the fault: the
processes died, the job restarted and recorded the failure, it restored a checkpoint
taken before the kill, and the killed attempt's open transaction left aborted
records. Then the outcome: the ``read_committed`` adapters topic holds each version
once, in order, and each is byte-identical to the version the same trainer makes in
a child process over the same records without any failure (:func:`~flinkai.finetune.replay.replay`,
run beside the job, :mod:`.background`).
The aborted copies (``read_uncommitted``) were computed before the kill from the
state the restore started from, so they are identical too.

A negative control shows the comparison can fail: restarting the trainer from its
initial state at the restored position (the state lost) gives other bytes.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from flinkai.config import load_config
from flinkai.finetune.base import load_base
from flinkai.finetune.replay import replay
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.lora import Adapter
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target

from .background import beside
from .faults import kill_between_checkpoints
from .finetune import (
    POISON,
    PUBLISH_EVERY,
    RANK,
    TRAINER,
    FinetuneJob,
    check_version_record,
    examples,
    reference,
    tiny_lora_dir,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 192  # good examples: 24 versions
WARM = 16  # two versions committed before the paced part
RATE = 16.0  # examples per second asked (the producer's round trips make it about 8)


def test_versions_are_byte_identical_across_a_taskmanager_kill(
    kafka_broker: LocalKafka, flink_cluster: LocalFlinkCluster
) -> None:
    tiny_lora_dir()  # exported before the clock starts
    records = examples(N, seed=3)
    bad = [p for p, _ in POISON[:2]]
    records[WARM + 40 : WARM + 40] = bad  # inside the paced part
    # 12 restarts 3 s apart: time for the new TaskManager to register on a busy host.
    # Checkpoints 4 s apart: the kill, 2 s after one, finds a version or two (they come
    # about once a second) in the open transaction.
    config = load_config(env={}).with_overrides(
        runtime={"restart_attempts": 12, "restart_delay_ms": 3000,
                 "checkpoint_interval_ms": 4000}
    )  # fmt: skip
    job = FinetuneJob(
        kafka_broker.bootstrap, config=config, target=Target(flink_cluster.jobmanager)
    )
    # The replay without a kill needs only the records: it trains beside the job.
    with beside(reference, records) as replayed:
        run = kill_between_checkpoints(flink_cluster, job, records, WARM, RATE)
        want = replayed.get(timeout=600)

    # Evidence of the fault, then of the replay it caused.
    run.assert_fault()
    raw = [check_version_record(r) for r in run.raw.records]
    raw_counts = Counter(version for _, version, _ in raw)
    assert any(n > 1 for n in raw_counts.values()), "read_uncommitted shows no replayed version"

    # Outcome: every version once, in order, identical to a run without the kill.
    got = [check_version_record(r) for r in run.committed.records]
    assert [v for _, v, _ in got] == list(range(1, N // PUBLISH_EVERY + 1))
    assert [v.data for v in want.versions] == [data for _, _, data in got], [
        v for (_, v, data), w in zip(got, want.versions, strict=True) if data != w.data
    ]
    # Each aborted copy too: the failed attempt computed the same bytes before the kill.
    by_version = {v.version: v.data for v in want.versions}
    assert all(data == by_version[v] for _, v, data in raw)
    dead = [json.loads(r.value or b"null") for r in run.dead.records]
    assert sorted(d["reason"] for d in dead) == sorted(r for _, r in POISON[:2])

    # Negative control: had the trainer state been lost at the restore, the versions after
    # it would differ.
    restored_at = max(1, run.committed_at_kill // PUBLISH_EVERY)
    good_after = [r for r in records if r not in bad][restored_at * PUBLISH_EVERY :]
    lost = replay(load_base(tiny_lora_dir(), RANK), good_after[:PUBLISH_EVERY], TRAINER,
                  PUBLISH_EVERY, "news")  # fmt: skip
    lost_params = Adapter.decode(lost.versions[0].data).params
    kept_params = Adapter.decode(by_version[restored_at + 1]).params
    assert any(not np.array_equal(lost_params[n], kept_params[n]) for n in kept_params)
