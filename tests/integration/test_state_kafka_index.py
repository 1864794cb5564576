"""The index topic's record formats on the real broker.

A put writes one index record per transaction; records of the older format (one per
snapshot version) are still read; a record that cannot be read is counted and its
snapshots are not served; a transaction's record is tombstoned once it names no live
version, so compaction can drop it.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition

from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import wait_until
from flinkai.state import CodecConfig, KafkaSnapshotStore, KafkaStoreConfig, SnapshotKey, Version
from flinkai.state.base import prefix_hash
from flinkai.state.codec import encode
from flinkai.state.kafka import (
    BATCH_KEY_PREFIX,
    _index_key,
    index_value,
    record_headers,
    record_key,
)
from flinkai.state.rdkafka import Record, Tail
from flinkai.testing import unique_topic

pytestmark = pytest.mark.integration


def _config(broker: LocalKafka, **kw: object) -> KafkaStoreConfig:
    return KafkaStoreConfig(
        bootstrap=broker.bootstrap,
        topic=unique_topic("kv-index"),
        codec=CodecConfig(codec="none"),
        **kw,  # type: ignore[arg-type]
    )


def _key(n: int) -> SnapshotKey:
    return SnapshotKey("m", 0, prefix_hash([n]))


def _write_raw(
    store: KafkaSnapshotStore, key: SnapshotKey, tensor: np.ndarray, index_value_of: object
) -> None:
    """One snapshot written as another writer would: data record plus a chosen index record."""
    version = Version(int(time.time() * 1000), 0)
    meta, payload = encode(tensor, store.config.codec, version=version, model_version="v")
    records = [(record_key(key, version, 0), payload, record_headers(meta, 0, 1), 0)]
    store._transaction(records, lambda offsets: [index_value_of(key, version, meta, offsets)])  # type: ignore[operator]


def _markers_written(config: KafkaStoreConfig) -> bool:
    """Whether the index partition's last stable offset has reached its end.

    A commit returns once the coordinator has logged it; the commit markers reach the
    partitions just after. Until then a ``read_committed`` reader stops before the
    transaction, so a read right after ``put`` can see nothing.
    """
    part = TopicPartition(config.index_topic_name, 0)
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {
                "bootstrap.servers": config.bootstrap,
                "group.id": f"markers-{isolation}",
                "isolation.level": isolation,
            }
        )
        try:
            ends.append(consumer.get_watermark_offsets(part, timeout=10, cached=False)[1])
        finally:
            consumer.close()
    return ends[0] == ends[1]


def _index_records(config: KafkaStoreConfig) -> list[Record]:
    assert wait_until(lambda: _markers_written(config), 10, poll_s=0.1)
    tail = Tail({"bootstrap.servers": config.bootstrap}, config.index_topic_name, 10)
    out: list[Record] = []
    try:
        tail.assign({0: None})
        tail.read_to_end(out.append, time.monotonic() + 10)
    finally:
        tail.close()
    return out


def test_a_put_writes_one_index_record_per_transaction_and_opens_from_it(
    kafka_broker: LocalKafka,
) -> None:
    config = _config(kafka_broker)
    tensors = [np.full((2, 8), float(i), np.float32) for i in range(5)]
    keys = [SnapshotKey("m", i, prefix_hash([1])) for i in range(5)]
    with KafkaSnapshotStore(config) as writer:
        writer.put_many(list(zip(keys, tensors, strict=True)), model_version="v")
    records = _index_records(config)
    assert [r.key[: len(BATCH_KEY_PREFIX)] for r in records if r.key] == [BATCH_KEY_PREFIX]
    with KafkaSnapshotStore(replace(config, create_topic=False)) as fresh:
        assert fresh.tail_records == 0  # opened from the index record, no value read
        got = fresh.get_many(keys)
        assert [g.tensor[0, 0] if g else None for g in got] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_single_version_index_records_of_older_writers_are_still_read(
    kafka_broker: LocalKafka,
) -> None:
    config = _config(kafka_broker)
    tensor = np.arange(16, dtype=np.float32).reshape(2, 8)
    with KafkaSnapshotStore(config) as writer:
        _write_raw(
            writer,
            _key(1),
            tensor,
            lambda k, v, meta, offs: (
                _index_key(k, v),
                index_value(meta, 0, offs, (offs[0], offs[-1])),
                0,
            ),
        )
        writer.put(_key(2), tensor + 1, model_version="v")  # new format after it
    with KafkaSnapshotStore(replace(config, create_topic=False)) as fresh:
        assert fresh.tail_records == 0
        old, new = fresh.get(_key(1)), fresh.get(_key(2))
        assert old is not None and new is not None
        np.testing.assert_array_equal(old.tensor, tensor)
        np.testing.assert_array_equal(new.tensor, tensor + 1)
        assert sum(fresh.stats.rejected.values()) == 0


def test_an_unreadable_transaction_record_is_counted_and_not_served(
    kafka_broker: LocalKafka,
) -> None:
    config = _config(kafka_broker)
    tensor = np.ones((2, 8), np.float32)
    with KafkaSnapshotStore(config) as writer:
        _write_raw(
            writer,
            _key(1),
            tensor,
            lambda k, v, meta, offs: (
                BATCH_KEY_PREFIX + b"bad",
                b'{"format":99,"spans":{}}\n' + _index_key(k, v) + b"\t{}",
                0,
            ),
        )
        _write_raw(
            writer,
            _key(3),
            tensor,
            lambda k, v, meta, offs: (
                BATCH_KEY_PREFIX + b"bad-line",
                b'{"format":2,"spans":{},"pruned":[]}\n' + str(k).encode() + b"\nnot-a-version\t{}",
                0,
            ),
        )
        writer.put(_key(2), tensor, model_version="v")
    with KafkaSnapshotStore(replace(config, create_topic=False)) as fresh:
        # The fault happened: the unknown format was seen and refused at open.
        assert fresh.stats.rejected["header"] == 1
        assert fresh.get(_key(1)) is None
        # A bad line is found when its key is asked for, and counted too.
        assert fresh.get(_key(3)) is None
        assert fresh.stats.rejected["header"] == 2
        assert fresh.get(_key(2)) is not None


def test_a_transaction_record_naming_no_live_version_is_tombstoned(
    kafka_broker: LocalKafka,
) -> None:
    config = _config(kafka_broker, max_versions_per_key=1)
    with KafkaSnapshotStore(config) as writer:
        writer.put(_key(1), np.zeros(4, np.float32), model_version="v")
        writer.put(_key(1), np.ones(4, np.float32), model_version="v")
        newest = writer.versions(_key(1))
    records = _index_records(config)
    batches = [r for r in records if r.key and r.key.startswith(BATCH_KEY_PREFIX)]
    written = [r.key for r in batches if r.value is not None]
    assert len(written) == 2
    assert [r.key for r in batches if r.value is None] == [written[0]]
    with KafkaSnapshotStore(replace(config, create_topic=False)) as fresh:
        assert fresh.versions(_key(1)) == newest
        got = fresh.get(_key(1))
        assert got is not None and got.tensor[0] == 1.0
