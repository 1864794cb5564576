"""The bench's micro-batch reindexer on the real broker and Chroma server.

It must read only what was sent after it started, embed each changed document once at
its newest version, count an invalid record instead of failing, and leave the
collection holding exactly the newest versions.
"""

from __future__ import annotations

import dataclasses
import json
import time

from flinkai.config import load_config
from flinkai.kafka.admin import create_topics
from flinkai.kafka.broker import LocalKafka
from flinkai.rag.chroma import ChromaIndex
from flinkai.rag.server import ChromaServer
from flinkai_bench.rag_microbatch import MicroBatchReindexer


def _doc(doc_id: str, text: str, version: int) -> bytes:
    return json.dumps({"doc_id": doc_id, "text": text, "updated_at": version}).encode()


def test_microbatch_reindexes_only_new_records_at_their_newest_version(
    kafka_broker: LocalKafka,
    chroma_server: ChromaServer,
    chroma_collection: str,
    topic: str,
    model_artifacts: object,
) -> None:
    from kafka import KafkaProducer

    rag = dataclasses.asdict(
        dataclasses.replace(chroma_server.config(), collection=chroma_collection)
    )
    config = load_config(env={}).with_overrides(rag=rag)
    create_topics(kafka_broker.bootstrap, [topic])
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    producer.send(topic, key=b"old", value=_doc("old", "sent before the start", 1))
    producer.flush()
    # 3 s: the four records below land in one run even on a loaded machine.
    reindexer = MicroBatchReindexer(config, kafka_broker.bootstrap, topic, interval_s=3.0)
    reindexer.start()
    try:
        producer.send(topic, key=b"a", value=_doc("a", "first text of a", 1000))
        producer.send(topic, key=b"b", value=_doc("b", "the only text of b", 1000))
        producer.send(topic, key=b"a", value=_doc("a", "second text of a", 2000))
        producer.send(topic, key=b"x", value=b"not json")
        producer.flush()
        producer.close()
        state = reindexer.state
        deadline = time.monotonic() + 60
        while {"a", "b"} - state.indexed_at.keys() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        reindexer.stop()
    assert {"a", "b"} <= state.indexed_at.keys(), state
    [run] = [r for r in state.runs if r.records]
    assert (run.records, run.documents, state.invalid, state.errors) == (4, 2, 1, [])
    with ChromaIndex(config.rag) as index:
        assert index.versions() == {"warm-0": 1, "a": 2000, "b": 1000}
        texts = {c.doc_id: c.text for c, _ in index.stored_chunks()}
    assert texts == {
        "warm-0": "warm-up document",
        "a": "second text of a",
        "b": "the only text of b",
    }
