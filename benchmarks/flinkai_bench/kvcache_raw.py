"""The Kafka store's restore and put against raw librdkafka on the same bytes.

One 1,024-token prefix (30 layers x ``[2, 3, tokens, 64]`` fp32, 47 MB) is written
by ``put_many`` and read back cold by ``get_many`` in a new store; in the same run a
raw ``confluent-kafka`` producer writes the same chunks (same record sizes, same
``acks``/idempotence/transaction settings) and a raw consumer reads the store's
chunks back (no decode, no checksum: values into a list). The ratios say how much of
the machine's Kafka ceiling the store reaches; samples are interleaved.

Every MB/s counts the float32 tensors delivered (the decoder's bytes), so the
half-precision variant (``store_dtype: float16``: half the bytes on the wire, widened
on read) is compared on what a decoder receives; its wire bytes are reported beside it.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import asdict, replace
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from flinkai.kafka.admin import create_topics
from flinkai.state.base import SnapshotKey, prefix_hash
from flinkai.state.codec import CodecConfig, encode
from flinkai.state.kafka import (
    KafkaSnapshotStore,
    KafkaStoreConfig,
    fetcher_settings,
    record_key,
)
from flinkai_bench.research.state_workload import kv_like

__all__ = ["VARIANTS", "measure_raw_ceiling"]

_MB = 1e6
#: Store codecs timed in each run: ``codec: none`` with the default checksum, the
#: fastest exact configuration (``FAST_CODEC`` of the cold-worker bench), and the same
#: stored at half precision.
VARIANTS = {
    "none, sha256": CodecConfig(codec="none"),
    "none, xxh3_128": CodecConfig(codec="none", byte_shuffle=False, checksum="xxh3_128"),
    "none, xxh3_128, f16": CodecConfig(
        codec="none", byte_shuffle=False, checksum="xxh3_128", store_dtype="float16"
    ),
}


def _producer_config(c: KafkaStoreConfig) -> dict[str, Any]:
    """The store writer's producer settings (:meth:`KafkaSnapshotStore._writer`)."""
    return {
        "bootstrap.servers": c.bootstrap,
        "transactional.id": f"flinkai-raw-{uuid.uuid4().hex}",
        "enable.idempotence": True,
        "acks": "all",
        "message.max.bytes": max(c.max_record_bytes, 1_000_000),
        "batch.size": c.max_record_bytes,
        "linger.ms": 2,
        "compression.type": "none",
    }


def _raw_produce(c: KafkaStoreConfig, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    """Seconds to write ``records`` in one transaction (begin to commit)."""
    producer = Producer(_producer_config(c))
    producer.init_transactions(30)
    began = time.perf_counter()
    producer.begin_transaction()
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    producer.commit_transaction(30)
    return time.perf_counter() - began


def _raw_fetch(c: KafkaStoreConfig, count: int) -> tuple[float, int]:
    """Seconds to read the first ``count`` records of the store's data topic, and bytes."""
    consumer = Consumer(fetcher_settings(c))
    try:
        # Connected first (metadata), as the store's fetcher is before a restore.
        consumer.list_topics(c.topic, timeout=30)
        values: list[bytes] = []
        began = time.perf_counter()
        consumer.assign([TopicPartition(c.topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(values) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw fetch got {len(values)} of {count} records")
            for m in consumer.consume(4096, 0.05):
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    continue
                value = m.value()
                if value is not None:
                    values.append(value)
        seconds = time.perf_counter() - began
        return seconds, sum(len(v) for v in values[:count])
    finally:
        consumer.close()


def measure_raw_ceiling(
    bootstrap: str, *, tokens: int = 1024, layers: int = 30, runs: int = 3
) -> dict[str, Any]:
    """Store ``put_many``/cold ``get_many`` vs raw produce/fetch of the same chunks.

    Each run uses fresh topics. The store uses codec ``none`` (the fastest store
    path; its payload is the tensor bytes plus nothing), sha256 checksums as default.
    """
    shape = (2, 3, tokens, 64)
    records: list[tuple[bytes, bytes]] = []
    nbytes = 2 * 3 * tokens * 64 * 4
    tensors = [kv_like(nbytes, "float32", "smooth", seed=i).reshape(shape) for i in range(layers)]
    samples: list[dict[str, float]] = []
    for run in range(runs):
        variants = {name: _store_round(bootstrap, tensors, c, run) for name, c in VARIANTS.items()}
        # The raw clients on the same chunks as the default store wrote.
        _, _, config, records = variants["none, sha256"]
        raw_topic = f"bench-kv-rawp-{uuid.uuid4().hex[:8]}"
        create_topics(
            bootstrap,
            [raw_topic],
            configs={
                "cleanup.policy": "compact",
                "max.message.bytes": str(config.max_record_bytes),
            },
        )
        raw_put_s = _raw_produce(config, raw_topic, records)
        raw_get_s, raw_bytes = _raw_fetch(config, len(records))
        if raw_bytes < nbytes * layers:
            raise RuntimeError("raw fetch read fewer bytes than the store wrote")
        mb = nbytes * layers / _MB
        sample = {"raw_produce_mb_s": mb / raw_put_s, "raw_fetch_mb_s": mb / raw_get_s}
        for name, (p_s, g_s, _, chunks) in variants.items():
            sample[f"store_put_mb_s[{name}]"] = mb / p_s
            sample[f"store_restore_mb_s[{name}]"] = mb / g_s
            sample[f"wire_mb[{name}]"] = sum(len(v) for _, v in chunks) / _MB
        samples.append(sample)
    names = sorted(samples[0])
    return {
        "tokens": tokens,
        "layers": layers,
        "shape": list(shape),
        "bytes": nbytes * layers,
        "records": len(records),
        "variants": {name: asdict(c) for name, c in VARIANTS.items()},
        "runs": samples,
        "median": {n: statistics.median(s[n] for s in samples) for n in names},
        "put_ratio": {
            v: statistics.median(s[f"store_put_mb_s[{v}]"] / s["raw_produce_mb_s"] for s in samples)
            for v in VARIANTS
        },
        "restore_ratio": {
            v: statistics.median(
                s[f"store_restore_mb_s[{v}]"] / s["raw_fetch_mb_s"] for s in samples
            )
            for v in VARIANTS
        },
    }


def _store_round(
    bootstrap: str, tensors: list[np.ndarray], codec: CodecConfig, run: int
) -> tuple[float, float, KafkaStoreConfig, list[tuple[bytes, bytes]]]:
    """put_many seconds, a new store's cold get_many seconds, the config, the chunks."""
    config = KafkaStoreConfig(
        bootstrap=bootstrap, topic=f"bench-kv-raw-{uuid.uuid4().hex[:8]}", codec=codec
    )
    size = config.chunk_bytes
    block = prefix_hash([run, *uuid.uuid4().bytes])
    keys = [SnapshotKey("bench", layer, block) for layer in range(len(tensors))]
    with KafkaSnapshotStore(config) as writer:
        began = time.perf_counter()
        versions = writer.put_many(list(zip(keys, tensors, strict=True)), model_version="b")
        put_s = time.perf_counter() - began
    with KafkaSnapshotStore(replace(config, create_topic=False)) as reader:
        began = time.perf_counter()
        got = reader.get_many(keys)
        get_s = time.perf_counter() - began
    if any(g is None for g in got):
        raise RuntimeError("the store's cold get_many missed a snapshot")
    # The same chunk bytes and keys the store wrote.
    records: list[tuple[bytes, bytes]] = []
    for key, tensor, version in zip(keys, tensors, versions, strict=True):
        _, payload = encode(tensor, codec, version=version, model_version="b")
        chunks = [payload[i : i + size] for i in range(0, len(payload), size)]
        records += [(record_key(key, version, i), c) for i, c in enumerate(chunks)]
    return put_s, get_s, config, records
