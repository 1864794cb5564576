"""jobs/llm_complete.sql with LoRA adapters: Kafka -> MiniCluster -> the tiny LoRA decoder.

Versions come from a real adapters topic (transactional publisher, the workers' feed
reads read_committed): version 1 of ``topics``, then a wrong-rank version 2 that
must be refused. Every prompt gives one completion or one dead letter: base prompts
and ``topics`` prompts in the same job, each equal to decoding it alone with the
adapter it names (version 1, recorded in the output), an unknown adapter and an
invalid name dead-lettered with their reasons.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import numpy as np
import pytest

from flinkai.config import load_config
from flinkai.kafka.adapter_feed import AdapterPublisher, adapter_topic_configs
from flinkai.kafka.admin import create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.generate import decode_greedy
from flinkai.llm.lora import Adapter, LoraSpec
from flinkai.testing import check_exactly_once, dead_letter_id

from .llm import run_bounded_llm_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RANK = 4
NEW_TOKENS = 6


def random_adapter(spec: LoraSpec, base: str, version: int, rank: int = RANK) -> Adapter:
    rng = np.random.default_rng(version)
    spec = LoraSpec(rank, spec.n_layers, spec.dims)
    params = {
        n: (0.3 * rng.standard_normal(spec.shape_of(n))).astype(np.float32) for n in spec.names()
    }
    return Adapter("topics", version, base, rank, params)


def test_prompts_decode_with_the_adapter_they_name(kafka_broker: LocalKafka) -> None:
    from flinkai.functions.llm import load_prompt_model
    from flinkai.models.llm_export import export_tiny_llm

    artifacts = export_tiny_llm(lora_rank=RANK)
    run_id = uuid.uuid4().hex[:8]
    source, out, dlq = f"prompts-{run_id}", f"completions-{run_id}", f"llm-dlq-{run_id}"
    adapters_topic = f"adapters-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, out, dlq])
    create_topics(bootstrap, [adapters_topic], configs=adapter_topic_configs())

    config = load_config(env={}).with_overrides(
        llm={
            "model": artifacts.root.name,
            "dir": str(artifacts.root),
            "store": "memory",
            "max_new_tokens": NEW_TOKENS,
            "adapters_topic": adapters_topic,
        },
        kafka={"bootstrap_servers": bootstrap},
    )
    model = load_prompt_model(config)
    decoder = model.decoder
    assert decoder.lora is not None
    v1 = random_adapter(decoder.lora, decoder.model_version, 1)
    publisher = AdapterPublisher(bootstrap, adapters_topic, transactional_id=f"pub-{run_id}")
    try:
        publisher.publish(v1)
        publisher.publish(random_adapter(decoder.lora, decoder.model_version, 2, rank=2))
    finally:
        publisher.close()

    prompts = {
        f"q{i}": f"Question {i}: what does a stream processor do with event {i}?" for i in range(8)
    }
    adapter_of = {k: ("topics" if i % 2 else None) for i, k in enumerate(prompts)}
    records = [
        json.dumps({"id": k, "prompt": p, **({"adapter": a} if a else {})}).encode()
        for k, p in prompts.items()
        for a in [adapter_of[k]]
    ]
    poison = {
        json.dumps({"id": "u1", "prompt": "hi", "adapter": "nope"}).encode(): "unknown_adapter",
        json.dumps({"id": "u2", "prompt": "hi", "adapter": "bad name!"}).encode(): "invalid_name",
    }
    expected_dlq = {}
    for payload, reason in poison.items():
        expected_dlq[f"{source}:0:{len(records)}"] = reason
        records.append(payload)
    produce(bootstrap, source, records)

    results, dead = run_bounded_llm_job(config, bootstrap, (source, out, dlq), run_id)
    check_exactly_once(
        Counter(prompts.keys()), results, lambda r: json.loads(r.value or b"")["id"]
    ).assert_ok()
    check_exactly_once(Counter(expected_dlq.keys()), dead, dead_letter_id).assert_ok()
    for r in dead:
        d = json.loads(r.value or b"")
        assert d["reason"] == expected_dlq[dead_letter_id(r)], d
    got = {d["id"]: d for d in (json.loads(r.value or b"") for r in results)}
    stops = frozenset(model.stop_ids)
    differ = 0
    for pid, prompt in prompts.items():
        name = adapter_of[pid]
        want = decode_greedy(
            decoder.with_adapter(v1 if name else None), model.prompt_ids(prompt), NEW_TOKENS, stops
        )
        assert got[pid]["completion"] == model.decode(want.token_ids), pid
        assert got[pid].get("adapter") == ("topics@1" if name else None), got[pid]
        if name:
            base = decode_greedy(decoder, model.prompt_ids(prompt), NEW_TOKENS, stops)
            differ += base.token_ids != want.token_ids
    assert differ >= 2  # the adapter changed what those prompts decode to
