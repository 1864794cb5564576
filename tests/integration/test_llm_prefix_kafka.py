"""Prefix reuse across worker processes through the Kafka snapshot store, real decoder.

Two worker processes share one topic: the second restores the prefix the first
computed and its greedy tokens equal a no-cache run. Then a flipped byte in the
newest snapshot of a block is refused (counted) by a third worker, which serves the
older version and still produces the no-cache tokens. Broker restarts mid-write,
compaction and LRU/TTL eviction of the store are covered by test_state_kafka.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka import KafkaProducer

from flinkai.kafka.broker import LocalKafka
from flinkai.state import CodecConfig, SnapshotKey, Version
from flinkai.state.codec import encode
from flinkai.state.kafka import KafkaStoreConfig, record_headers, record_key

from .llm import require_decoder

pytestmark = [pytest.mark.integration, pytest.mark.slow]


REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("llm_worker.py")
BLOCK = 64
NEW_TOKENS = 8
SHARED = (
    "You are a support assistant for a streaming data platform. Answer in one short "
    "sentence. The platform reads events from Kafka topics, runs Flink SQL jobs that "
    "call Python functions, and writes results back to Kafka. Records that cannot be "
    "processed go to a dead-letter topic with a reason code, and every job commits its "
    "output exactly once through Kafka transactions tied to Flink checkpoints. Workers "
    "share a cache of attention keys and values on a compacted topic, so a prompt that "
    "starts like an earlier one is only computed from the point where the two differ. "
)


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(WORKER), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shared_run(kafka_broker: LocalKafka) -> dict[str, Any]:
    require_decoder()
    topic = f"llm-prefix-{uuid.uuid4().hex[:8]}"
    base = {
        "bootstrap": kafka_broker.bootstrap,
        "topic": topic,
        "block_tokens": BLOCK,
        "max_new_tokens": NEW_TOKENS,
    }
    first = worker({**base, "prompts": [SHARED + "What happens to a record that is not JSON?"]})
    second = worker({**base, "prompts": [SHARED + "How are results committed?"], "no_cache": True})
    return {"base": base, "first": first, "second": second}


def test_a_second_worker_process_restores_the_prefix_the_first_computed(
    shared_run: dict[str, Any],
) -> None:
    first, second = shared_run["first"], shared_run["second"]
    assert first["pid"] != second["pid"]
    a, b = first["results"][0], second["results"][0]
    assert a["cached_tokens"] == 0 and first["stats"]["published_blocks"] == len(a["hashes"])
    common = next(
        (i for i, (x, y) in enumerate(zip(a["ids"], b["ids"], strict=False)) if x != y),
        min(len(a["ids"]), len(b["ids"])),
    )
    assert common >= 2 * BLOCK  # the prompts do share at least two blocks
    assert b["cached_tokens"] == (common // BLOCK) * BLOCK
    assert second["stats"]["fetched_bytes"] > 0  # restored from the topic, not computed
    assert b["tokens"] == b["no_cache_tokens"] and len(b["tokens"]) > 0
    assert second["stats"]["rejected"] == {}


def test_a_flipped_byte_in_the_newest_snapshot_is_refused_and_the_older_served(
    shared_run: dict[str, Any],
) -> None:
    base, second = shared_run["base"], shared_run["second"]
    b = second["results"][0]
    key = SnapshotKey(second["model_id"], 3, b["hashes"][0])
    config = KafkaStoreConfig(bootstrap=base["bootstrap"], topic=base["topic"])
    # A newer version of block 0, layer 3 whose payload has one flipped byte, written
    # behind the store's back as a faulty writer would.
    tensor = np.random.default_rng(0).standard_normal((2, 3, BLOCK, 64)).astype("float32")
    version = Version(2**41, 0)  # newer than any wall-clock version written so far
    meta, payload = encode(
        tensor, CodecConfig(), version=version, model_version=_model_version(base)
    )
    broken = bytearray(payload)
    broken[len(broken) // 2] ^= 0x10
    raw = KafkaProducer(bootstrap_servers=base["bootstrap"])
    raw.send(
        config.topic,
        key=record_key(key, version, 0),
        value=bytes(broken),
        headers=record_headers(meta, 0, 1),
        partition=0,
    )
    raw.flush(timeout=20)
    raw.close(timeout=5)

    third = worker({**base, "prompts": [SHARED + "How are results committed?"], "no_cache": False})
    c = third["results"][0]
    rejected = third["stats"]["rejected"]
    assert sum(rejected.values()) == 1 and set(rejected) <= {"checksum", "decode"}  # evidence
    assert c["cached_tokens"] == b["cached_tokens"]  # the older version was served
    assert c["tokens"] == b["no_cache_tokens"]


def test_a_cold_store_reads_many_chunked_snapshots_in_one_get_many(
    kafka_broker: LocalKafka,
) -> None:
    """The batched fetch behind a restore: chunks, gaps and a missing key, no decoder."""
    from flinkai.state import KafkaSnapshotStore, prefix_hash

    config = KafkaStoreConfig(
        bootstrap=kafka_broker.bootstrap,
        topic=f"llm-getmany-{uuid.uuid4().hex[:8]}",
        max_record_bytes=20_000,  # each 48 KiB snapshot is 3 records
        codec=CodecConfig(codec="none"),
    )
    rng = np.random.default_rng(3)
    keys = [SnapshotKey("m", layer, prefix_hash([b])) for b in range(4) for layer in range(3)]
    tensors = [rng.standard_normal((2, 3, 16, 64)).astype("float32") for _ in keys]
    with KafkaSnapshotStore(config) as writer:
        writer.put_many(list(zip(keys[:6], tensors[:6], strict=True)), model_version="r")
        # Another put in between, so the wanted records are not one run.
        writer.put(SnapshotKey("m", 9, prefix_hash([99])), tensors[0], model_version="r")
        writer.put_many(list(zip(keys[6:], tensors[6:], strict=True)), model_version="r")
    absent = SnapshotKey("m", 0, prefix_hash([1234]))
    with KafkaSnapshotStore(replace(config, create_topic=False)) as reader:
        got = reader.get_many([*keys, absent], model_version="r", dtype="float32")
        assert reader.stats.fetched_bytes >= sum(t.nbytes for t in tensors)  # from the topic
    assert got[-1] is None
    for snapshot, tensor in zip(got[:-1], tensors, strict=True):
        assert snapshot is not None
        np.testing.assert_array_equal(snapshot.tensor, tensor)


def _model_version(base: dict[str, Any]) -> str:
    """The decoder's model version, read from a snapshot the workers wrote."""
    from flinkai.state import KafkaSnapshotStore

    with KafkaSnapshotStore(
        KafkaStoreConfig(bootstrap=base["bootstrap"], topic=base["topic"], create_topic=False)
    ) as store:
        key = store.snapshot_keys()[0]
        version = store.versions(key)[-1]
        return store._meta(key, version).model_version
