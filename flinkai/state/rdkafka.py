"""The snapshot store's data path on librdkafka (``confluent-kafka``).

kafka-python builds and parses record batches in Python: a 47 MB prefix restore
spent most of its second in that code. librdkafka does it in C, on its own threads,
so the store moves tensor bytes through it (the transactional producer and the
fetcher) and keeps kafka-python for the admin calls and the small tails.

The security options are derived from the same ``kafka.security`` mapping as every
other client (:func:`flinkai.kafka.security.python_client_options`), renamed to
librdkafka's keys.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from flinkai.config import KafkaSecurityConfig
from flinkai.kafka.security import python_client_options
from flinkai.state.errors import StoreUnavailableError

__all__ = ["Delivery", "Record", "Tail", "TxnProducer", "rdkafka_security"]

#: Messages taken from librdkafka's queue per ``consume`` call.
_BATCH = 4096
#: What a partition answers while its leader is being elected (a new topic).
_ELECTING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)

#: kafka-python keyword -> librdkafka property.
_RENAMES = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
}


def rdkafka_security(sec: KafkaSecurityConfig) -> dict[str, str]:
    """librdkafka properties for ``sec``; empty for plain text."""
    out: dict[str, str] = {}
    for name, value in python_client_options(sec).items():
        if name not in _RENAMES:
            raise ValueError(f"no librdkafka property for the client option {name!r}")
        out[_RENAMES[name]] = str(value)
    return out


class Delivery:
    """The outcome of one produced record: its offset once the broker acknowledged it."""

    __slots__ = ("_error", "_offset")

    def __init__(self) -> None:
        self._offset: int | None = None
        self._error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self._error = error
        else:
            self._offset = int(message.offset())

    def offset(self) -> int:
        """The record's offset.

        Raises:
            StoreUnavailableError: It failed, or is not acknowledged yet.
        """
        if self._error is not None:
            raise StoreUnavailableError(f"a record was not written: {self._error.str()}")
        if self._offset is None:
            raise StoreUnavailableError("a record was not acknowledged in time")
        return self._offset


class TxnProducer:
    """A transactional librdkafka producer with kafka-python-like ``send`` and ``flush``.

    A plain Python object around the C producer, so a test can wrap ``send`` to pause
    a write half-way.

    Args:
        config: librdkafka properties (bootstrap, ``transactional.id``, sizes...).
        timeout_s: Bound on ``init_transactions``.

    Raises:
        StoreUnavailableError: The transaction coordinator did not answer.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self._producer = Producer(dict(config))
        try:
            self._producer.init_transactions(timeout_s)
        except KafkaException as e:
            self.purge()
            raise StoreUnavailableError(f"init_transactions: {e}") from e

    def send(
        self,
        topic: str,
        key: bytes,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        partition: int,
    ) -> Delivery:
        """Queue one record; librdkafka copies ``value`` (bytes, not a memoryview)."""
        delivery = Delivery()
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=list(headers) if headers else None,
                    partition=partition,
                    on_delivery=delivery,
                )
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self._producer.poll(0.05)
        self._producer.poll(0)
        return delivery

    def flush(self, timeout: float) -> None:
        """Wait until every queued record is acknowledged.

        Raises:
            StoreUnavailableError: Some were not within ``timeout`` seconds.
        """
        left = self._producer.flush(timeout)
        if left:
            raise StoreUnavailableError(f"{left} records not acknowledged within {timeout:g}s")

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def commit_transaction(self, timeout_s: float) -> None:
        self._producer.commit_transaction(timeout_s)

    def abort_transaction(self, timeout_s: float) -> None:
        self._producer.abort_transaction(timeout_s)

    def purge(self) -> None:
        """Drop whatever is still queued, so closing never waits on a dead broker."""
        try:
            self._producer.purge()
            self._producer.flush(0)
        except KafkaException:
            pass


class Record(NamedTuple):
    """One consumed record, detached from the client."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Any


class Tail:
    """A ``read_committed`` librdkafka consumer that reads partitions of one topic to their end.

    The end is the last stable offset (``get_watermark_offsets`` answers it under
    ``read_committed``), so an open transaction holds the reader before it, never
    past it. Positions count commit markers, which are never delivered.

    Args:
        config: librdkafka properties (bootstrap and security at least).
        topic: The topic.
        timeout_s: Bound on each metadata and offset request.
    """

    def __init__(self, config: Mapping[str, Any], topic: str, timeout_s: float) -> None:
        self.topic = topic
        self._timeout_s = timeout_s
        self._consumer = Consumer(
            {
                **config,
                # Required by the client; never joined: partitions are assigned.
                "group.id": f"flinkai-state-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            }
        )
        self._position: dict[int, int] = {}

    def partitions(self) -> list[int]:
        """The topic's partition ids; ``[]`` when it does not exist."""
        metadata = self._consumer.list_topics(self.topic, timeout=self._timeout_s)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            return []
        return sorted(found.partitions)

    def assign(self, starts: Mapping[int, int | None]) -> None:
        """Read each partition from its offset (``None``: from the beginning)."""
        # From the beginning without asking for the log start (one round trip less):
        # the position counted from 0 moves to the first record, or to the end, at once.
        self._consumer.assign(
            [
                TopicPartition(self.topic, p, OFFSET_BEGINNING if start is None else start)
                for p, start in starts.items()
            ]
        )
        self._position = {p: 0 if start is None else start for p, start in starts.items()}

    def position(self, partition: int) -> int:
        """The next offset this reader reads in ``partition``."""
        return self._position[partition]

    def seek(self, partition: int, offset: int) -> bool:
        """Move forward to ``offset``; ``False`` when the client refused (read on instead)."""
        try:
            self._consumer.seek(TopicPartition(self.topic, partition, offset))
        except KafkaException:
            return False
        self._position[partition] = offset
        return True

    def read_to_end(
        self,
        apply: Callable[[Record], None],
        deadline: float,
        before_poll: Callable[[], None] | None = None,
    ) -> None:
        """``apply`` each record up to every partition's current end.

        Raises:
            StoreUnavailableError: ``deadline`` (``time.monotonic``) passed first.
            KafkaException: The client failed.
        """
        end = {p: self._watermarks(p)[1] for p in self._position}
        position = self._position
        while True:
            if before_poll is not None:
                before_poll()
            if all(position[p] >= end[p] for p in end):
                return
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(f"reading {self.topic!r} did not reach its end in time")
            for m in self._consumer.consume(_BATCH, 0.01):
                p, at = m.partition(), m.offset()
                if p is None or at is None or p not in position:
                    continue
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    position[p] = max(position[p], at)
                    continue
                if at < position[p]:
                    continue  # fetched before a seek past it
                apply(Record(self.topic, p, at, m.key(), m.value(), m.headers()))
                position[p] = at + 1
            for tp in self._consumer.position([TopicPartition(self.topic, p) for p in position]):
                # Past commit markers too, which are never delivered.
                if tp.offset >= 0:
                    position[tp.partition] = max(position[tp.partition], tp.offset)

    def close(self) -> None:
        with contextlib.suppress(KafkaException, RuntimeError):
            self._consumer.close()

    def _watermarks(self, partition: int) -> tuple[int, int]:
        """Low watermark and last stable offset; retried while the broker says to retry
        (a topic created a moment ago may still be electing its leader)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=self._timeout_s, cached=False
                )
                return int(low), int(high)
            except KafkaException as e:
                error = e.args[0] if e.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _ELECTING
                )
                if not retriable or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
