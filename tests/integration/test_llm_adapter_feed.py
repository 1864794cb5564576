"""The adapters topic on a real broker: transactional publish, hot-plug, rollback, restart.

A version written in an aborted transaction is never loaded (the feed reads
``read_committed``); a bad record is refused with its reason and the current version
stays; a feed started later replays the topic to the same current versions.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from kafka import KafkaProducer

from flinkai.kafka.adapter_feed import (
    ADAPTER_MAX_BYTES,
    AdapterFeed,
    AdapterPublisher,
    adapter_topic_configs,
)
from flinkai.kafka.admin import create_topics
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.adapters import AdapterSet
from flinkai.llm.lora import Adapter, LoraSpec

pytestmark = [pytest.mark.integration]

# SmolLM2's q/v shapes at rank 8: a 1.84 MB record, above Kafka's default 1 MB limit.
SPEC = LoraSpec(rank=8, n_layers=30, dims={"q_proj": (576, 576), "v_proj": (576, 192)})
BASE = "69820afa6f67ed8c"


def make(version: int, rank: int = 8) -> Adapter:
    rng = np.random.default_rng(version)
    spec = LoraSpec(rank, SPEC.n_layers, SPEC.dims)
    params = {n: rng.standard_normal(spec.shape_of(n)).astype(np.float32) for n in spec.names()}
    return Adapter("topics", version, BASE, rank, params)


def wait_for(predicate: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_committed_versions_hot_plug_and_aborted_ones_never_do(
    kafka_broker: LocalKafka, topic: str
) -> None:
    create_topics(kafka_broker.bootstrap, [topic], configs=adapter_topic_configs())
    publisher = AdapterPublisher(kafka_broker.bootstrap, topic, transactional_id=f"{topic}-pub")
    adapters = AdapterSet(SPEC, BASE)
    feed = AdapterFeed(kafka_broker.bootstrap, topic, adapters).start()
    try:
        assert feed.wait_ready(30)
        v1 = make(1)
        assert len(v1.encode()) > 1_800_000
        publisher.publish(v1)
        wait_for(lambda: adapters.current("topics") is not None)
        assert adapters.pin("topics").version == 1

        # An aborted transaction: its version must never become current.
        aborting = KafkaProducer(
            bootstrap_servers=kafka_broker.bootstrap,
            transactional_id=f"{topic}-aborting",
            max_request_size=ADAPTER_MAX_BYTES,
        )
        aborting.init_transactions()
        aborting.begin_transaction()
        aborting.send(
            topic, key=b"topics", value=make(99).encode(), headers=[("action", b"publish")]
        )
        aborting.flush()
        aborting.abort_transaction()
        aborting.close()

        publisher.publish(make(2, rank=4))  # wrong rank: refused, version 1 stays
        committed = publisher.publish(make(3))
        wait_for(lambda: adapters.pin("topics").version == 3)
        loaded = next(e.at_s for e in adapters.events if e.version == 3 and e.action == "publish")
        assert loaded - committed < 5.0
        publisher.rollback("topics")
        wait_for(lambda: adapters.pin("topics").version == 1)
        assert adapters.rejected == {"rank_mismatch": 1}
        assert 99 not in {e.version for e in adapters.events}
    finally:
        feed.close()

    # A worker started now replays the topic to the same state.
    later = AdapterSet(SPEC, BASE)
    replay = AdapterFeed(kafka_broker.bootstrap, topic, later).start()
    try:
        assert replay.wait_ready(30)
        assert later.pin("topics").version == 1
        assert replay.stats.records == 4 and replay.stats.rejected == 1
        assert 99 not in {e.version for e in later.events}
    finally:
        replay.close()
        publisher.close()
