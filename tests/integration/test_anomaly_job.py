"""anomaly_monitor.sql on real parts: Kafka -> MiniCluster -> anomaly operator -> Kafka.

The job runs with its defaults (the z-score detector through Numenta's likelihood),
and with ``model = 'cad'``, with a value range and with a learnt one (the job's
placeholders and a Flink option);
``test_anomaly_restore`` runs the ONNX forecaster through the same job. Poison points
(not JSON, a missing field, NaN, an out-of-order timestamp) must reach the
dead-letter topic with their reason and source offset, and every valid point must
be scored exactly as the Flink-free detector scores it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import uuid
from pathlib import Path

import pytest

from flinkai.anomaly.cad_growing import GrowingRangeCad
from flinkai.anomaly.contextual import CadModel, CadSeriesDetector
from flinkai.anomaly.detector import DetectorConfig
from flinkai.anomaly.statistical import ZScoreModel, ZScoreSeriesDetector
from flinkai.config import Config, load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_MS = 1764576000000
STEP_MS = 300_000
N = 80
#: Numenta's learning and estimation periods, lowered (through the Flink options) so
#: short series get past them.
LEARNING, ESTIMATION = 20, 10


def _config() -> Config:
    base = load_config(env={})
    conf = {**base.runtime.flink_conf,
            "flinkai.anomaly.scorer.numenta_learning_period": str(LEARNING),
            "flinkai.anomaly.scorer.numenta_estimation_samples": str(ESTIMATION)}  # fmt: skip
    return base.with_overrides(runtime={"flink_conf": conf})


def _point(series: str, i: int, value: float) -> bytes:
    return json.dumps({"series": series, "ts": START_MS + i * STEP_MS, "value": value}).encode()


def test_poison_points_go_to_the_dlq_and_scores_match(kafka_broker: LocalKafka) -> None:
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

    # Every valid point scored once, in order, as the Flink-free detector with the
    # job's defaults scores it.
    model = ZScoreModel()
    default = DetectorConfig()
    scorer = dataclasses.replace(
        default.scorer, numenta_learning_period=LEARNING, numenta_estimation_samples=ESTIMATION
    )
    assert len(scored) == 2 * N
    for series, points in valid.items():
        got = [r for r in scored if r["series"] == series]
        assert [r["ts_ms"] for r in got] == [t for t, _ in points]
        det = ZScoreSeriesDetector(model, dataclasses.replace(default, scorer=scorer))
        want = [det.update(t, v) for t, v in points]
        # past the learning period the scores vary, so the comparison can fail
        assert len({w.score for w in want[LEARNING + ESTIMATION :]}) > 10
        assert [r["score"] for r in got] == pytest.approx([w.score for w in want], abs=1e-9)
        assert [r["is_anomaly"] for r in got] == [w.is_anomaly for w in want]
        assert {r["model_version"] for r in got} == {model.model_version}
    # s1's jump at point 60 is far outside its range so far: Numenta's range override
    jump = next(r for r in scored if r["series"] == "s1" and r["ts_ms"] == START_MS + 60 * STEP_MS)
    assert (jump["score"], jump["is_anomaly"]) == (1.0, True)


@pytest.mark.parametrize("known_range", [True, False], ids=["known-range", "learnt-range"])
def test_model_cad_scores_as_the_flink_free_detector(
    kafka_broker: LocalKafka, known_range: bool
) -> None:
    # The same script, switched to CAD OSE by its placeholders: with a known range (its
    # low end by a Flink option, the other way to set it) and no model, which makes
    # the operator choose cad, or with model cad and no range (learnt per key).
    base = load_config(env={})
    conf = dict(base.runtime.flink_conf)
    if known_range:
        conf["flinkai.anomaly.value_min"] = "0"
    config = base.with_overrides(runtime={"flink_conf": conf})
    points = [(START_MS + i * STEP_MS, 10 + 4 * math.sin(i / 3) + (12.0 if i == 70 else 0.0))
              for i in range(N)]  # fmt: skip
    records = [_point("s1", i, v) for i, (_, v) in enumerate(points)]
    records.append(b'{"series": "s1", "ts": %d, "value": NaN}' % (START_MS + N * STEP_MS))
    run_id = uuid.uuid4().hex[:8]
    source, out, dlq = f"cad-points-{run_id}", f"cad-anomalies-{run_id}", f"cad-dlq-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, out, dlq])
    produce(bootstrap, source, records)
    run_script(
        REPO / "jobs" / "anomaly_monitor.sql",
        config,
        RunOptions(
            variables={"KAFKA_BOOTSTRAP": bootstrap, "POINTS_TOPIC": source,
                       "ANOMALY_TOPIC": out, "DLQ_TOPIC": dlq,
                       "SCAN_BOUNDED_MODE": "latest-offset", "GROUP_ID": f"cad-{run_id}",
                       "ANOMALY_MODEL": "" if known_range else "cad",
                       "ANOMALY_VALUE_MAX": "20" if known_range else ""},
            timeout_s=240,
        ),
    )  # fmt: skip
    scored = [json.loads(r.value or b"null") for r in consume_all(bootstrap, out, timeout_s=30)]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, dlq, timeout_s=30)]
    assert [(d["source_offset"], d["reason"]) for d in dead] == [(N, "not_finite")]

    model = CadModel(0.0, 20.0) if known_range else CadModel()
    det = CadSeriesDetector(model, DetectorConfig(model="cad", threshold=model.threshold))
    want = [det.update(t, v) for t, v in points]
    if not known_range:
        # the jump at point 70 is far outside the range learnt so far: it grew
        assert isinstance(det.cad, GrowingRangeCad) and det.cad.regrowths >= 1
    # past the rest period the scores vary, so the comparison can fail
    assert len({w.score for w in want}) > 5
    assert [r["ts_ms"] for r in scored] == [t for t, _ in points]
    assert [r["score"] for r in scored] == pytest.approx([w.score for w in want], abs=1e-12)
    assert [r["is_anomaly"] for r in scored] == [w.is_anomaly for w in want]
    assert {r["model_version"] for r in scored} == {model.model_version}
