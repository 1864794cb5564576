"""anomaly_monitor.sql across a TaskManager SIGKILL: per-key state restored from a checkpoint.

The job runs on a standalone Flink cluster (one JobManager, one TaskManager whose
Python workers run the ONNX forecaster operator). Points of two series stream in
from the real broker; halfway between two checkpoints the TaskManager's process
group is killed and a fresh TaskManager is started. The test first asserts the
fault: the processes died, the job restarted and recorded the failure, a
checkpoint completed before the kill and the job restored from it afterwards, and
the killed attempt's open transaction left aborted records. Then the committed
output, read exactly to its end offsets after the job stopped, must hold each
``(series, ts)`` once, with the score an uninterrupted run gives: the Flink-free
detector fed the same points (``test_anomaly_job`` checks that the job scores as
it does). A negative control shows a run that lost the key state at the kill
would score differently, so the comparison can fail.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkai.anomaly.detector import DetectorConfig, SeriesDetector
from flinkai.anomaly.features import ScorerConfig
from flinkai.anomaly.step import StepModel
from flinkai.config import load_config
from flinkai.kafka.admin import IsolationLevel, TopicSnapshot, create_topics, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.environment import Target
from flinkai.runtime.runner import RunOptions, run_script

from .faults import kill_between_checkpoints
from .streaming import REPO, StreamingJob

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERIES = ("s1", "s2")
N = 120  # points per series
WARM = 10  # points per series committed before the paced part
RATE = 20.0  # points per second, both series together
START_MS = 1764576000000
STEP_MS = 300_000
TOLERANCE = 1e-6
#: The scorer's warm-up, lowered (through the Flink option) so short series get real scores.
WARMUP = 20

Key = tuple[str, int]


@dataclass
class AnomalyJob(StreamingJob):
    """``jobs/anomaly_monitor.sql``, unbounded, on fresh topics (points, anomalies, DLQ)."""

    script: Path = REPO / "jobs" / "anomaly_monitor.sql"
    model: Path = Path()

    def start(self) -> None:
        create_topics(self.bootstrap, list(self.topics))
        variables = {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "POINTS_TOPIC": self.topics[0],
            "ANOMALY_TOPIC": self.topics[1],
            "DLQ_TOPIC": self.topics[2],
            "GROUP_ID": f"g-{self.run_id}",
            "SCAN_BOUNDED_MODE": "unbounded",
            "ANOMALY_MODEL": str(self.model),
        }
        options = RunOptions(target=self.target, variables=variables, wait=False)
        self.result = run_script(self.script, self.config, options)

    def read(self, isolation: IsolationLevel) -> TopicSnapshot:
        return read_to_end_offsets(self.bootstrap, self.topics[1], isolation, timeout_s=60.0)


def _points() -> list[tuple[str, int, float]]:
    """Both series interleaved: a daily-ish wave with a level shift in s1 and a spike in s2."""
    out = []
    for i in range(N):
        for series in SERIES:
            value = 10 + 2 * math.sin(i / 6) + (0.1 * math.cos(i * 1.7))
            if series == "s1" and i >= 90:
                value += 5.0
            if series == "s2" and i == 75:
                value += 9.0
            out.append((series, START_MS + i * STEP_MS, value))
    return out


def _record(point: tuple[str, int, float]) -> bytes:
    series, ts, value = point
    return json.dumps({"series": series, "ts": ts, "value": value}).encode()


def _uninterrupted(model_dir: Path, points: list[tuple[str, int, float]], reset_after: int = -1
                   ) -> dict[Key, float]:  # fmt: skip
    """``(series, ts) -> score`` of one run over ``points``; key state dropped after index ``reset_after``."""
    model = StepModel(model_dir)
    config = DetectorConfig(model=str(model_dir), scorer=ScorerConfig(warmup=WARMUP))
    dets = {s: SeriesDetector(model, config) for s in SERIES}
    out: dict[Key, float] = {}
    for i, (series, ts, value) in enumerate(points):
        if i == reset_after + 1 and reset_after >= 0:
            # What a restart without restored state would do: fresh normaliser,
            # scorer and model state, and the last timestamp forgotten.
            dets = {s: SeriesDetector(model, config) for s in SERIES}
        out[(series, ts)] = dets[series].update(ts, value).score
    return out


def _scores(snapshot: TopicSnapshot) -> tuple[dict[Key, float], Counter[Key]]:
    rows = [json.loads(r.value or b"null") for r in snapshot.records]
    keys = Counter((r["series"], int(r["ts_ms"])) for r in rows)
    return {(r["series"], int(r["ts_ms"])): float(r["score"]) for r in rows}, keys


def test_anomaly_state_survives_taskmanager_kill(
    kafka_broker: LocalKafka, tiny_model: Path, flink_cluster: LocalFlinkCluster
) -> None:
    points = _points()
    records = [_record(p) for p in points]
    warm = WARM * len(SERIES)
    base = load_config(env={})
    # The forecaster with its Gaussian scorer and peak gate (the operator's default is
    # the z-score with Numenta's likelihood; this test keeps the ONNX path covered).
    conf = {**base.runtime.flink_conf, "flinkai.anomaly.scorer.warmup": str(WARMUP),
            "flinkai.anomaly.scorer.likelihood": "gaussian",
            "flinkai.anomaly.scorer.peak_window": str(ScorerConfig().peak_window)}  # fmt: skip
    # 12 restarts 3 s apart: time for the new TaskManager to register on a busy host,
    # still inside the runner's transaction-timeout check (900 s). Checkpoints 3 s apart
    # (the default is 5 s): the kill window, a quarter to three quarters of an interval
    # after one, still holds scores in the open transaction.
    runtime = {"flink_conf": conf, "restart_attempts": 12, "restart_delay_ms": 3000,
               "checkpoint_interval_ms": 3000}  # fmt: skip
    config = base.with_overrides(runtime=runtime)
    job = AnomalyJob(kafka_broker.bootstrap, config=config,
                     target=Target(flink_cluster.jobmanager), model=tiny_model)  # fmt: skip
    run = kill_between_checkpoints(flink_cluster, job, records, warm, RATE)
    got, counts = _scores(run.committed)
    _, raw_counts = _scores(run.raw)

    # Evidence of the fault: the TaskManager and its Python workers died, the job
    # restarted, recorded the failure and restored a checkpoint taken before the kill;
    # the killed attempt's open transaction was written, never committed, then replayed.
    run.assert_fault()
    assert any(n > 1 for n in raw_counts.values()), "read_uncommitted shows no replayed point"

    # Outcome: every point scored once, none dead-lettered, with the uninterrupted scores.
    assert not run.dead.records, [r.value for r in run.dead.records]
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    want = _uninterrupted(tiny_model, points)
    assert set(got) == set(want)
    worst = max(abs(got[k] - want[k]) for k in want)
    assert worst <= TOLERANCE, f"scores after recovery differ by up to {worst:.2e}"
    assert max(want.values()) > 0.05, "the input raised no anomaly score"

    # Negative control: had the key state been lost at the kill, scores would differ.
    lost = _uninterrupted(tiny_model, points, reset_after=run.committed_at_kill - 1)
    assert max(abs(lost[k] - want[k]) for k in want) > 100 * TOLERANCE
