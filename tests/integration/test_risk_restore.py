"""risk_decisions.sql across a TaskManager SIGKILL: every transaction decided once, as without it.

The job runs on a standalone Flink cluster (one JobManager, one TaskManager whose
Python workers run the LangGraph decision operator). Transactions stream in from the
real broker; halfway between two checkpoints the TaskManager's process group is
killed and a fresh TaskManager is started. The test first asserts the fault: the
processes died, the job restarted and recorded the failure, a checkpoint completed
before the kill and the job restored from it afterwards, and the killed attempt's
open transaction left aborted records. Then the committed decisions, read exactly to
their end offsets after the job stopped, must hold each transaction once, equal to
an uninterrupted run (the Flink-free operator function over the same events; the
job test checks the job decides as it does): approval, reasons, path, scores, spend.
A negative control shows that a run which lost the account state at the kill would
decide differently, so the comparison can fail.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import IsolationLevel, TopicSnapshot, create_topics, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target
from flinkai.runtime.runner import RunOptions, run_script

from .faults import kill_between_checkpoints
from .streaming import REPO, StreamingJob
from .test_risk_job import expected, stream, write_accounts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 240  # transactions
WARM = 20  # committed before the paced part
RATE = 20.0  # transactions per second


@dataclass
class RiskJob(StreamingJob):
    """``jobs/risk_decisions.sql``, unbounded, on fresh topics (transactions, decisions, DLQ)."""

    script: Path = REPO / "jobs" / "risk_decisions.sql"
    models: Path = Path()
    accounts: Path = Path()

    def start(self) -> None:
        create_topics(self.bootstrap, list(self.topics))
        variables = {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "TRANSACTIONS_TOPIC": self.topics[0],
            "DECISIONS_TOPIC": self.topics[1],
            "DLQ_TOPIC": self.topics[2],
            "GROUP_ID": f"g-{self.run_id}",
            "SCAN_BOUNDED_MODE": "unbounded",
            "RISK_MODELS": str(self.models),
            "RISK_ACCOUNTS": str(self.accounts),
        }
        options = RunOptions(target=self.target, variables=variables, wait=False)
        self.result = run_script(self.script, self.config, options)

    def read(self, isolation: IsolationLevel) -> TopicSnapshot:
        return read_to_end_offsets(self.bootstrap, self.topics[1], isolation, timeout_s=60.0)


def same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Field-for-field equal; doubles to 1e-12 relative (they travel as JSON text)."""
    if set(got) != set(want):
        return False
    for k, w in want.items():
        g = got[k]
        if isinstance(w, float) and not isinstance(g, bool) and isinstance(g, int | float):
            if not math.isclose(g, w, rel_tol=1e-12, abs_tol=1e-15):
                return False
        elif g != w:
            return False
    return True


def test_decisions_survive_taskmanager_kill(
    kafka_broker: LocalKafka,
    risk_models: Path,
    flink_cluster: LocalFlinkCluster,
    tmp_path: Path,
) -> None:
    events = stream(N)
    records = [json.dumps(e).encode() for e in events]
    accounts = write_accounts(tmp_path / "accounts.csv")
    base = load_config(env={})
    # 12 restarts 3 s apart: time for the new TaskManager to register on a busy host.
    # Checkpoints 3 s apart (the default is 5 s): the kill window, a quarter to three
    # quarters of an interval after one, still holds decisions in the open transaction.
    config = base.with_overrides(
        runtime={"restart_attempts": 12, "restart_delay_ms": 3000, "checkpoint_interval_ms": 3000}
    )
    job = RiskJob(kafka_broker.bootstrap, config=config, target=Target(flink_cluster.jobmanager),
                  models=risk_models, accounts=accounts)  # fmt: skip
    run = kill_between_checkpoints(flink_cluster, job, records, WARM, RATE)
    got_rows = [json.loads(r.value or b"null") for r in run.committed.records]
    counts = Counter(r["tx_id"] for r in got_rows)
    raw_counts = Counter(json.loads(r.value or b"null")["tx_id"] for r in run.raw.records)

    # Evidence of the fault, then of the replay it caused.
    run.assert_fault()
    assert any(n > 1 for n in raw_counts.values()), "read_uncommitted shows no replayed decision"

    # Outcome: one decision per transaction, none dead-lettered, identical to no kill.
    assert not run.dead.records, [r.value for r in run.dead.records]
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    want = expected(events, risk_models, accounts)
    got = {r["tx_id"]: r for r in got_rows}
    assert set(got) == set(want)
    differ = [k for k in want if not same(got[k], want[k])]
    assert not differ, [(got[k], want[k]) for k in differ[:3]]

    # Negative control: had the account state been lost at the kill, decisions would differ.
    lost = expected(events, risk_models, accounts, reset_after=run.committed_at_kill - 1)
    assert any(lost[k] != want[k] for k in want), "losing the state changes nothing here"
