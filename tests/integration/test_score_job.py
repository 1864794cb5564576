"""score_events.sql on real parts: Kafka -> MiniCluster -> predict (ONNX) -> Kafka.

A logistic regression built in the test scores well-formed rows; malformed records
and rows the model cannot take reach the dead-letter topic with their reasons.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.runner import RunOptions, run_script
from tests.unit.test_predict import N_FEATURES, build_logistic_regression, reference

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GOOD = 60
BAD: dict[bytes, tuple[str, str]] = {
    b"not json": ("not_json", ""),
    b'{"id": "m1"}': ("missing_field", "features"),
    b'{"id": "m2", "features": [1, "x", 2, 3]}': ("invalid_field", "features[1]"),
    b'{"id": "w1", "features": [1.0, 2.0]}': ("invalid_field", "expected 4 features"),
    b'{"id": "n1", "features": [NaN, 1.0, 2.0, 3.0]}': ("invalid_field", "NaN at feature 0"),
}


def test_scores_and_dead_letters(kafka_broker: LocalKafka, tmp_path: Path) -> None:
    model = build_logistic_regression(tmp_path / "logreg.onnx")
    config = load_config(env={}).with_overrides(predict={"model_path": str(model)})
    rng = np.random.default_rng(3)
    features = rng.normal(0, 1, (GOOD, N_FEATURES)).astype(np.float32)
    good = [
        json.dumps({"id": f"r{i}", "features": [float(v) for v in row]}).encode()
        for i, row in enumerate(features)
    ]
    # Bad records interleaved with good ones.
    records = good[:20] + list(BAD)[:3] + good[20:40] + list(BAD)[3:] + good[40:]
    run_id = uuid.uuid4().hex[:8]
    source, scores, dlq = f"features-{run_id}", f"scores-{run_id}", f"scores-dlq-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, scores, dlq])
    produce(bootstrap, source, records)

    run_script(
        REPO / "jobs" / "score_events.sql",
        config,
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "FEATURES_TOPIC": source,
                "SCORES_TOPIC": scores,
                "DLQ_TOPIC": dlq,
                "SCAN_BOUNDED_MODE": "latest-offset",
                "GROUP_ID": f"score-{run_id}",
            },
            timeout_s=170,
        ),
    )

    out = [json.loads(r.value or b"null") for r in consume_all(bootstrap, scores, timeout_s=30)]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, dlq, timeout_s=30)]
    assert len(out) == GOOD, len(out)
    expected = reference(features)
    by_id = {r["id"]: r for r in out}
    for i in range(GOOD):
        row = by_id[f"r{i}"]
        assert row["score"] == pytest.approx([float(expected[i, 0])], abs=1e-5)
        assert row["model_version"].startswith("logreg@")
        assert set(row) == {"id", "score", "model_version"}
    assert len(dead) == len(BAD)
    for record in dead:
        payload = base64.b64decode(record["payload_base64"])
        reason, detail = BAD[payload]
        assert record["reason"] == reason, record
        assert detail in record["detail"], record
        assert record["source_topic"] == source and record["source_offset"] >= 0
