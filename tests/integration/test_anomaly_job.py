"""anomaly_monitor.sql on real parts: Kafka -> MiniCluster -> ONNX forecaster operator -> Kafka.

Poison points (not JSON, a missing field, NaN, an out-of-order timestamp) must reach
the dead-letter topic with their reason and source offset, and every valid point
must be scored exactly as the Flink-free detector scores it.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from pathlib import Path

import pytest

from flinkai.anomaly.detector import DetectorConfig, SeriesDetector
from flinkai.anomaly.features import ScorerConfig
from flinkai.anomaly.step import StepModel
from flinkai.config import Config, load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_MS = 1764576000000
STEP_MS = 300_000
N = 80
#: The scorer's warm-up, lowered (through the Flink option) so short series get real scores.
WARMUP = 20


def _config() -> Config:
    base = load_config(env={})
    conf = {**base.runtime.flink_conf, "flinkai.anomaly.scorer.warmup": str(WARMUP)}
    return base.with_overrides(runtime={"flink_conf": conf})


def _point(series: str, i: int, value: float) -> bytes:
    return json.dumps({"series": series, "ts": START_MS + i * STEP_MS, "value": value}).encode()


def test_poison_points_go_to_the_dlq_and_scores_match(
    kafka_broker: LocalKafka, tiny_model: Path
) -> None:
    valid: dict[str, list[tuple[int, float]]] = {"s1": [], "s2": []}
    records: list[bytes] = []
    poison: dict[int, str] = {}  # offset -> expected reason
    for i in range(N):
        for series in ("s1", "s2"):
            value = 10 + math.sin(i / 4) + (6.0 if series == "s1" and i == 60 else 0.0)
            records.append(_point(series, i, value))
            valid[series].append((START_MS + i * STEP_MS, value))
        if i == 20:
            poison[len(records)] = "not_json"
            records.append(b"not json")
            poison[len(records)] = "missing_field"
            records.append(b'{"series": "s1", "ts": 1}')
            poison[len(records)] = "not_finite"
            records.append(b'{"series": "s1", "ts": %d, "value": NaN}' % (START_MS + 10**9))
            poison[len(records)] = "out_of_order"  # s1 already has point 20
            records.append(_point("s1", 3, 1.0))

    run_id = uuid.uuid4().hex[:8]
    source, out, dlq = f"points-{run_id}", f"anomalies-{run_id}", f"anomaly-dlq-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, out, dlq])
    produce(bootstrap, source, records)
    run_script(
        REPO / "jobs" / "anomaly_monitor.sql",
        _config(),
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "POINTS_TOPIC": source,
                "ANOMALY_TOPIC": out,
                "DLQ_TOPIC": dlq,
                "SCAN_BOUNDED_MODE": "latest-offset",
                "GROUP_ID": f"anomaly-{run_id}",
                "ANOMALY_MODEL": str(tiny_model),
            },
            timeout_s=240,
        ),
    )

    scored = [json.loads(r.value or b"null") for r in consume_all(bootstrap, out, timeout_s=30)]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, dlq, timeout_s=30)]
    assert {d["source_offset"]: d["reason"] for d in dead} == poison
    bad = next(d for d in dead if d["reason"] == "out_of_order")
    assert base64.b64decode(bad["payload_base64"]) == records[min(poison) + 3]
    assert all(d["source_topic"] == source for d in dead)

    # Every valid point scored once, in order, as the Flink-free detector scores it.
    model = StepModel(tiny_model)
    assert len(scored) == 2 * N
    for series, points in valid.items():
        got = [r for r in scored if r["series"] == series]
        assert [r["ts_ms"] for r in got] == [t for t, _ in points]
        config = DetectorConfig(model=str(tiny_model), scorer=ScorerConfig(warmup=WARMUP))
        det = SeriesDetector(model, config)
        want = [det.update(t, v).score for t, v in points]
        assert max(want) > 0, "no point scored above 0: the comparison would be vacuous"
        assert [r["score"] for r in got] == pytest.approx(want, abs=1e-9)
        assert {r["model_version"] for r in got} == {model.model_version}
