"""``flinkai bench kvcache``'s Kafka parts on the real broker, small and fast.

The figures need the real decoder; these tests check the mechanics with the fake one:
the Kafka modes restore the shared prefix, the store rows measure real puts and
gets, and a store opened on a filled topic indexes it from the key-only index topic.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from flinkai.bench.kvcache import Profile, run_kvcache_bench
from flinkai.bench.kvcache_cold import FAST_CODEC, cold_config, fill_topic
from flinkai.kafka.broker import LocalKafka
from flinkai.state import KafkaSnapshotStore, KafkaStoreConfig
from flinkai.state.bench import measure_kafka_batch
from flinkai.testing import unique_topic
from tests.unit.llm_fake import FakeDecoder

pytestmark = pytest.mark.integration


def test_the_kafka_modes_restore_the_shared_prefix(kafka_broker: LocalKafka) -> None:
    profile = Profile(cells=((40, 0.9),), prompts=1, throughput_mb=())
    rows = run_kvcache_bench(
        FakeDecoder(), profile, bootstrap=kafka_broker.bootstrap, block_tokens=8
    )
    by_mode = {r["mode"]: r for r in rows}
    assert set(by_mode) == {"none", "memory", "kafka_cold", "kafka_warm"}
    assert by_mode["none"]["cached_tokens_mean"] == 0
    for mode in ("memory", "kafka_cold", "kafka_warm"):
        assert by_mode[mode]["cached_tokens_mean"] == 32, mode  # 36 shared: 4 blocks of 8
        assert by_mode[mode]["rejected"] == {}
    assert by_mode["kafka_cold"]["open_p50_ms"] > 0


def test_the_store_rows_measure_put_many_and_cold_get_many(kafka_broker: LocalKafka) -> None:
    config = KafkaStoreConfig(
        bootstrap=kafka_broker.bootstrap, topic=unique_topic("bench-kv-batch"), codec=FAST_CODEC
    )
    figures = measure_kafka_batch(config, 6, (2, 3, 8, 64), runs=1)
    assert figures.records == 6 and figures.total_bytes == 6 * 2 * 3 * 8 * 64 * 4
    assert figures.put_mb_s > 0 and figures.get_cold_mb_s > 0


def test_a_store_opened_on_a_filled_topic_reads_only_the_index(kafka_broker: LocalKafka) -> None:
    decoder = FakeDecoder()
    config = cold_config(kafka_broker.bootstrap, unique_topic("bench-kv-fill"))
    fill = fill_topic(
        config,
        decoder.shape,
        model_id=decoder.model_id,
        model_version=decoder.model_version,
        mb=0.3,
        block_tokens=8,
        tokens_per_prompt=64,
    )
    assert fill["fill_prompts"] >= 2
    snapshots = fill["fill_prompts"] * 8 * decoder.shape.n_layers
    reader_config = replace(config, create_topic=False)
    with KafkaSnapshotStore(reader_config) as fresh:
        assert fresh.tail_records == 0  # no value was read to open it
        assert sum(len(fresh.versions(k)) for k in fresh.snapshot_keys()) == snapshots
    # Negative control: without the index topic the same open reads every record.
    with KafkaSnapshotStore(replace(reader_config, index_topic=False)) as scanning:
        assert scanning.tail_records >= snapshots
        assert sum(len(scanning.versions(k)) for k in scanning.snapshot_keys()) == snapshots
