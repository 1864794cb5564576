"""finetune_lora.sql on real parts: Kafka -> MiniCluster -> LoRA training operator -> Kafka.

Examples stream into a one-partition topic with poison records among them. The
job (bounded at the offsets seen at start) must publish one adapter version every
``PUBLISH_EVERY`` examples on the ``read_committed`` adapters topic, each keyed by the
adapter's name with headers action/version/sha256, byte for byte the version the same
trainer makes in this process over the same records; and each poison record must
reach the dead-letter topic once with its reason and source offset.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import produce, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.artifacts import load_llm_artifacts
from flinkai.llm.lora import Adapter
from flinkai.runtime.runner import RunOptions, run_script

from .finetune import (
    POISON,
    PUBLISH_EVERY,
    RANK,
    SCRIPT,
    check_version_record,
    create_job_topics,
    examples,
    reference,
    tiny_lora_dir,
    variables,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 32  # good examples: 4 versions


def test_versions_and_dead_letters(kafka_broker: LocalKafka) -> None:
    good = examples(N)
    records = list(good)
    for k, (payload, _) in enumerate(POISON):
        records.insert(3 + 6 * k, payload)  # spread among the good ones
    # A fresh one-partition topic: a record's index is its offset.
    poison_at = {i: reason for i, r in enumerate(records) for p, reason in POISON if r == p}
    run_id = uuid.uuid4().hex[:8]
    topics = (f"ex-{run_id}", f"adapters-{run_id}", f"ft-dlq-{run_id}")
    bootstrap = kafka_broker.bootstrap
    create_job_topics(bootstrap, topics)
    produce(bootstrap, topics[0], records)
    run_script(
        SCRIPT,
        load_config(env={}),
        RunOptions(
            variables={**variables(topics, bootstrap, f"ft-{run_id}"),
                       "SCAN_BOUNDED_MODE": "latest-offset"},
            timeout_s=300,
        ),
    )  # fmt: skip
    published = read_to_end_offsets(bootstrap, topics[1], timeout_s=30.0).records
    dead = [json.loads(r.value or b"null")
            for r in read_to_end_offsets(bootstrap, topics[2], timeout_s=30.0).records]  # fmt: skip

    assert {d["source_offset"]: d["reason"] for d in dead} == poison_at
    assert all(d["source_topic"] == topics[0] for d in dead)
    assert {base64.b64decode(d["payload_base64"]) for d in dead} == {p for p, _ in POISON}

    got = [check_version_record(r) for r in published]
    assert [(name, version) for name, version, _ in got] == [
        ("news", v) for v in range(1, N // PUBLISH_EVERY + 1)
    ]
    manifest = load_llm_artifacts(tiny_lora_dir(), verify_checksums=False).manifest
    assert manifest.lora is not None and manifest.lora.rank == RANK
    for name, version, data in got:
        adapter = Adapter.decode(data)
        assert (adapter.name, adapter.version) == (name, version)
        assert adapter.extra["examples"] == version * PUBLISH_EVERY
        adapter.check(manifest.lora, manifest.model_version)  # servable by that export

    want = reference(records)
    assert {i: bad.reason for i, bad in want.dead} == poison_at
    assert [v.data for v in want.versions] == [data for _, _, data in got], (
        "the job's adapters differ from the same trainer run in this process"
    )
