"""jobs/llm_complete.sql across a TaskManager SIGKILL mid-burst: every prompt completed once.

A standalone cluster (one JobManager, one TaskManager whose Python worker runs the
scheduler). The prompts arrive as one burst, far faster than the decoder completes
them, so most wait in keyed state; halfway between two checkpoints, after the whole
burst was produced, the TaskManager is killed and a fresh one started. No record
arrives after the restore, so only the restore ticks (``flinkai.operators.keyed``) can
wake the buckets: without them this test stalled with 844 of 1,000 prompts never
completed. The test first asserts the fault (processes gone, a restart, a
restore from a checkpoint taken before the kill, aborted records of the open
transaction, no input left), then the outcome: each prompt has exactly one completion on the
``read_committed`` topic, identical to single-sequence greedy (the prompts in state at
the kill were decoded again, from the start), and each bad record one dead letter.

Greedy decoding of the prompts one by one runs in a child process at the lowest
priority while the job runs (:mod:`.background`), so the burst cannot wait for it to
leave out the prompts whose greedy path passes a near-tie (batching may flip those, see
:func:`~.test_llm_burst.expected`): it holds all of them. Every prompt is checked for
exactly one completion, each one without a near-tie for equality with greedy.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import IsolationLevel, TopicSnapshot, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target
from flinkai.testing import check_exactly_once

from .background import beside
from .faults import kill_between_checkpoints
from .llm import tiny_decoder_dir
from .test_llm_burst import LlmJob, expected, llm_config, prompts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Prompts: enough that the job is still working through them at the kill (at 300 the
# tiny decoder had drained all but 20-50 before the kill window came, in 2 runs of 5;
# it commits about 150-275 before the kill).
N = 450
WARM = 8
RATE = 5000.0  # prompts per second: one burst, produced before the kill
POISON = [b"not json", b'{"id": "bad", "prompt": ""}']


class KilledLlmJob(LlmJob):
    def committed(self) -> tuple[int, int]:
        """Completions plus dead letters: the harness waits until every record has one."""
        out, dlq = super().committed()
        return out + dlq, dlq

    def read(self, isolation: IsolationLevel) -> TopicSnapshot:
        return read_to_end_offsets(self.bootstrap, self.topics[1], isolation, timeout_s=60.0)


def greedy_reference(tiny: Path, texts: dict[str, str]) -> dict[str, str]:
    """:func:`~.test_llm_burst.expected`'s completions (near-ties left out), for :func:`beside`."""
    want, _, _ = expected(llm_config(load_config(env={}), tiny), texts)
    return want


def test_every_prompt_completes_once_across_a_taskmanager_kill(
    kafka_broker: LocalKafka, flink_cluster: LocalFlinkCluster
) -> None:
    tiny = tiny_decoder_dir()
    config = llm_config(
        load_config(env={}),
        tiny,
        restart_attempts=12,
        restart_delay_ms=3000,
        checkpoint_interval_ms=2000,
    )
    texts = prompts(N, seed=1)
    records = [json.dumps({"id": k, "prompt": v}).encode() for k, v in texts.items()]
    records[WARM + 10 : WARM + 10] = POISON  # inside the burst
    job = KilledLlmJob(
        kafka_broker.bootstrap, config=config, target=Target(flink_cluster.jobmanager)
    )
    with beside(greedy_reference, tiny, texts) as reference:
        run = kill_between_checkpoints(flink_cluster, job, records, WARM, RATE)
        want = reference.get(timeout=600)

    # Evidence of the fault, then of the replay it caused.
    run.assert_fault()
    assert run.input_done_at_kill, "records were still being produced at the kill"
    assert run.committed_at_kill < len(records) - 20, run.committed_at_kill
    raw_ids = Counter(json.loads(r.value or b"null")["id"] for r in run.raw.records)
    assert any(n > 1 for n in raw_ids.values()), "read_uncommitted shows no replayed completion"

    # Outcome: one completion per prompt, identical to greedy; one dead letter per bad record.
    check_exactly_once(
        Counter(texts.keys()), run.committed.records, lambda r: json.loads(r.value or b"")["id"]
    ).assert_ok()
    got = {
        d["id"]: d["completion"]
        for d in (json.loads(r.value or b"") for r in run.committed.records)
    }
    assert len(want) >= 0.9 * N, f"{N - len(want)} near-tie prompts"
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, [(k, got[k], want[k]) for k in differ[:3]]
    reasons = Counter(json.loads(r.value or b"")["reason"] for r in run.dead.records)
    assert reasons == Counter({"not_json": 1, "empty_prompt": 1}), reasons
