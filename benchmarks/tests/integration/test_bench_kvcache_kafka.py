"""``flinkai bench kvcache``'s Kafka parts on the real broker, small and fast.

The figures need the real decoder; these tests check the mechanics with the fake one:
the Kafka modes restore the shared prefix, the store rows measure real puts and
gets, and a store opened on a filled topic indexes it from the key-only index topic.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flinkai.kafka.broker import LocalKafka
from flinkai.state import KafkaSnapshotStore, KafkaStoreConfig
from flinkai.testing import unique_topic
from flinkai_bench.kvcache import Profile, run_kvcache_bench
from flinkai_bench.kvcache_cold import FAST_CODEC, cold_config, fill_topic, measure_open
from flinkai_bench.research.state_workload import measure_kafka_batch
from tests.unit.llm_fake import FakeDecoder

pytestmark = pytest.mark.integration


def filled(
    config: KafkaStoreConfig, mb: float, tokens_per_prompt: int
) -> tuple[FakeDecoder, dict[str, float]]:
    """``config``'s topic filled with about ``mb`` MB of fake prompts (blocks of 8)."""
    decoder = FakeDecoder()
    fill = fill_topic(
        config,
        decoder.shape,
        model_id=decoder.model_id,
        model_version=decoder.model_version,
        mb=mb,
        block_tokens=8,
        tokens_per_prompt=tokens_per_prompt,
    )
    return decoder, fill


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
    config = cold_config(kafka_broker.bootstrap, unique_topic("bench-kv-fill"))
    decoder, fill = filled(config, 0.3, 64)
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


def test_the_open_probe_times_fresh_processes_against_the_plain_consumer_floor(
    kafka_broker: LocalKafka,
) -> None:
    config = cold_config(kafka_broker.bootstrap, unique_topic("bench-kv-open"))
    _, fill = filled(config, 0.2, 64)
    opened = measure_open(config, runs=1)
    assert len(opened["open_ms"]) == len(opened["floor_ms"]) == 1
    # The floor read the whole index topic: one record per put_many of the fill.
    assert opened["index_records"] == fill["fill_prompts"]
    assert opened["index_bytes"] > 0
    assert min(opened["open_ms"]) > 0 and min(opened["floor_ms"]) > 0
    # A topic that does not exist fails the worker with its reason, not a figure.
    with pytest.raises(RuntimeError, match="cold worker failed"):
        measure_open(replace(config, topic=unique_topic("bench-kv-missing")), runs=1, timeout_s=2.0)


def test_a_half_precision_store_restores_float32_blocks_from_half_the_bytes(
    kafka_broker: LocalKafka,
) -> None:
    half = replace(FAST_CODEC, store_dtype="float16")
    config = cold_config(kafka_broker.bootstrap, unique_topic("bench-kv-f16"), codec=half)
    decoder, fill = filled(config, 0.1, 32)
    with KafkaSnapshotStore(replace(config, create_topic=False)) as fresh:
        keys = fresh.snapshot_keys()
        assert len(keys) == fill["fill_prompts"] * 4 * decoder.shape.n_layers
        got = [s for s in fresh.get_many(keys[:3], dtype="float32") if s is not None]
        assert len(got) == 3 and all(s.tensor.dtype == np.float32 for s in got)
        # Every value is a float16 value widened (random float32 values almost never are).
        for s in got:
            np.testing.assert_array_equal(s.tensor, s.tensor.astype(np.float16).astype(np.float32))
        # Each block travelled as float16: half of what the reader received.
        assert fresh.stats.fetched_bytes * 2 == sum(s.tensor.nbytes for s in got)
