"""jobs/llm_complete.sql end to end: Kafka -> MiniCluster -> real ONNX decoder -> Kafka.

Good prompts share a long prefix and go through the Kafka snapshot store; poison
records (empty, not UTF-8, not JSON, a missing or empty prompt, too many bytes, too
many tokens) each reach the dead-letter topic once with their reason. Every good
prompt gives exactly one completion, equal to a no-cache completion computed here.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.testing import check_exactly_once, dead_letter_id

from .llm import require_decoder, run_bounded_llm_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]


NEW_TOKENS = 8
MAX_BYTES = 3000
MAX_TOKENS = 400
SHARED = (
    "You are a support assistant for a streaming data platform. Answer in one short "
    "sentence. The platform reads events from Kafka topics, runs Flink SQL jobs that "
    "call Python functions, and writes results back to Kafka. Bad records go to a "
    "dead-letter topic with a reason code. "
)
QUESTIONS = ["What is Kafka?", "What is a dead letter?", "What is Flink SQL?", "Who reads it?"]


def test_every_prompt_gives_one_completion_or_one_dead_letter(kafka_broker: LocalKafka) -> None:
    require_decoder()
    from flinkai.functions.llm import LlmCompleteFunction, load_prompt_model

    run_id = uuid.uuid4().hex[:8]
    source, out, dlq = f"prompts-{run_id}", f"completions-{run_id}", f"llm-dlq-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, out, dlq])
    good = {f"q{i}": SHARED + q for i, q in enumerate(QUESTIONS)}
    records = [json.dumps({"id": k, "prompt": v}).encode() for k, v in good.items()]
    poison = {
        b"": "empty_payload",
        b'\xff{"id": "x", "prompt": "hi"}': "invalid_utf8",
        b"{not json": "not_json",
        b'{"id": "p1"}': "missing_field",
        b'{"id": "p2", "prompt": "   "}': "empty_prompt",
        json.dumps({"id": "p3", "prompt": "x" * (MAX_BYTES + 1)}).encode(): "prompt_too_long",
        # Under the byte limit but over the token limit once tokenised.
        json.dumps({"id": "p4", "prompt": "7 1 " * 700}).encode(): "prompt_too_long",
    }
    expected_dlq: dict[str, str] = {}
    for payload, reason in poison.items():
        expected_dlq[f"{source}:0:{len(records)}"] = reason
        records.append(payload)
    produce(bootstrap, source, records)

    config = load_config(env={}).with_overrides(
        llm={
            "store": "kafka",
            "topic": f"llm-kv-{run_id}",
            "max_new_tokens": NEW_TOKENS,
            "max_prompt_bytes": MAX_BYTES,
            "max_prompt_tokens": MAX_TOKENS,
        },
        kafka={"bootstrap_servers": bootstrap},
    )
    results, dead = run_bounded_llm_job(config, bootstrap, (source, out, dlq), run_id)
    check_exactly_once(
        Counter(good.keys()), results, lambda r: json.loads(r.value or b"")["id"]
    ).assert_ok()
    check_exactly_once(Counter(expected_dlq.keys()), dead, dead_letter_id).assert_ok()
    for r in dead:
        d = json.loads(r.value or b"")
        assert d["reason"] == expected_dlq[dead_letter_id(r)], d
        assert d["detail"] and d["payload_base64"] is not None

    got = {d["id"]: d for d in (json.loads(r.value or b"") for r in results)}
    # The prompts share their first block(s): after the first, later ones reuse them.
    assert max(d["cached_tokens"] for d in got.values()) >= 64
    model = load_prompt_model(config)
    plain = LlmCompleteFunction(config.with_overrides(llm={"store": "none"}), model, None)
    for pid, prompt in good.items():
        want = plain(prompt)
        assert got[pid]["completion"] == want.completion, pid
        assert got[pid]["prompt_tokens"] == want.prompt_tokens
        assert got[pid]["model_version"] == model.decoder.model_version
        assert got[pid]["ttft_ms"] > 0
