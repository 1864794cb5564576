"""The main path on real parts: Kafka broker -> Flink MiniCluster -> ONNX model -> Kafka."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from flinkai.config import load_config
from flinkai.datasets import DatasetNotFoundError, load_ag_news
from flinkai.demo import poison_events, run_demo, sample_events
from flinkai.kafka.broker import LocalKafka
from flinkai.models.artifacts import ModelArtifacts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
N_TEXTS = 96


def _texts() -> tuple[str, list[str]]:
    """AG News texts when the shared datasets exist, else the sample clicks shipped in the repo."""
    try:
        rows = load_ag_news()
    except DatasetNotFoundError:
        return "sample clicks", [json.loads(e)["click_text"] for e in sample_events()][:N_TEXTS]
    # every 40th row: a spread of classes and lengths, deterministic
    return "AG News", [text for _, text in rows[::40][:N_TEXTS]]


def _reference(texts: list[str]) -> np.ndarray:
    from flinkai.backends.sentence_transformers import SentenceTransformersBackend

    with SentenceTransformersBackend(load_config(env={})) as st:
        return st.infer_batch(texts).outputs


def _vector(row: dict[str, object], encoding: str) -> np.ndarray:
    if encoding == "f32":  # raw little-endian float32, base64 in the JSON sink
        return np.frombuffer(base64.b64decode(str(row["embedding_f32"])), dtype="<f4")
    return np.asarray(row["embedding_vec"], dtype=np.float32)


@pytest.mark.parametrize("encoding", ["array", "f32"])
def test_embed_job_end_to_end(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts, encoding: str
) -> None:
    config = load_config(env={}).with_overrides(embedding={"vector_encoding": encoding})
    field = "embedding_f32" if encoding == "f32" else "embedding_vec"
    source, texts = _texts()
    good = [
        json.dumps(
            {"user_id": f"user-{i}", "click_text": t, "event_time": 1764576000000 + i * 1000}
        ).encode()
        for i, t in enumerate(texts)
    ]
    poison = poison_events(config.embedding.max_text_bytes)
    # poison interleaved with good events: bad input must not disturb its neighbours
    events = list(good)
    for k, (_, payload) in enumerate(poison):
        events.insert(7 + k * 13, payload)

    report = run_demo(
        config, kafka_broker.bootstrap, REPO / "jobs" / "embed_clicks.sql", events=events
    )

    assert report.accounted, "every event must be either embedded or dead-lettered"
    assert len(report.embedded) == len(good), source
    by_user = {row["user_id"]: row for row in report.embedded}
    assert sorted(by_user) == sorted(f"user-{i}" for i in range(len(texts)))
    for row in report.embedded:
        assert set(row) == {"user_id", field, "event_time", "model_version"}
        assert row["model_version"] == model_artifacts.model_version
    vectors = np.array([_vector(by_user[f"user-{i}"], encoding) for i in range(len(texts))])
    assert vectors.shape == (len(texts), 384)
    assert by_user["user-1"]["event_time"] == "2025-12-01T08:00:01.000Z"

    reference = _reference(texts)
    cosine = np.sum(vectors * reference, axis=1) / (
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1)
    )
    assert cosine.min() >= 0.999, f"min cosine {cosine.min():.5f} on {source}"

    expected = {reason: payload for reason, payload in poison}
    assert sorted(d["reason"] for d in report.dead_letters) == sorted(expected)
    for dead in report.dead_letters:
        assert base64.b64decode(dead["payload_base64"]) == expected[dead["reason"]]
        assert dead["detail"]
        assert dead["source_topic"] == report.topics[0]
        assert events[dead["source_offset"]] == expected[dead["reason"]]
        assert "embedding_vec" not in dead
        assert "embedding_f32" not in dead
