"""An adapter version hot-plugged into a running ``jobs/llm_complete.sql``, without a restart.

The job runs unbounded on the tiny LoRA export. Version 1 of ``topics`` is on the
adapters topic before it starts; prompts naming ``topics`` decode with it. Then
version 2 is published while the job runs: prompts sent one at a time until one
completes on ``topics@2`` (bounded) show when the workers had it; every prompt sent
after that decodes with version 2, since a feed never goes back. The job never
restarted, and each completion equals decoding its prompt alone with the version its
output names.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import numpy as np
import pytest

from flinkai.functions.llm import load_prompt_model
from flinkai.kafka.adapter_feed import AdapterPublisher, adapter_topic_configs
from flinkai.kafka.admin import create_topics, produce, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.generate import decode_greedy
from flinkai.llm.lora import Adapter
from flinkai.testing import check_exactly_once

from .streaming import with_rest
from .test_llm_burst import LlmJob

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RANK = 4
NEW_TOKENS = 6


def adapter(decoder: object, version: int) -> Adapter:
    spec = decoder.lora  # type: ignore[attr-defined]
    rng = np.random.default_rng(version)
    params = {
        n: (0.3 * rng.standard_normal(spec.shape_of(n))).astype(np.float32) for n in spec.names()
    }
    return Adapter("topics", version, decoder.model_version, RANK, params)  # type: ignore[attr-defined]


def record(pid: str, text: str) -> bytes:
    return json.dumps({"id": pid, "prompt": text, "adapter": "topics"}).encode()


def test_a_version_published_mid_stream_serves_later_prompts_without_a_restart(
    kafka_broker: LocalKafka,
) -> None:
    from flinkai.models.llm_export import export_tiny_llm

    export = export_tiny_llm(lora_rank=RANK)
    bootstrap = kafka_broker.bootstrap
    adapters_topic = f"adapters-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [adapters_topic], configs=adapter_topic_configs())
    base, api = with_rest()
    # Checkpoints every 2 s, not 5: each wave and each probe waits for its commit.
    config = base.with_overrides(
        llm={"model": export.root.name, "dir": str(export.root), "store": "memory",
             "max_new_tokens": NEW_TOKENS, "adapters_topic": adapters_topic},
        kafka={"bootstrap_servers": bootstrap},
        runtime={"checkpoint_interval_ms": 2000},
    )  # fmt: skip
    model = load_prompt_model(config)
    versions = {v: adapter(model.decoder, v) for v in (1, 2)}
    publisher = AdapterPublisher(bootstrap, adapters_topic, transactional_id=f"{adapters_topic}-p")
    publisher.publish(versions[1])

    job = LlmJob(bootstrap, config=config)
    job.start()
    texts: dict[str, str] = {}
    try:
        texts["warm"] = "warm up the worker"
        job.warm_up([record("warm", texts["warm"])], n=1, timeout_s=120)
        before = api.restarts(job.job_id)
        first = {f"a{i}": f"first wave prompt number {i} about streams" for i in range(4)}
        texts.update(first)
        produce(bootstrap, job.topics[0], [record(k, v) for k, v in first.items()])
        assert job.wait_for(lambda n: n >= 1 + len(first), timeout_s=120) >= 1 + len(first)

        publisher.publish(versions[2])
        seen_v2 = False
        deadline = time.monotonic() + 60
        i = 0
        while not seen_v2 and time.monotonic() < deadline:
            pid = f"probe{i}"
            texts[pid] = f"probe prompt {i} sent while version 2 rolls out"
            produce(bootstrap, job.topics[0], [record(pid, texts[pid])])
            assert job.wait_for(lambda n: n >= len(texts), timeout_s=60) >= len(texts)
            out = read_to_end_offsets(bootstrap, job.topics[1], timeout_s=30).records
            seen_v2 = any(json.loads(r.value or b"")["adapter"] == "topics@2" for r in out)
            i += 1
        assert seen_v2, "no completion on topics@2 within 60 s of its commit"
        last = {f"c{i}": f"last wave prompt number {i} about state" for i in range(4)}
        texts.update(last)
        produce(bootstrap, job.topics[0], [record(k, v) for k, v in last.items()])
        assert job.wait_for(lambda n: n >= len(texts), timeout_s=120) >= len(texts)
        restarts = api.restarts(job.job_id) - before
        job.stop(api)
    finally:
        job.cancel()
        publisher.close()

    assert restarts == 0
    results = read_to_end_offsets(bootstrap, job.topics[1], timeout_s=60).records
    check_exactly_once(
        Counter(texts.keys()), results, lambda r: json.loads(r.value or b"")["id"]
    ).assert_ok()
    got = {d["id"]: d for d in (json.loads(r.value or b"") for r in results)}
    assert {got[k]["adapter"] for k in first} == {"topics@1"}
    assert {got[k]["adapter"] for k in last} == {"topics@2"}
    stops = frozenset(model.stop_ids)
    for pid, text in texts.items():
        version = int(got[pid]["adapter"].split("@")[1])
        want = decode_greedy(
            model.decoder.with_adapter(versions[version]), model.prompt_ids(text), NEW_TOKENS, stops
        )
        assert got[pid]["completion"] == model.decode(want.token_ids), pid
