"""No input stops a job: the fuzz corpus's worst cases through the real jobs.

Before the row guard and the parse fixes, one payload of 5,000 ``[`` made
``parse_click`` raise ``RecursionError``; the job restarted on the same record until
its restart budget was spent and committed nothing. Here every job must FINISH and
every input must come out exactly once: as a result, or as a dead letter whose
``source_offset`` is the input's own offset and whose payload is its exact bytes.
"""

from __future__ import annotations

import base64
import json
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from flinkai.config import Config, load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.models.artifacts import ModelArtifacts
from flinkai.paths import bundled_udf_dir
from flinkai.runtime.errors import JobFailedError
from flinkai.runtime.runner import RunOptions, run_script
from tests.unit.test_predict import N_FEATURES, build_logistic_regression

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

#: Inputs that made parse functions raise (or would make Arrow fail the task).
POISON: list[bytes] = [
    b"[" * 5000,
    b'{"a":' * 5000,
    b'{"user_id": "\\ud800", "click_text": "x", "event_time": 1, "id": "\\ud800",'
    b' "features": [1, 2, 3, 4], "stream_id": "\\ud800", "text": "x"}',
    b'{"user_id": "u", "click_text": "x", "event_time": "0001-01-01T00:00:00+01:00",'
    b' "stream_id": "s", "text": "x"}',
    b'{"id": "big", "features": [' + b"9" * 4000 + b", 1, 2, 3]}",
    b'{"user_id": 1, "click_text": "x", "event_time": ' + b"9" * 5000 + b"}",
    b"\xff\xfe\x00",
]


def _interleave(good: list[bytes], bad: list[bytes]) -> list[bytes]:
    out = list(good)
    for k, payload in enumerate(bad):
        out.insert(3 + k * 5, payload)
    return out


def _run(
    script: str,
    config: Config,
    bootstrap: str,
    topics: dict[str, str],
    udf_dirs: tuple[Path, ...] = (),
) -> None:
    run_id = uuid.uuid4().hex[:8]
    run_script(
        REPO / "jobs" / script,
        config,
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "SCAN_BOUNDED_MODE": "latest-offset",
                "GROUP_ID": f"poison-{run_id}",
                **topics,
            },
            udf_dirs=udf_dirs,
            timeout_s=240,
        ),
    )


def _read(bootstrap: str, topic: str) -> list[dict[str, object]]:
    return [json.loads(r.value or b"null") for r in consume_all(bootstrap, topic, timeout_s=30)]


def _topics(*names: str) -> dict[str, str]:
    run_id = uuid.uuid4().hex[:8]
    return {name: f"{name.lower()}-{run_id}" for name in names}


def _assert_dead_letters_exact(
    dead: list[dict[str, object]], events: list[bytes], expected_offsets: set[int]
) -> Counter[str]:
    """Each expected offset dead-lettered once, with its exact payload; reasons counted."""
    offsets = Counter(int(str(d["source_offset"])) for d in dead)
    assert all(n == 1 for n in offsets.values()), f"duplicate dead letters: {offsets}"
    assert set(offsets) == expected_offsets
    for d in dead:
        payload = base64.b64decode(str(d["payload_base64"]))
        assert payload == events[int(str(d["source_offset"]))]
        assert d["reason"] and d["detail"]
    return Counter(str(d["reason"]) for d in dead)


def _clicks(n: int) -> list[bytes]:
    return [
        json.dumps(
            {"user_id": f"u{i}", "click_text": f"poison test {i}", "event_time": 1764576000000 + i}
        ).encode()
        for i in range(n)
    ]


def test_embed_job_survives_every_poison(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts
) -> None:
    good = _clicks(20)
    events = _interleave(good, POISON)
    topics = _topics("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, list(topics.values()))
    produce(bootstrap, topics["CLICKS_TOPIC"], events)

    _run("embed_clicks.sql", load_config(env={}), bootstrap, topics)

    out = _read(bootstrap, topics["EMBEDDINGS_TOPIC"])
    dead = _read(bootstrap, topics["DLQ_TOPIC"])
    assert sorted(str(r["user_id"]) for r in out) == sorted(f"u{i}" for i in range(20))
    poison_offsets = {events.index(p) for p in POISON}
    reasons = _assert_dead_letters_exact(dead, events, poison_offsets)
    assert reasons["too_deeply_nested"] == 2, reasons
    assert "internal_error" not in reasons  # each poison has a reason of its own


def test_score_job_survives_every_poison(kafka_broker: LocalKafka, tmp_path: Path) -> None:
    model = build_logistic_regression(tmp_path / "logreg.onnx")
    config = load_config(env={}).with_overrides(predict={"model_path": str(model)})
    rng = np.random.default_rng(5)
    good = [
        json.dumps({"id": f"r{i}", "features": rng.normal(0, 1, N_FEATURES).tolist()}).encode()
        for i in range(20)
    ]
    events = _interleave(good, POISON)
    topics = _topics("FEATURES_TOPIC", "SCORES_TOPIC", "DLQ_TOPIC")
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, list(topics.values()))
    produce(bootstrap, topics["FEATURES_TOPIC"], events)

    _run("score_events.sql", config, bootstrap, topics)

    out = _read(bootstrap, topics["SCORES_TOPIC"])
    dead = _read(bootstrap, topics["DLQ_TOPIC"])
    assert sorted(str(r["id"]) for r in out) == sorted(f"r{i}" for i in range(20))
    reasons = _assert_dead_letters_exact(dead, events, {events.index(p) for p in POISON})
    assert reasons["too_deeply_nested"] == 2 and reasons["invalid_field"] >= 2, reasons


def test_drift_job_survives_every_poison(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts
) -> None:
    good = [
        json.dumps(
            {"stream_id": "s", "text": f"news item {i}", "event_time": 1764576000000 + i * 100}
        ).encode()
        for i in range(30)
    ]
    events = _interleave(good, POISON)
    topics = _topics("TEXT_TOPIC", "DRIFT_TOPIC", "DLQ_TOPIC", "WINDOW_TOPIC")
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, list(topics.values()))
    produce(bootstrap, topics["TEXT_TOPIC"], events)

    _run("drift_monitor.sql", load_config(env={}), bootstrap, topics)

    dead = _read(bootstrap, topics["DLQ_TOPIC"])
    windows = _read(bootstrap, topics["WINDOW_TOPIC"])
    _assert_dead_letters_exact(dead, events, {events.index(p) for p in POISON})
    # every good event reached the windows operator exactly once
    assert sum(int(str(w["n"])) for w in windows) == len(good), windows


_BOOM_UDF = '''
"""text_to_vector whose model raises on one text: a stand-in for a bug in a backend."""
from pyflink.table.udf import udf

from vectorizer import EMBEDDING_ROW, _TextToVector


class _Boom(_TextToVector):
    def _embed(self, texts):
        if any(isinstance(t, str) and "BOOM" in t for t in texts):
            raise ZeroDivisionError("a bug that only this text reaches")
        return super()._embed(texts)


text_to_vector = udf(_Boom(), result_type=EMBEDDING_ROW, func_type="pandas")
'''


def _boom_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "boom_udfs"
    folder.mkdir()
    (folder / "boom_vectorizer.py").write_text(textwrap.dedent(_BOOM_UDF))
    return folder


def _boom_events() -> list[bytes]:
    events = _clicks(12)
    events.insert(5, json.dumps({"user_id": "bad", "click_text": "BOOM", "event_time": 1}).encode())
    return events


def test_unexpected_exception_is_dead_lettered_as_internal_error(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts, tmp_path: Path
) -> None:
    events = _boom_events()
    topics = _topics("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")
    topics["EMBED_FUNCTION"] = "boom_vectorizer.text_to_vector"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [topics[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")])
    produce(bootstrap, topics["CLICKS_TOPIC"], events)

    _run(
        "embed_clicks.sql",
        load_config(env={}),
        bootstrap,
        topics,
        udf_dirs=(bundled_udf_dir(), _boom_dir(tmp_path)),
    )

    out = _read(bootstrap, topics["EMBEDDINGS_TOPIC"])
    dead = _read(bootstrap, topics["DLQ_TOPIC"])
    # the batch with the bad row was retried row by row: its neighbours were embedded
    assert sorted(str(r["user_id"]) for r in out) == sorted(f"u{i}" for i in range(12))
    assert len(dead) == 1
    assert dead[0]["reason"] == "internal_error"
    assert "ZeroDivisionError: a bug that only this text reaches" in str(dead[0]["detail"])
    assert base64.b64decode(str(dead[0]["payload_base64"])) == events[5]
    assert dead[0]["source_offset"] == 5


def test_fail_policy_fails_the_job_instead(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts, tmp_path: Path
) -> None:
    base = load_config(env={})
    config = base.with_overrides(runtime={"udf_errors": "fail", "restart_attempts": 0})
    topics = _topics("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")
    topics["EMBED_FUNCTION"] = "boom_vectorizer.text_to_vector"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [topics[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")])
    produce(bootstrap, topics["CLICKS_TOPIC"], _boom_events())

    with pytest.raises(JobFailedError, match="ZeroDivisionError"):
        _run(
            "embed_clicks.sql",
            config,
            bootstrap,
            topics,
            udf_dirs=(bundled_udf_dir(), _boom_dir(tmp_path)),
        )
    assert consume_all(bootstrap, topics["DLQ_TOPIC"], timeout_s=10) == []
