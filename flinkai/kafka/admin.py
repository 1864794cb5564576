"""Small blocking helpers over kafka-python for tooling and tests.

Every helper opens its own client and closes it before returning: they are for
setting up topics, seeding input and checking output, not for the hot path. A
broker that cannot be reached becomes a :class:`BrokerUnavailableError` whose
message names the bootstrap address.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import kafka.errors as kerrors
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from flinkai.config import KafkaSecurityConfig
from flinkai.kafka.errors import (
    BrokerUnavailableError,
    KafkaAuthError,
    KafkaError,
    TopicNotFoundError,
)
from flinkai.kafka.security import ClientSecurity, client_options, describe_listener
from flinkai.security import redact

__all__ = [
    "IsolationLevel",
    "Record",
    "TopicSnapshot",
    "consume_all",
    "create_topics",
    "describe_cluster",
    "end_offsets",
    "list_topics",
    "produce",
    "read_to_end_offsets",
    "wait_for_broker",
]

IsolationLevel = Literal["read_committed", "read_uncommitted"]

#: Kafka error code for TOPIC_ALREADY_EXISTS in a CreateTopics response.
_TOPIC_ALREADY_EXISTS = 36
#: Upper bound for one connection attempt, so a retry loop notices its own deadline.
_ATTEMPT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Record:
    """One consumed record.

    Attributes:
        topic: Topic it was read from.
        partition: Partition it was read from.
        offset: Its offset in that partition.
        key: Raw key bytes, or ``None``.
        value: Raw value bytes, or ``None`` for a tombstone.
        timestamp_ms: Record timestamp (create or log-append time, per topic config).
        headers: Record headers in the order they were written.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _unavailable(bootstrap: str, e: BaseException) -> BrokerUnavailableError:
    return BrokerUnavailableError(redact(f"cannot reach Kafka at {bootstrap}: {e}"))


def _connect_failed(
    bootstrap: str, security: ClientSecurity | None, e: BaseException
) -> KafkaError:
    """A rejected login as :class:`KafkaAuthError`, anything else as unavailable.

    kafka-python mostly reports a failed login or TLS handshake as a bootstrap
    timeout; :func:`flinkai.kafka.probe.check_access` tells those apart.
    """
    if isinstance(e, kerrors.SaslAuthenticationFailedError):
        sec = security or KafkaSecurityConfig()
        return KafkaAuthError(
            redact(f"authentication to the {describe_listener(sec, bootstrap)} failed: {e}")
        )
    return _unavailable(bootstrap, e)


@contextmanager
def _admin(
    bootstrap: str, timeout_s: float, security: ClientSecurity | None = None
) -> Iterator[Any]:
    try:
        client = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="flinkai-admin",
            bootstrap_timeout_ms=_ms(timeout_s),
            request_timeout_ms=_ms(max(timeout_s, 1.0)),
            **client_options(security),
        )
    except kerrors.KafkaError as e:
        raise _connect_failed(bootstrap, security, e) from e
    try:
        yield client
    finally:
        client.close()


def describe_cluster(
    bootstrap: str, timeout_s: float = 5.0, *, security: ClientSecurity | None = None
) -> dict[str, Any]:
    """Ask the cluster for its id, controller and brokers (one attempt).

    Args:
        bootstrap: ``host:port[,host:port...]``.
        timeout_s: Bound on connecting and on the request.
        security: Client security; ``None`` connects in plain text.

    Returns:
        kafka-python's ``describe_cluster`` dict (``cluster_id``, ``controller_id``,
        ``brokers``).

    Raises:
        BrokerUnavailableError: No broker answered in time.
        KafkaAuthError: The broker rejected the credentials or the TLS handshake failed.
    """
    with _admin(bootstrap, timeout_s, security) as admin:
        try:
            result: dict[str, Any] = admin.describe_cluster()
        except kerrors.KafkaError as e:
            raise _connect_failed(bootstrap, security, e) from e
    return result


def wait_for_broker(
    bootstrap: str, timeout_s: float = 30.0, *, security: ClientSecurity | None = None
) -> dict[str, Any]:
    """Block until a broker answers Kafka requests and reports at least one live broker.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        timeout_s: Total time to keep trying.

    Returns:
        The cluster description, as :func:`describe_cluster`.

    Raises:
        BrokerUnavailableError: Still unreachable when ``timeout_s`` has passed.
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            cluster = describe_cluster(
                bootstrap, min(remaining, _ATTEMPT_TIMEOUT_S), security=security
            )
        except BrokerUnavailableError as e:
            last = e
        else:
            # A KRaft broker answers metadata requests before it is unfenced; an
            # empty broker list means topics cannot be created yet.
            if cluster.get("brokers"):
                return cluster
            last = KafkaError(f"Kafka at {bootstrap} answers but lists no live broker yet")
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    raise BrokerUnavailableError(
        f"no Kafka broker ready at {bootstrap} within {timeout_s:g}s"
        + (f" (last error: {last})" if last else "")
    )


def list_topics(
    bootstrap: str, timeout_s: float = 10.0, *, security: ClientSecurity | None = None
) -> set[str]:
    """Names of all topics, internal ones included.

    Raises:
        BrokerUnavailableError: No broker answered in time.
    """
    with _admin(bootstrap, timeout_s, security) as admin:
        try:
            return set(admin.list_topics())
        except kerrors.KafkaError as e:
            raise _unavailable(bootstrap, e) from e


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int = 1,
    *,
    replication_factor: int = 1,
    configs: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> list[str]:
    """Create topics that do not exist yet, and wait until each has a leader.

    Idempotent: a topic that already exists is left as it is, as long as it has
    at least ``partitions`` partitions.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        names: Topic names.
        partitions: Partitions for each new topic.
        replication_factor: Replicas per partition (1 on the local broker).
        configs: Topic-level configs for new topics, e.g. ``{"retention.ms": "-1"}``.
        timeout_s: Bound on connecting, creating and waiting for leaders.
        security: Client security; ``None`` connects in plain text.

    Returns:
        The names that this call created (the others existed already).

    Raises:
        BrokerUnavailableError: No broker answered in time.
        KafkaError: The broker refused a topic, or an existing one has fewer partitions.
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return []
    spec = {
        name: {
            "num_partitions": partitions,
            "replication_factor": replication_factor,
            "configs": dict(configs or {}),
        }
        for name in wanted
    }
    with _admin(bootstrap, timeout_s, security) as admin:
        try:
            response = admin.create_topics(spec, timeout_ms=_ms(timeout_s), raise_errors=False)
        except kerrors.KafkaError as e:
            raise _unavailable(bootstrap, e) from e
        created: list[str] = []
        existing: list[str] = []
        for topic in response["topics"]:
            code = topic["error_code"]
            if code == 0:
                created.append(topic["name"])
            elif code == _TOPIC_ALREADY_EXISTS:
                existing.append(topic["name"])
            else:
                error = kerrors.for_code(code)
                detail = topic.get("error_message") or error.__name__
                raise KafkaError(f"cannot create topic {topic['name']!r} on {bootstrap}: {detail}")
        try:
            admin.wait_for_topics(wanted, timeout_ms=_ms(timeout_s))
            described = admin.describe_topics(existing) if existing else []
        except kerrors.KafkaError as e:
            raise KafkaError(f"topics {wanted} not ready on {bootstrap}: {e}") from e
    for topic in described:
        have = len(topic["partitions"])
        if have < partitions:
            raise KafkaError(
                f"topic {topic['name']!r} on {bootstrap} exists with {have} partition(s), "
                f"fewer than the {partitions} asked for"
            )
    return created


def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes | None],
    key: bytes | Callable[[bytes | None], bytes | None] | None = None,
    *,
    headers: Iterable[tuple[str, bytes]] = (),
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> int:
    """Write values to a topic and flush; every record is acknowledged by the broker.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        topic: Target topic (it must exist unless the broker auto-creates topics).
        values: Record values, in order.
        key: One key for every record, a function of the value, or ``None``.
        headers: Headers added to every record.
        timeout_s: Bound on connecting, on each blocking send and on the final flush.
        security: Client security; ``None`` connects in plain text.

    Returns:
        The number of records written.

    Raises:
        BrokerUnavailableError: No broker answered in time, at the start or while the
            records were being sent (the message names ``bootstrap`` and ``topic``).
        KafkaError: A record was rejected.
    """
    header_list = list(headers)
    try:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="flinkai-produce",
            acks="all",
            bootstrap_timeout_ms=_ms(timeout_s),
            max_block_ms=_ms(timeout_s),
            **client_options(security),
        )
    except kerrors.KafkaError as e:
        raise _connect_failed(bootstrap, security, e) from e
    count = 0
    try:
        futures = []
        for value in values:
            record_key = key(value) if callable(key) else key
            futures.append(
                producer.send(topic, value=value, key=record_key, headers=header_list or None)
            )
            count += 1
        producer.flush(timeout=timeout_s)
        for future in futures:
            # Surfaces per-record failures that flush() alone does not raise.
            future.get(timeout=timeout_s)
    except kerrors.KafkaError as e:
        _abandon(producer)
        raise _produce_failed(bootstrap, topic, timeout_s, e) from e
    except BaseException:
        _abandon(producer)
        raise
    try:
        producer.close(timeout=timeout_s)
    except kerrors.KafkaError as e:
        raise _produce_failed(bootstrap, topic, timeout_s, e) from e
    return count


def _produce_failed(
    bootstrap: str, topic: str, timeout_s: float, e: kerrors.KafkaError
) -> KafkaError:
    if isinstance(e, kerrors.KafkaTimeoutError | kerrors.KafkaConnectionError):
        return BrokerUnavailableError(
            f"producing to {topic!r} on {bootstrap} failed: no acknowledgement within "
            f"{timeout_s:g}s; is the broker reachable and the topic there? "
            f"({type(e).__name__}: {e})"
        )
    return KafkaError(f"producing to {topic!r} on {bootstrap} failed: {type(e).__name__}: {e}")


def _abandon(producer: Any) -> None:
    """Close a producer whose records failed, without waiting for them again."""
    try:
        producer.close(timeout=0)
    except kerrors.KafkaError:
        # kafka-python's close() flushes first and raises on the same unsent records,
        # before it stops its sender thread; stop that thread without sending.
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()


def _wait_for_partitions(consumer: Any, topic: str, deadline: float) -> list[Any]:
    while True:
        ids = consumer.partitions_for_topic(topic)
        if ids:
            return [TopicPartition(topic, p) for p in sorted(ids)]
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.1)


def consume_all(
    bootstrap: str,
    topic: str,
    timeout_s: float = 10.0,
    isolation_level: IsolationLevel = "read_committed",
    expect: int | None = None,
    *,
    idle_s: float = 1.0,
    security: ClientSecurity | None = None,
) -> list[Record]:
    """Read a topic from the beginning, without a consumer group.

    Stops when ``expect`` records have been read; without ``expect``, when every
    partition has been read up to its end offset (the last stable offset under
    ``read_committed``) and nothing new arrived for ``idle_s``. ``timeout_s``
    bounds the whole call either way; reaching it is not an error, so callers
    assert on what came back.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        topic: Topic to read.
        timeout_s: Upper bound on the call, including waiting for the topic to appear.
        isolation_level: ``read_committed`` hides aborted and still-open transactions.
        expect: Stop as soon as this many records were read.
        idle_s: Quiet period that ends a read without ``expect``.
        security: Client security; ``None`` connects in plain text.

    Returns:
        Records ordered by partition, then offset.

    Raises:
        BrokerUnavailableError: No broker answered in time.
        TopicNotFoundError: The topic did not exist within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    records: list[Record] = []
    with _consumer(bootstrap, isolation_level, timeout_s, security) as consumer:
        _consume_into(records, consumer, bootstrap, topic, deadline, expect, idle_s)
    records.sort(key=lambda r: (r.partition, r.offset))
    return records


def _consume_into(
    records: list[Record],
    consumer: Any,
    bootstrap: str,
    topic: str,
    deadline: float,
    expect: int | None,
    idle_s: float,
) -> None:
    try:
        partitions = _wait_for_partitions(consumer, topic, deadline)
        if not partitions:
            raise TopicNotFoundError(f"topic {topic!r} does not exist on {bootstrap}")
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        last_new = time.monotonic()
        while (now := time.monotonic()) < deadline:
            if expect is not None and len(records) >= expect:
                break
            batch = consumer.poll(timeout_ms=_ms(min(0.2, deadline - now)))
            fetched = [r for rs in batch.values() for r in rs]
            if fetched:
                records.extend(_record(r) for r in fetched)
                last_new = time.monotonic()
                continue
            idle = time.monotonic() - last_new >= idle_s
            if expect is None and idle and _read_to_end(consumer, partitions, deadline):
                break
    except kerrors.KafkaError as e:
        raise KafkaError(f"consuming {topic!r} from {bootstrap} failed: {e}") from e


@dataclass(frozen=True)
class TopicSnapshot:
    """Every record of a topic up to end offsets fixed before reading began.

    Attributes:
        topic: The topic read.
        isolation_level: How it was read.
        end_offsets: Partition -> the end offset read up to: the last stable offset
            under ``read_committed`` (nothing at or after it is visible), the high
            watermark under ``read_uncommitted``.
        records: Every record below those offsets, ordered by partition, then offset.
    """

    topic: str
    isolation_level: IsolationLevel
    end_offsets: dict[int, int]
    records: list[Record]


@contextmanager
def _consumer(
    bootstrap: str,
    isolation_level: IsolationLevel,
    timeout_s: float,
    security: ClientSecurity | None = None,
) -> Iterator[Any]:
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="flinkai-consume",
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation_level,
            bootstrap_timeout_ms=_ms(timeout_s),
            request_timeout_ms=_ms(max(timeout_s, 1.0)),
            **client_options(security),
        )
    except kerrors.KafkaError as e:
        raise _connect_failed(bootstrap, security, e) from e
    try:
        yield consumer
    finally:
        consumer.close()


def _partitions_or_fail(consumer: Any, bootstrap: str, topic: str, deadline: float) -> list[Any]:
    partitions = _wait_for_partitions(consumer, topic, deadline)
    if not partitions:
        raise TopicNotFoundError(f"topic {topic!r} does not exist on {bootstrap}")
    return partitions


def end_offsets(
    bootstrap: str,
    topic: str,
    isolation_level: IsolationLevel = "read_committed",
    timeout_s: float = 10.0,
    *,
    security: ClientSecurity | None = None,
) -> dict[int, int]:
    """Each partition's end offset as a consumer with ``isolation_level`` sees it.

    Under ``read_committed`` that is the last stable offset (the first offset of the
    oldest open transaction, or the high watermark when none is open); under
    ``read_uncommitted`` the high watermark. A partition whose two ends differ holds
    records of a transaction that is still open.

    Raises:
        BrokerUnavailableError: No broker answered in time.
        TopicNotFoundError: The topic did not exist within ``timeout_s``.
        KafkaError: The broker did not report the offsets.
    """
    deadline = time.monotonic() + timeout_s
    with _consumer(bootstrap, isolation_level, timeout_s, security) as consumer:
        partitions = _partitions_or_fail(consumer, bootstrap, topic, deadline)
        try:
            ends = consumer.end_offsets(partitions, timeout_ms=_ms(deadline - time.monotonic()))
        except kerrors.KafkaError as e:
            raise KafkaError(f"end offsets of {topic!r} on {bootstrap}: {e}") from e
    return {tp.partition: int(ends[tp]) for tp in partitions}


def read_to_end_offsets(
    bootstrap: str,
    topic: str,
    isolation_level: IsolationLevel = "read_committed",
    timeout_s: float = 60.0,
    *,
    security: ClientSecurity | None = None,
) -> TopicSnapshot:
    """Read every partition of a topic from its beginning exactly to its end offset.

    The end offsets are fixed first (see :func:`end_offsets`); reading stops when
    every partition's position has reached its end, never at a record count, so a
    duplicate written after any number of records is read too. Records written
    after the end offsets were fixed are left out.

    Raises:
        BrokerUnavailableError: No broker answered in time.
        TopicNotFoundError: The topic did not exist within ``timeout_s``.
        KafkaError: A partition was not read to its end within ``timeout_s``: the
            snapshot would be incomplete, so none is returned.
    """
    deadline = time.monotonic() + timeout_s
    with _consumer(bootstrap, isolation_level, timeout_s, security) as consumer:
        partitions = _partitions_or_fail(consumer, bootstrap, topic, deadline)
        try:
            ends = consumer.end_offsets(partitions, timeout_ms=_ms(deadline - time.monotonic()))
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            records = _read_until(consumer, ends, deadline)
        except kerrors.KafkaError as e:
            raise KafkaError(f"reading {topic!r} from {bootstrap} to its end failed: {e}") from e
    if records is None:
        raise KafkaError(
            f"{topic!r} on {bootstrap} was not read to its end offsets "
            f"{ {tp.partition: ends[tp] for tp in partitions} } within {timeout_s:g}s"
        )
    records.sort(key=lambda r: (r.partition, r.offset))
    return TopicSnapshot(
        topic=topic,
        isolation_level=isolation_level,
        end_offsets={tp.partition: int(ends[tp]) for tp in partitions},
        records=records,
    )


def _read_until(consumer: Any, ends: Mapping[Any, int], deadline: float) -> list[Record] | None:
    """Poll until every partition's position reaches its end; None on the deadline."""
    records: list[Record] = []
    while True:
        # Positions move past aborted records and commit markers too, so an end
        # offset that follows a marker is reached without a record at it.
        pending = [tp for tp, end in ends.items() if _position(consumer, tp, deadline) < end]
        if not pending:
            return records
        now = time.monotonic()
        if now >= deadline:
            return None
        batch = consumer.poll(timeout_ms=_ms(min(0.5, deadline - now)))
        for tp, rs in batch.items():
            # Later commits may have moved the end; what lies beyond ours is not read.
            records.extend(_record(r) for r in rs if r.offset < ends[tp])


def _position(consumer: Any, tp: Any, deadline: float) -> int:
    position = consumer.position(tp, timeout_ms=_ms(max(0.1, deadline - time.monotonic())))
    return -1 if position is None else int(position)


def _read_to_end(consumer: Any, partitions: list[Any], deadline: float) -> bool:
    """Whether every partition was read up to its end (its last stable offset).

    Running out of time while asking counts as "not yet": the caller's loop then
    ends on its own deadline.
    """
    try:
        ends = consumer.end_offsets(partitions, timeout_ms=_ms(deadline - time.monotonic()))
        for tp in partitions:
            position = consumer.position(tp, timeout_ms=_ms(deadline - time.monotonic()))
            if position is None or position < ends[tp]:
                return False
    except kerrors.KafkaTimeoutError:
        return False
    return True


def _record(r: Any) -> Record:
    return Record(
        topic=r.topic,
        partition=r.partition,
        offset=r.offset,
        key=r.key,
        value=r.value,
        timestamp_ms=r.timestamp,
        headers=tuple((k, v) for k, v in (r.headers or ())),
    )


def broker_config(
    bootstrap: str,
    key: str,
    timeout_s: float = 10.0,
    *,
    security: ClientSecurity | None = None,
) -> str | None:
    """One effective broker setting (e.g. ``transaction.max.timeout.ms``), defaults included.

    Returns None when the broker does not report the key.
    """
    from kafka.admin import ConfigResource, ConfigResourceType

    with _admin(bootstrap, timeout_s, security) as admin:
        try:
            broker_id = str(admin.describe_cluster()["brokers"][0]["broker_id"])
            # config_filter="all": the default filter only reports non-default values
            result = admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, broker_id, configs=[key])],
                config_filter="all",
            )
        except kerrors.KafkaError as e:
            raise _unavailable(bootstrap, e) from e
    entry = result.get("broker", {}).get(broker_id, {}).get(key)
    if isinstance(entry, dict):
        value = entry.get("value", entry.get("config_value"))
        return None if value is None else str(value)
    return None if entry is None else str(entry)
