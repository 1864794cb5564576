"""The adapters topic: LoRA versions published transactionally, hot-plugged by workers.

A record is one change to one adapter, keyed by the adapter's name:

- **publish** (header ``action=publish``, or no ``action`` header): the value is the
  ``.onnx_adapter`` bytes (:class:`~flinkai.llm.lora.Adapter`, which names its
  version inside). A worker checks it and makes it the name's current version.
- **rollback** (header ``action=rollback``): an empty value; header ``version`` names
  the version to go back to (absent: the newest one older than the current).

Writers publish in Kafka transactions (the fine-tuning job through Flink's
exactly-once sink, :class:`AdapterPublisher` otherwise) and :class:`AdapterFeed`
reads ``read_committed``, so a version from an aborted attempt is never loaded. A
worker's feed reads the topic from its start, so a restarted worker ends with the same
current versions as the others.

An r = 8 adapter on q/v of SmolLM2 is about 1.84 MB, above Kafka's default 1 MB
record limit: create the topic with :func:`adapter_topic_configs`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from flinkai.kafka.security import ClientSecurity, client_options
from flinkai.llm.adapters import AdapterSet
from flinkai.llm.lora import Adapter, AdapterError

__all__ = [
    "ADAPTER_MAX_BYTES",
    "AdapterFeed",
    "AdapterPublisher",
    "FeedStats",
    "adapter_topic_configs",
]

log = logging.getLogger(__name__)

#: Default bound on one adapter record (16 MiB: rank 64 on q/v of SmolLM2 still fits).
ADAPTER_MAX_BYTES = 16 * 1024 * 1024


def adapter_topic_configs(max_bytes: int = ADAPTER_MAX_BYTES) -> dict[str, str]:
    """Topic configs for an adapters topic whose records may be ``max_bytes`` long."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    return {"max.message.bytes": str(max_bytes)}


def _header(headers: Any, name: str) -> str | None:
    for key, value in headers or ():
        if key == name:
            return bytes(value).decode("utf-8") if value is not None else None
    return None


@dataclass
class FeedStats:
    """What a feed has done; read them, do not write them."""

    records: int = 0
    applied: int = 0
    rejected: int = 0
    errors: int = 0


class AdapterFeed:
    """Applies the adapters topic to an :class:`AdapterSet` from a daemon thread.

    Args:
        bootstrap: Brokers.
        topic: The adapters topic.
        adapters: Where versions go.
        security: Client security of the job's Kafka.
        poll_ms: Longest wait of one fetch; a committed version is seen within about it.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        adapters: AdapterSet,
        *,
        security: ClientSecurity | None = None,
        poll_ms: int = 50,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.adapters = adapters
        self.security = security
        self.poll_ms = poll_ms
        self.stats = FeedStats()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> AdapterFeed:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="flinkai-adapter-feed")
            self._thread.daemon = True
            self._thread.start()
        return self

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the feed has applied everything committed when it started."""
        return self._ready.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def handle(self, key: bytes | None, value: bytes | None, headers: Any, where: str = "") -> None:
        """Apply one record (bad ones are counted and logged, never raised)."""
        self.stats.records += 1
        action = _header(headers, "action") or "publish"
        try:
            if action == "publish":
                if not value:
                    raise AdapterError("malformed", "a publish record with no value")
                self.adapters.publish(value)
            elif action == "rollback":
                name = (key or b"").decode("utf-8")
                version = _header(headers, "version")
                self.adapters.rollback(name, int(version) if version else None)
            else:
                raise AdapterError("unknown_action", f"action {action!r}")
            self.stats.applied += 1
        except AdapterError as e:
            # The set logged and counted it by reason; the current version stays.
            self.stats.rejected += 1
            log.debug("adapter record%s refused: %s", where, e)
        except (ValueError, UnicodeDecodeError) as e:
            self.stats.rejected += 1
            log.warning("adapter record%s refused: %s", where, e)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            # The feed must outlive anything a broker does; the next attempt may work.
            except Exception as e:
                self.stats.errors += 1
                log.warning("adapters topic %s: %s: %s; retrying", self.topic, type(e).__name__, e)
                self._stop.wait(1.0)

    def _consume(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id="flinkai-adapter-feed",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=self.poll_ms,
            max_partition_fetch_bytes=ADAPTER_MAX_BYTES,
            fetch_max_bytes=4 * ADAPTER_MAX_BYTES,
            request_timeout_ms=30_000,
            **client_options(self.security),
        )
        try:
            partitions: list[TopicPartition] = []
            while not partitions and not self._stop.is_set():
                ids = consumer.partitions_for_topic(self.topic)
                partitions = [TopicPartition(self.topic, p) for p in sorted(ids or ())]
                if not partitions:
                    self._stop.wait(0.5)
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            # read_committed end offsets: the last stable offsets at start.
            ends: Mapping[TopicPartition, int] = consumer.end_offsets(partitions)
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=self.poll_ms)
                for tp, records in batch.items():
                    for r in records:
                        where = f" (partition {tp.partition}, offset {r.offset})"
                        self.handle(r.key, r.value, r.headers, where)
                if not self._ready.is_set() and all(
                    consumer.position(tp) >= ends[tp] for tp in partitions
                ):
                    self._ready.set()
                    log.info(
                        "adapters topic %s applied up to start: %s",
                        self.topic,
                        self.adapters.names(),
                    )
        finally:
            consumer.close()


class AdapterPublisher:
    """Publishes adapter versions and rollbacks, one Kafka transaction each.

    The fine-tuning job publishes through Flink's exactly-once sink instead; this is
    for a trained adapter file, a rollback by hand, tests and the bench.

    Args:
        bootstrap: Brokers.
        topic: The adapters topic (created with :func:`adapter_topic_configs`).
        transactional_id: Fences an older publisher with the same id.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        transactional_id: str = "flinkai-adapter-publisher",
        security: ClientSecurity | None = None,
    ) -> None:
        self.topic = topic
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            max_request_size=ADAPTER_MAX_BYTES,
            **client_options(security),
        )
        self._producer.init_transactions()

    def publish(self, adapter: Adapter) -> float:
        """Publish a version; returns the wall time its commit returned (it is visible)."""
        headers = [("action", b"publish"), ("version", str(adapter.version).encode())]
        return self._send(adapter.name, adapter.encode(), headers)

    def rollback(self, name: str, to_version: int | None = None) -> float:
        """Ask workers to go back to ``to_version`` (default: the previous held one)."""
        headers = [("action", b"rollback")]
        if to_version is not None:
            headers.append(("version", str(to_version).encode()))
        return self._send(name, b"", headers)

    def _send(self, key: str, value: bytes, headers: list[tuple[str, bytes]]) -> float:
        self._producer.begin_transaction()
        self._producer.send(self.topic, key=key.encode(), value=value, headers=headers)
        self._producer.commit_transaction()
        return time.time()

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.close(timeout_s)
