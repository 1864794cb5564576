"""A snapshot store on a compacted Kafka topic, shared by every process that reads it.

Layout (``docs/state-store.md`` has the full story):

* One record per chunk. The record key is ``{model_id}_{layer_idx}_{prefix_hash}``
  followed by ``@{ms}.{seq}#{chunk}``, so compaction keeps every chunk of every
  live version, and a tombstone removes exactly one chunk.
* Headers on each chunk: ``version``, ``seq_id``, ``model_version``, ``dtype``,
  ``shape``, ``compression``, ``sha256`` (of the raw tensor), ``payload_bytes``,
  ``chunk`` and ``chunks``.
* A put is one transaction: all chunks, plus tombstones for versions beyond
  ``max_versions_per_key``. Readers use ``read_committed`` and index a version only
  once every chunk is in, so no reader ever sees part of a snapshot.
* All records of a key go to one partition (sha256 of the key), so their order in
  the log is the order of puts.

Beside the data topic, ``<topic>-index`` (compacted too) holds one small record per
transaction, written in that transaction: for each snapshot version it put, the
header fields and the chunk offsets (:func:`batch_value`); versions it pruned, as
empty lines. Once no version it names is live, a writer tombstones it. Records of
the older format (one per version, key ``key@version``) are still read. A store that opens reads that topic, not the values, then tails the data
topic only past the last offset the index names (records no index names, e.g. of a
writer that bypasses the store, are indexed from the data topic as before). Tensors
are fetched by offset when asked for (librdkafka, :mod:`flinkai.state.rdkafka`),
verified, and kept in a byte-bounded LRU cache with a TTL.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as RdTopicPartition

from flinkai.config import KafkaSecurityConfig
from flinkai.kafka.admin import create_topics
from flinkai.kafka.errors import KafkaError as FlinkAIKafkaError
from flinkai.kafka.probe import check_access
from flinkai.kafka.security import python_client_options
from flinkai.security import redact
from flinkai.state.base import (
    Snapshot,
    SnapshotKey,
    SnapshotMeta,
    SnapshotStore,
    Version,
    WallClockMs,
    check_expected,
    check_unique_keys,
    next_version,
    wall_clock_ms,
)
from flinkai.state.cache import ByteLRUCache, MonotonicClock
from flinkai.state.codec import CodecConfig, decode, encode
from flinkai.state.errors import (
    SnapshotCorruptError,
    SnapshotMismatchError,
    SnapshotNotFoundError,
    StoreUnavailableError,
)
from flinkai.state.rdkafka import Record, Tail, TxnProducer, rdkafka_security

__all__ = [
    "BATCH_KEY_PREFIX",
    "CONNECT_AT_ONCE",
    "RECORD_OVERHEAD_BYTES",
    "KafkaSnapshotStore",
    "KafkaStoreConfig",
    "batch_value",
    "fetcher_settings",
    "parse_batch_value",
    "parse_headers",
    "record_headers",
    "record_key",
    "split_version_line",
]

log = logging.getLogger(__name__)

#: Room left in each record for key, headers and batch framing (they take < 1 KiB).
RECORD_OVERHEAD_BYTES = 4096
#: poll timeout while catching up (see ``sync``).
_SYNC_POLL_MS = 10
#: Records between two wanted offsets read through rather than seeking again.
_MAX_SCAN_GAP = 256
#: Messages taken from librdkafka's queue per ``consume`` call.
_CONSUME_BATCH = 4096
#: Version of the index record's JSON value.
_INDEX_FORMAT = 1
#: Version of a transaction's index record (:func:`batch_value`).
_BATCH_FORMAT = 2
#: Key prefix of a transaction's index record (no snapshot key starts with it).
BATCH_KEY_PREFIX = b"~txn/"
#: One record of a transaction: key, value (None: tombstone), headers, partition.
_Record = tuple[bytes, bytes | None, list[tuple[str, bytes]], int]
#: One record of the index topic: key, value (None: tombstone), partition.
_IndexRecord = tuple[bytes, bytes | None, int]


def _runs(offsets: Sequence[int], gap: int) -> list[tuple[int, int]]:
    """Sorted ``offsets`` grouped into ``(first, last)`` runs with no hole above ``gap``."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


@dataclass(frozen=True)
class KafkaStoreConfig:
    """Where and how a :class:`KafkaSnapshotStore` keeps snapshots.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        topic: The compacted topic.
        partitions: Partitions when the store creates the topic.
        max_record_bytes: Largest record written; snapshots above it are chunked.
            The store sets the topic's ``max.message.bytes`` to this when it creates
            the topic; on an existing topic it must not exceed the topic's limit.
        codec: Payload encoding.
        max_versions_per_key: Versions kept per key; older ones are tombstoned in
            the same transaction as the put that supersedes them.
        cache_max_bytes: Byte budget of the decoded-tensor cache.
        cache_ttl_s: Age after which a cached tensor is dropped (it is fetched again
            on the next read); ``None`` for no limit.
        transactional_id: The producer's transactional id. A restarted writer that
            reuses its id fences its old self and aborts its open transaction at
            once; ``None`` picks a fresh id per store.
        transaction_timeout_s: The broker aborts a transaction open longer than this
            (a writer that died mid-put); until then ``read_committed`` readers
            cannot read past it.
        request_timeout_s: Bound on each blocking Kafka operation.
        visibility_timeout_s: How long a read of a specific version newer than any
            seen waits for it to become visible (see ``_await_version``).
        create_topic: Create the topic (compacted) if it does not exist.
        topic_configs: Extra configs for a topic the store creates.
        security: Client security (``kafka.security``) for the producer, both
            consumers and the admin client; the default is plain text.
        index_topic: Also write and read ``<topic>-index``, so a store opens without
            reading values (``False``: rebuild the index from the data topic alone).
        fetch_max_bytes: Most bytes one fetch response carries (librdkafka's
            ``fetch.max.bytes`` and ``max.partition.fetch.bytes``).
    """

    bootstrap: str
    topic: str = "flinkai-kv-snapshots"
    partitions: int = 1
    max_record_bytes: int = 1_000_000
    codec: CodecConfig = field(default_factory=CodecConfig)
    max_versions_per_key: int = 2
    cache_max_bytes: int = 512 * 1024 * 1024
    cache_ttl_s: float | None = 600.0
    transactional_id: str | None = None
    transaction_timeout_s: float = 60.0
    request_timeout_s: float = 30.0
    visibility_timeout_s: float = 2.0
    create_topic: bool = True
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)
    index_topic: bool = True
    fetch_max_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_record_bytes <= 2 * RECORD_OVERHEAD_BYTES:
            raise ValueError(
                f"max_record_bytes must exceed {2 * RECORD_OVERHEAD_BYTES}, "
                f"got {self.max_record_bytes}"
            )
        if self.max_versions_per_key < 1:
            raise ValueError(f"max_versions_per_key must be >= 1, got {self.max_versions_per_key}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")

    @property
    def index_topic_name(self) -> str:
        """The key-only index topic beside :attr:`topic`."""
        return f"{self.topic}-index"

    @property
    def chunk_bytes(self) -> int:
        """Payload bytes per record."""
        return self.max_record_bytes - RECORD_OVERHEAD_BYTES


def record_key(key: SnapshotKey, version: Version, chunk: int) -> bytes:
    """The Kafka record key of one chunk of one version."""
    return f"{key}@{version}#{chunk}".encode()


def _index_key(key: SnapshotKey, version: Version) -> bytes:
    return f"{key}@{version}".encode()


def _parse_record_key(raw: bytes) -> tuple[SnapshotKey, Version, int]:
    text = raw.decode("utf-8")
    base, sep, rest = text.rpartition("@")
    version, sep2, chunk = rest.partition("#")
    if not sep or not sep2 or not chunk.isdigit():
        raise ValueError(f"not a snapshot record key: {text!r}")
    return SnapshotKey.parse(base), Version.parse(version), int(chunk)


def record_headers(meta: SnapshotMeta, chunk: int, chunks: int) -> list[tuple[str, bytes]]:
    """The headers written on chunk ``chunk`` of ``chunks``."""
    fields = {
        "version": str(meta.version.ms),
        "seq_id": str(meta.version.seq),
        "model_version": meta.model_version,
        "dtype": meta.dtype,
        "shape": ",".join(str(n) for n in meta.shape),
        "compression": meta.compression,
        "sha256": meta.sha256,
        "payload_bytes": str(meta.payload_bytes),
        "chunk": str(chunk),
        "chunks": str(chunks),
    }
    return [(k, v.encode()) for k, v in fields.items()]


def parse_headers(headers: Iterable[tuple[str, bytes]]) -> tuple[SnapshotMeta, int, int]:
    """Read :func:`record_headers` back.

    Returns:
        The metadata, the chunk index and the chunk count.

    Raises:
        SnapshotCorruptError: A header is missing or malformed (reason ``header``).
    """
    try:
        h = {k: v.decode("utf-8") for k, v in headers}
        shape = tuple(int(n) for n in h["shape"].split(",")) if h["shape"] else ()
        meta = SnapshotMeta(
            version=Version(int(h["version"]), int(h["seq_id"])),
            model_version=h["model_version"],
            dtype=h["dtype"],
            shape=shape,
            compression=h["compression"],
            sha256=h["sha256"],
            payload_bytes=int(h["payload_bytes"]),
        )
        chunk, chunks = int(h["chunk"]), int(h["chunks"])
    except (KeyError, ValueError, UnicodeDecodeError) as e:
        raise SnapshotCorruptError("header", f"bad snapshot record headers: {e!r}") from e
    if not 0 <= chunk < chunks or any(n < 0 for n in shape) or meta.payload_bytes < 0:
        raise SnapshotCorruptError("header", f"chunk {chunk}/{chunks}, shape {shape} out of range")
    return meta, chunk, chunks


def index_value(
    meta: SnapshotMeta, partition: int, offsets: Sequence[int], span: tuple[int, int]
) -> bytes:
    """The ``<topic>-index`` record of one version: its header and where its chunks are.

    ``span`` is the first and last offset of the whole transaction's records in that
    data partition when they are contiguous (no other writer's record among them), so
    a reader tailing the data topic can skip them without reading their values.
    """
    return json.dumps(
        {
            "format": _INDEX_FORMAT,
            "model_version": meta.model_version,
            "dtype": meta.dtype,
            "shape": list(meta.shape),
            "compression": meta.compression,
            "sha256": meta.sha256,
            "payload_bytes": meta.payload_bytes,
            "offsets": list(offsets),
            # Last, and the same for every snapshot of a transaction: a reader compares
            # this tail with the previous record's instead of parsing it again.
            "partition": partition,
            "span": list(span),
        },
        separators=(",", ":"),
    ).encode()


def _parse_index_value(
    version: Version, raw: bytes
) -> tuple[SnapshotMeta, int, list[int], tuple[int, int]]:
    """Read :func:`index_value` back; :class:`SnapshotCorruptError` (``header``) if malformed."""
    try:
        v = json.loads(raw)
        meta = SnapshotMeta(
            version=version,
            model_version=str(v["model_version"]),
            dtype=str(v["dtype"]),
            shape=tuple(int(n) for n in v["shape"]),
            compression=str(v["compression"]),
            sha256=str(v["sha256"]),
            payload_bytes=int(v["payload_bytes"]),
        )
        offsets = [int(o) for o in v["offsets"]]
        first, last = (int(o) for o in v["span"])
        partition = int(v["partition"])
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise SnapshotCorruptError("header", f"bad index record: {e!r}") from e
    if not offsets or partition < 0 or first > min(offsets) or last < max(offsets):
        raise SnapshotCorruptError("header", "index record names no chunk or a bad span")
    return meta, partition, offsets, (first, last)


def batch_value(
    spans: Mapping[int, tuple[int, int]],
    entries: Sequence[tuple[bytes, bytes, bytes]],
    pruned: Sequence[bytes] = (),
) -> bytes:
    """One transaction's ``<topic>-index`` record.

    A JSON head line ``{"format": 2, "spans": {partition: [first, last]}, "pruned":
    ["key@version", ...]}``, then two lines per version put: its snapshot key, then
    its version, a tab and its :func:`index_value`. One record per put instead of one
    per snapshot, laid out so that a store opening on thousands of snapshots files
    every key with C-level splits and a ``dict.update`` (no Python per line); a key's
    JSON is parsed when that key is asked for.

    Args:
        spans: Per data partition, the transaction's contiguous offsets.
        entries: ``(key, version, index value)`` of each version put.
        pruned: ``key@version`` of each version the transaction tombstoned.

    Raises:
        ValueError: A key or version holds a newline or tab.
    """
    head = json.dumps(
        {
            "format": _BATCH_FORMAT,
            "spans": {str(p): list(s) for p, s in spans.items()},
            "pruned": [n.decode() for n in pruned],
        },
        separators=(",", ":"),
    ).encode()
    lines = [head]
    for key, version, entry in entries:
        if b"\n" in key or b"\t" in key or b"\n" in version or b"\t" in version:
            raise ValueError(f"index key {key!r}@{version!r} holds a tab or newline")
        lines += [key, version + b"\t" + entry]
    return b"\n".join(lines)


def parse_batch_value(
    raw: bytes,
) -> tuple[dict[int, tuple[int, int]], list[tuple[str, str]], list[bytes], list[bytes]]:
    """Read :func:`batch_value` back: spans, pruned ``(key, version)``, keys, version lines.

    Only the head is checked here; a version line is checked when its key is asked
    for (:func:`split_version_line`).

    Raises:
        SnapshotCorruptError: Unknown format, a malformed head, or an odd line count
            (reason ``header``).
    """
    lines = raw.split(b"\n")
    try:
        head = json.loads(lines[0])
        if not isinstance(head, dict) or head.get("format") != _BATCH_FORMAT:
            found = head.get("format") if isinstance(head, dict) else head
            raise ValueError(f"unknown index batch format {found!r}")
        spans: dict[int, tuple[int, int]] = {}
        for p, (first, last) in head["spans"].items():
            if int(p) < 0 or int(first) > int(last):
                raise ValueError(f"bad span {p}: {first}..{last}")
            spans[int(p)] = (int(first), int(last))
        pruned: list[tuple[str, str]] = []
        for name in head["pruned"]:
            base, at, version = str(name).rpartition("@")
            if not at or not base or not version:
                raise ValueError(f"bad pruned version {name!r}")
            pruned.append((base, version))
        if len(lines) % 2 != 1:
            raise ValueError("a key without its version line")
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise SnapshotCorruptError("header", f"bad index batch record: {e!r}") from e
    return spans, pruned, lines[1::2], lines[2::2]


def split_version_line(line: bytes) -> tuple[str, bytes]:
    """``(version text, index value)`` of one version line of :func:`batch_value`.

    Raises:
        SnapshotCorruptError: No tab, or a version that does not parse (``header``).
    """
    version, tab, entry = line.partition(b"\t")
    try:
        text = version.decode("utf-8")
        Version.parse(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise SnapshotCorruptError("header", f"bad index batch line: {e!r}") from e
    if not tab or not entry:
        raise SnapshotCorruptError("header", f"bad index batch line {line[:80]!r}")
    return text, entry


def _span_tail(value: bytes) -> bytes:
    """The ``"partition":..,"span":[..]}`` end of an :func:`index_value`."""
    return value[value.rfind(b'"partition":') :]


def _span_of(tail: bytes) -> tuple[int, int, int] | None:
    """``(partition, first, last)`` from :func:`_span_tail`, read without parsing JSON."""
    try:
        partition = int(tail[12 : tail.index(b",")])
        at = tail.index(b'"span":[')
        first, last = (int(n) for n in tail[at + 8 : tail.index(b"]", at)].split(b","))
    except ValueError:
        return None
    return partition, first, last


def _spans(records: Sequence[_Record], offsets: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Per data partition, the first and last offset of ``records`` if they are contiguous."""
    by_partition: dict[int, list[int]] = {}
    for (_, _, _, partition), offset in zip(records, offsets, strict=True):
        by_partition.setdefault(partition, []).append(offset)
    out: dict[int, tuple[int, int]] = {}
    for partition, own in by_partition.items():
        if max(own) - min(own) == len(own) - 1:
            out[partition] = (min(own), max(own))
    return out


@dataclass
class _Entry:
    """One version in the index: its header and where its chunks are."""

    meta: SnapshotMeta
    partition: int
    chunks: int
    offsets: dict[int, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.offsets) == self.chunks


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the index is filed at open.

    Filing 20,000 keys allocates 20,000 small tuples; in a fresh process that set off
    a full collection, which took 45-75 of the 60-90 ms the filing cost (15 ms with
    collection paused, on a loaded 2-core machine). Nothing filed forms a cycle, so
    pausing loses nothing; the previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _partition_of(key: SnapshotKey, partitions: int) -> int:
    digest = hashlib.sha256(str(key).encode()).digest()
    return int.from_bytes(digest[:4], "big") % partitions


#: librdkafka holds back the connection to a broker it has just learned of (sparse
#: connections, suppressed for up to ``reconnect.backoff.ms``): a new reader's first
#: fetch waited about 50 ms for it. The store's readers connect to the brokers the
#: metadata names at once instead (a plain consumer's first read of a 6.4 MB index:
#: 93-95 ms before, 44-52 ms after).
CONNECT_AT_ONCE: dict[str, Any] = {"enable.sparse.connections": False}


def fetcher_settings(c: KafkaStoreConfig) -> dict[str, Any]:
    """librdkafka settings of the consumer that reads snapshot values by offset.

    The bench's raw-fetch baseline uses them too, so the two read alike.
    """
    fetch = max(c.fetch_max_bytes, c.max_record_bytes)
    return {
        "bootstrap.servers": c.bootstrap,
        **rdkafka_security(c.security),
        "client.id": "flinkai-state-fetch",
        **CONNECT_AT_ONCE,
        # Required by the client; never joined: partitions are assigned.
        "group.id": f"flinkai-state-fetch-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.max.bytes": fetch,
        "max.partition.fetch.bytes": fetch,
        "receive.message.max.bytes": fetch + 1024 * 1024,
        "fetch.wait.max.ms": 10,
        "queued.max.messages.kbytes": max(65536, 2 * fetch // 1024),
        "socket.timeout.ms": int(c.request_timeout_s * 1000),
    }


class KafkaSnapshotStore(SnapshotStore):
    """Snapshots on a compacted Kafka topic; see the module docstring for the format.

    Every read first catches up with the topic (to its last stable offset), so a
    snapshot another process committed before the read began is found.

    Args:
        config: Topic, sizes, cache and timeouts.
        clock_ms: Wall clock for versions.
        monotonic: Clock for the cache TTL.

    Raises:
        StoreUnavailableError: The broker did not answer, or the topic cannot be read.
    """

    def __init__(
        self,
        config: KafkaStoreConfig,
        *,
        clock_ms: WallClockMs = wall_clock_ms,
        monotonic: MonotonicClock = time.monotonic,
    ) -> None:
        super().__init__()
        self.config = config
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._cache: ByteLRUCache[tuple[SnapshotKey, Version], np.ndarray] = ByteLRUCache(
            config.cache_max_bytes, config.cache_ttl_s, monotonic
        )
        self.stats.evicted = self._cache.evicted
        self._index: dict[SnapshotKey, dict[Version, _Entry]] = {}
        self._pending: dict[tuple[SnapshotKey, Version], _Entry] = {}
        self._high: dict[SnapshotKey, Version] = {}
        # Index-topic records not parsed yet, by key text then version text: a store
        # opened on a topic of thousands of snapshots parses only the keys it is asked
        # for (parsing every record cost ~0.1 ms each on a busy 2-core machine).
        self._raw: dict[str, dict[str, bytes]] = {}
        # Newest tombstoned version of keys not parsed yet (versions never repeat).
        self._raw_high: dict[str, Version] = {}
        self._last_span_tail = b""
        # Transaction index records: which one names each live version (key text,
        # version text), and how many live versions each still names; a writer
        # tombstones a transaction's record once it names none, so compaction drops it.
        self._batch_of: dict[tuple[str, str], bytes] = {}
        self._batch_live: dict[bytes, int] = {}
        # Version lines of transaction records not filed yet, by key bytes, each with
        # the name of its record (the newest seen; older ones of the same key in
        # ``_lines_more``). One dict update per record files them all.
        self._lines: dict[bytes, tuple[bytes, bytes]] = {}
        self._lines_more: dict[bytes, list[tuple[bytes, bytes]]] = {}
        # Key text -> key, for keys already parsed.
        self._parsed: dict[str, SnapshotKey] = {}
        # Payloads fetched in one scan by get_many, consumed by _tensor.
        self._prefetched: dict[tuple[SnapshotKey, Version], bytes] = {}
        self._producer: TxnProducer | None = None
        self._consumer: Tail | None = None
        self._index_reader: Tail | None = None
        self._fetcher: RdConsumer | None = None
        # Per data partition: first -> last offset of transactions the index topic
        # named, so the data tail seeks past them instead of reading their values.
        self._covered: dict[int, dict[int, int]] = {}
        # Per data partition: where the tail last sought to, past a run it skipped
        # (the offset of that run's commit marker).
        self._sought: dict[int, int] = {}
        self._index_partitions: list[int] = []
        #: Data-topic records read while indexing (values included): none when the
        #: index topic describes everything, e.g. at open.
        self.tail_records = 0
        self._closed = False
        self._check_access()
        try:
            if config.create_topic:
                self._create_topic()
            self._consumer = self._new_tail(config.topic)
            self._fetcher = self._new_fetcher()
            if config.index_topic:
                self._index_reader = self._new_tail(config.index_topic_name)
            self._partitions, self._index_partitions = self._connect()
            if self._index_reader is not None:
                if self._index_partitions:
                    self._index_reader.assign(dict.fromkeys(self._index_partitions))
                    with _gc_paused():
                        self._read(self._index_reader, self._apply_index)
                else:
                    log.warning(
                        "no index topic %r: opening %r reads every value",
                        config.index_topic_name,
                        config.topic,
                    )
            starts: dict[int, int | None] = {}
            for p in self._partitions:
                # Past the last transaction the index named; what follows is read whole.
                covered = self._covered.pop(p, None)
                starts[p] = max(covered.values()) + 1 if covered else None
            self._consumer.assign(starts)
            # The index was read a moment ago: catching up the data tail is enough here
            # (a transaction committed since is read whole from it, values included).
            self._read(self._consumer, self._apply, self._skip_covered)
        except BaseException:
            self._close_clients()
            raise

    # -- public API -------------------------------------------------------------

    def put(self, key: SnapshotKey, tensor: np.ndarray, *, model_version: str) -> Version:
        """See :meth:`SnapshotStore.put`; one Kafka transaction.

        Raises:
            StoreUnavailableError: The transaction did not commit; nothing of it is visible.
        """
        return self.put_many([(key, tensor)], model_version=model_version)[0]

    def put_many(
        self, items: Sequence[tuple[SnapshotKey, np.ndarray]], *, model_version: str
    ) -> list[Version]:
        """See :meth:`SnapshotStore.put_many`; all of them in one Kafka transaction.

        A reader sees every snapshot of the call or none, and one commit (about
        40 ms on loopback) is paid once, not per snapshot.

        Raises:
            StoreUnavailableError: The transaction did not commit; nothing of it is visible.
            ValueError: A key appears twice.
        """
        check_unique_keys(items)
        with self._lock:
            self.sync()
            size = self.config.chunk_bytes
            planned = []
            records: list[_Record] = []

            def encoded() -> Iterator[_Record]:
                # Encoded one snapshot at a time inside the open transaction, so the
                # producer's I/O thread sends snapshot i while snapshot i + 1 is
                # compressed (zstd and sha256 release the GIL).
                for key, tensor in items:
                    self._materialize(key)
                    version = next_version(self._high.get(key), self._clock_ms())
                    meta, payload = encode(
                        tensor, self.config.codec, version=version, model_version=model_version
                    )
                    # librdkafka takes bytes (it copies them into its queue); a
                    # snapshot of one chunk goes as it is, without a slice.
                    if len(payload) <= size:
                        chunks = [payload]
                    else:
                        chunks = [payload[i : i + size] for i in range(0, len(payload), size)]
                    partition = _partition_of(key, len(self._partitions))
                    kept = sorted(self._index.get(key, {}))
                    pruned = kept[: max(0, len(kept) - (self.config.max_versions_per_key - 1))]
                    planned.append(
                        (key, tensor, version, meta, len(chunks), partition, pruned, len(records))
                    )
                    new: list[_Record] = [
                        (
                            record_key(key, version, i),
                            c,
                            record_headers(meta, i, len(chunks)),
                            partition,
                        )
                        for i, c in enumerate(chunks)
                    ]
                    new += [
                        (record_key(key, v, i), None, [], partition)
                        for v in pruned
                        for i in range(self._index[key][v].chunks)
                    ]
                    records.extend(new)
                    yield from new

            batch_key = BATCH_KEY_PREFIX + uuid.uuid4().hex.encode()

            def index_records(offsets: Sequence[int]) -> list[_IndexRecord]:
                spans = _spans(records, offsets)
                entries: list[tuple[bytes, bytes, bytes]] = []
                doomed: list[tuple[SnapshotKey, Version]] = []
                for key, _, version, meta, n, partition, pruned, first in planned:
                    own = list(offsets[first : first + n])
                    span = spans.get(partition, (min(own), max(own)))
                    entries.append(
                        (
                            str(key).encode(),
                            str(version).encode(),
                            index_value(meta, partition, own, span),
                        )
                    )
                    doomed += [(key, v) for v in pruned]
                first_partition = planned[0][5] if planned else 0
                value = batch_value(spans, entries, [_index_key(k, v) for k, v in doomed])
                out: list[_IndexRecord] = [(batch_key, value, first_partition)]
                out += [(b, None, first_partition) for b in self._emptied(doomed)]
                return out

            offsets = self._transaction(encoded(), index_records)
            self._skip_own(records, offsets)
            self._batch_live[batch_key] = len(planned)
            for key, _, version, *_ in planned:
                self._batch_of[(str(key), str(version))] = batch_key
            versions = []
            for key, tensor, version, meta, n, partition, pruned, first in planned:
                entry = _Entry(meta, partition, n, dict(enumerate(offsets[first : first + n])))
                self._high[key] = version
                for v in pruned:
                    self._forget(key, v)
                self._index.setdefault(key, {})[version] = entry
                copy = np.array(tensor, copy=True, order="C")
                copy.flags.writeable = False
                self._cache.put((key, version), copy, copy.nbytes)
                self.stats.puts += 1
                versions.append(version)
            return versions

    def get_many(
        self,
        keys: Sequence[SnapshotKey],
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> list[Snapshot | None]:
        """See :meth:`SnapshotStore.get_many`: one catch-up, one scan for uncached tensors.

        The newest version of each key that is not cached and whose header matches
        is fetched up front (:meth:`_fetch_many`); verification, fallback to older
        versions and counting then run exactly as in :meth:`get`.
        """
        with self._lock:
            self.sync()
            for k in keys:
                self._materialize(k)
            candidates = {k: sorted(self._index.get(k, {})) for k in keys}
            wanted: list[tuple[SnapshotKey, _Entry]] = []
            for key, versions in candidates.items():
                if not versions:
                    continue
                entry = self._index[key][versions[-1]]
                try:
                    check_expected(
                        entry.meta, model_version=model_version, dtype=dtype, shape=shape
                    )
                except SnapshotMismatchError:
                    continue  # counted when get_version sees it
                if self._cache.get((key, entry.meta.version)) is None:
                    wanted.append((key, entry))
            try:
                self._prefetched = self._fetch_many(wanted)
                return [
                    self._newest(
                        k, candidates[k], model_version=model_version, dtype=dtype, shape=shape
                    )
                    for k in keys
                ]
            finally:
                self._prefetched = {}

    def versions(self, key: SnapshotKey) -> list[Version]:
        """See :meth:`SnapshotStore.versions`; catches up with the topic first."""
        with self._lock:
            self.sync()
            self._materialize(key)
            return sorted(self._index.get(key, {}))

    def delete(self, key: SnapshotKey, version: Version | None = None) -> int:
        """See :meth:`SnapshotStore.delete`; tombstones every chunk in one transaction.

        Raises:
            StoreUnavailableError: The transaction did not commit; nothing was deleted.
        """
        with self._lock:
            self.sync()
            self._materialize(key)
            entries = self._index.get(key, {})
            doomed = [v for v in entries if version is None or v == version]
            if not doomed:
                return 0
            partition = _partition_of(key, len(self._partitions))
            tombstones: list[_IndexRecord] = [(_index_key(key, v), None, partition) for v in doomed]
            tombstones += [(b, None, partition) for b in self._emptied([(key, v) for v in doomed])]
            self._transaction(
                [
                    (record_key(key, v, i), None, [], partition)
                    for v in doomed
                    for i in range(entries[v].chunks)
                ],
                lambda _: tombstones,
            )
            for v in doomed:
                self._forget(key, v)
            return len(doomed)

    def sync(self) -> None:
        """Read the index topic, then the data topic, up to their last stable offsets.

        Raises:
            StoreUnavailableError: The broker did not answer within ``request_timeout_s``.
        """
        with self._lock:
            if self._index_reader is not None and self._index_partitions:
                self._read(self._index_reader, self._apply_index)
            assert self._consumer is not None
            self._read(self._consumer, self._apply, self._skip_covered)

    def _read(
        self,
        tail: Tail,
        apply: Callable[[Record], None],
        before_poll: Callable[[], None] | None = None,
    ) -> None:
        """``tail`` up to its end, within ``request_timeout_s``."""
        timeout_s = self.config.request_timeout_s
        try:
            tail.read_to_end(apply, time.monotonic() + timeout_s, before_poll)
        except StoreUnavailableError as e:
            raise StoreUnavailableError(
                f"{e} on {self.config.bootstrap} (within {timeout_s:g}s)"
            ) from None
        except KafkaException as e:
            raise StoreUnavailableError(
                f"reading {tail.topic!r} on {self.config.bootstrap} failed: {e}"
            ) from e

    def _skip_covered(self) -> None:
        """Seek the data tail past transactions the index topic already described."""
        tail = self._consumer
        assert tail is not None
        for p in self._partitions:
            covered = self._covered.get(p)
            if not covered:
                continue
            position = tail.position(p)
            moved = position
            at_marker = self._sought.get(p) == position
            while True:
                # A committed transaction's span is followed by its commit marker: past
                # a span (ours, or one skipped here), a span one offset later follows on.
                last = covered.pop(moved, None)
                if last is None and (moved > position or at_marker):
                    last = covered.pop(moved + 1, None)
                if last is None:
                    break
                moved = last + 1
            for first in [f for f in covered if f < moved]:
                del covered[first]
            if moved != position and tail.seek(p, moved):
                self._sought[p] = moved

    def close(self) -> None:
        """Close the Kafka clients; the store is unusable afterwards."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_clients()
                self._cache.clear()

    # -- read hooks -------------------------------------------------------------

    def _meta(self, key: SnapshotKey, version: Version) -> SnapshotMeta:
        with self._lock:
            self._materialize(key)
            entry = self._index.get(key, {}).get(version)
            if entry is None:
                entry = self._await_version(key, version)
            if entry is None:
                raise SnapshotNotFoundError(
                    f"no version {version} of {key} in {self.config.topic!r}"
                )
            return entry.meta

    def _tensor(self, key: SnapshotKey, meta: SnapshotMeta) -> np.ndarray:
        with self._lock:
            cached = self._cache.get((key, meta.version))
            if cached is not None:
                return cached
            entry = self._index.get(key, {}).get(meta.version)
            if entry is None:
                raise SnapshotNotFoundError(f"version {meta.version} of {key} was deleted")
            payload = self._prefetched.pop((key, meta.version), None)
            if payload is None:
                payload = self._fetch(key, entry)
            tensor = decode(payload, entry.meta)
            self._cache.put((key, meta.version), tensor, tensor.nbytes)
            return tensor

    # -- internals --------------------------------------------------------------

    def _await_version(self, key: SnapshotKey, version: Version) -> _Entry | None:
        """Catch up until ``version`` shows, if it is newer than any version seen.

        A put returns once its transaction is committed, but the broker writes the
        commit markers a few milliseconds later, and ``read_committed`` readers see
        nothing before them. A version newer than all seen was most likely just
        committed elsewhere, so it is worth ``visibility_timeout_s`` of waiting.
        """
        deadline = time.monotonic() + self.config.visibility_timeout_s
        while True:
            self.sync()
            self._materialize(key)
            entry = self._index.get(key, {}).get(version)
            if entry is not None or version <= self._high.get(key, Version(-1)):
                return entry
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _apply(self, record: Any) -> None:
        """Fold one committed record into the index."""
        self.tail_records += 1
        try:
            key, version, chunk = _parse_record_key(record.key or b"")
        except ValueError as e:
            log.warning("skipping record at offset %d of %r: %s", record.offset, record.topic, e)
            self.stats.rejected["header"] += 1
            return
        self._materialize(key)
        if version > self._high.get(key, Version(-1)):
            self._high[key] = version
        if record.value is None:
            self._forget(key, version)
            return
        try:
            meta, index, chunks = parse_headers(record.headers or [])
        except SnapshotCorruptError as e:
            log.warning("skipping %s at offset %d: %s", key, record.offset, e)
            self.stats.rejected[e.reason] += 1
            return
        if meta.version != version or index != chunk:
            self.stats.rejected["header"] += 1
            return
        known = self._index.get(key, {}).get(version)
        if known is not None and known.meta == meta:
            # Our own put, seen again through the topic.
            return
        pending = self._pending.get((key, version))
        if pending is None or pending.meta != meta or pending.chunks != chunks:
            pending = _Entry(meta, record.partition, chunks)
            self._pending[(key, version)] = pending
        pending.offsets[index] = record.offset
        if pending.complete:
            del self._pending[(key, version)]
            self._cache.discard((key, version))
            self._index.setdefault(key, {})[version] = pending

    def _apply_index(self, record: Any) -> None:
        """Keep one committed record of the index topic, unparsed until its key is asked for.

        Only the span it covers in the data topic is read now (the data tail needs it).
        """
        try:
            text = (record.key or b"").decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if text.startswith(BATCH_KEY_PREFIX.decode()):
            self._apply_batch(record.key, record.value, record.offset)
            return
        base, sep, version_text = text.rpartition("@")
        if not sep:
            log.warning("skipping index record at offset %d: key %r", record.offset, text)
            self.stats.rejected["header"] += 1
            return
        value = record.value
        if value is None:
            self._index_tombstone(base, version_text)
            return
        self._raw.setdefault(base, {})[version_text] = value
        tail = _span_tail(value)
        if tail == self._last_span_tail:
            return  # the same transaction as the previous record: already covered
        self._last_span_tail = tail
        span = _span_of(tail)
        if span is not None:
            partition, first, last = span
            covered = self._covered.setdefault(partition, {})
            covered[first] = max(last, covered.get(first, last))

    def _apply_batch(self, name: bytes, value: bytes | None, offset: int) -> None:
        """File one transaction's index record: its spans now, its lines by key, raw."""
        if value is None:
            self._batch_live.pop(name, None)
            return
        try:
            spans, pruned, keys, lines = parse_batch_value(value)
        except SnapshotCorruptError as e:
            # Its snapshots are not served from the index (a data-tail read may still
            # find them if they lie past the last span).
            log.warning("skipping index record at offset %d (%r): %s", offset, name, e)
            self.stats.rejected[e.reason] += 1
            return
        filed = self._lines
        # A key met again (a newer version of it) keeps the older line too; rare, so
        # per key. Everything else is C: a set intersection and two dict updates.
        for key in filed.keys() & keys:
            self._lines_more.setdefault(key, []).append(filed.pop(key))
        filed.update(zip(keys, zip(lines, itertools.repeat(name)), strict=True))
        if lines:
            self._batch_live[name] = len(lines)
        for base, version_text in pruned:
            self._index_tombstone(base, version_text)
        for partition, (first, last) in spans.items():
            covered = self._covered.setdefault(partition, {})
            covered[first] = max(last, covered.get(first, last))

    def _file_lines(self, base: str) -> None:
        """Move ``base``'s version lines of transaction records into ``_raw``."""
        key = base.encode()
        newest = self._lines.pop(key, None)
        if newest is None:
            return
        for line, batch in [*self._lines_more.pop(key, []), newest]:
            try:
                version_text, entry = split_version_line(line)
            except SnapshotCorruptError as e:
                log.warning("skipping index line of %s: %s", base, e)
                self.stats.rejected[e.reason] += 1
                self._batch_live[batch] = self._batch_live.get(batch, 1) - 1
                continue
            self._raw.setdefault(base, {})[version_text] = entry
            self._batch_of[(base, version_text)] = batch

    def _index_tombstone(self, base: str, version_text: str) -> None:
        """A version tombstoned in the index topic (a record, or a transaction's line)."""
        self._file_lines(base)
        self._raw.get(base, {}).pop(version_text, None)
        self._unname(base, version_text)
        try:
            version = Version.parse(version_text)
        except ValueError:
            self.stats.rejected["header"] += 1
            return
        parsed = self._parsed.get(base)
        if parsed is not None:
            self._forget(parsed, version)
            if version > self._high.get(parsed, Version(-1)):
                self._high[parsed] = version
        elif version > self._raw_high.get(base, Version(-1)):
            self._raw_high[base] = version

    def _materialize(self, key: SnapshotKey) -> None:
        """Parse the index-topic records of ``key`` kept raw so far into the index."""
        text = str(key)
        self._parsed[text] = key
        self._file_lines(text)
        high = self._raw_high.pop(text, None)
        if high is not None and high > self._high.get(key, Version(-1)):
            self._high[key] = high
        raw = self._raw.pop(text, None)
        if not raw:
            return
        for version_text, value in raw.items():
            try:
                version = Version.parse(version_text)
                meta, partition, offsets, _ = _parse_index_value(version, value)
            except ValueError as e:
                log.warning("skipping index record %s@%s: %s", key, version_text, e)
                self.stats.rejected["header"] += 1
                continue
            except SnapshotCorruptError as e:
                log.warning("skipping index record of %s: %s", key, e)
                self.stats.rejected[e.reason] += 1
                continue
            if version > self._high.get(key, Version(-1)):
                self._high[key] = version
            known = self._index.get(key, {}).get(version)
            if known is not None and known.meta == meta:
                continue
            self._pending.pop((key, version), None)
            self._cache.discard((key, version))
            entry = _Entry(meta, partition, len(offsets), dict(enumerate(offsets)))
            self._index.setdefault(key, {})[version] = entry

    def snapshot_keys(self) -> list[SnapshotKey]:
        """Every key with at least one stored version (parses the whole index)."""
        with self._lock:
            self.sync()
            for line_key in list(self._lines):
                self._file_lines(line_key.decode("utf-8", "replace"))
            for text in list(self._raw):
                try:
                    key = SnapshotKey.parse(text)
                except ValueError:
                    self._raw.pop(text)
                    self.stats.rejected["header"] += 1
                    continue
                self._materialize(key)
            return [k for k, versions in self._index.items() if versions]

    def _skip_own(self, records: Sequence[_Record], offsets: Sequence[int]) -> None:
        """Move the index reader past this store's own committed records.

        The index already holds them, and reading them back would fetch every
        value again (a put_many of a long prompt is tens of MB). Only done in a
        partition where they sit right at the reader's position with no gap, so no
        record of another writer is skipped; otherwise they are read as usual.
        """
        by_partition: dict[int, list[int]] = {}
        for (_, _, _, partition), offset in zip(records, offsets, strict=True):
            by_partition.setdefault(partition, []).append(offset)
        tail = self._consumer
        assert tail is not None
        for partition, own in by_partition.items():
            own.sort()
            position = tail.position(partition)
            # The commit marker after them is skipped by the reader as usual.
            contiguous = own[0] == position and own[-1] - own[0] == len(own) - 1
            if contiguous and tail.seek(partition, own[-1] + 1):
                self._sought[partition] = own[-1] + 1

    def _emptied(self, doomed: Sequence[tuple[SnapshotKey, Version]]) -> list[bytes]:
        """Transaction index records that name no live version once ``doomed`` are gone."""
        gone: dict[bytes, int] = {}
        for key, version in doomed:
            batch = self._batch_of.get((str(key), str(version)))
            if batch is not None:
                gone[batch] = gone.get(batch, 0) + 1
        return [b for b, n in gone.items() if n >= self._batch_live.get(b, 0) > 0]

    def _unname(self, key_text: str, version_text: str) -> None:
        """A version is gone: its transaction index record names one live version less."""
        batch = self._batch_of.pop((key_text, version_text), None)
        if batch is not None and batch in self._batch_live:
            self._batch_live[batch] -= 1
            if self._batch_live[batch] <= 0:
                del self._batch_live[batch]

    def _forget(self, key: SnapshotKey, version: Version) -> None:
        self._unname(str(key), str(version))
        self._pending.pop((key, version), None)
        self._cache.discard((key, version))
        versions = self._index.get(key)
        if versions is not None:
            versions.pop(version, None)
            if not versions:
                del self._index[key]

    def _fetch(self, key: SnapshotKey, entry: _Entry) -> bytes:
        """The payload of ``entry``, read back by offset."""
        payload = self._fetch_many([(key, entry)]).get((key, entry.meta.version))
        if payload is None:
            # Compacted away after a tombstone the index has not read yet.
            raise SnapshotNotFoundError(f"chunks of {key} version {entry.meta.version} are gone")
        return payload

    def _fetch_many(
        self, wanted: Sequence[tuple[SnapshotKey, _Entry]]
    ) -> dict[tuple[SnapshotKey, Version], bytes]:
        """Payloads of several entries, read in as few sequential scans as possible.

        Snapshots written by one ``put_many`` sit next to each other in the log, so
        a prefix restore is one seek and one read per partition instead of one round
        trip per snapshot; all partitions are fetched at once. Offsets further apart
        than ``_MAX_SCAN_GAP`` start a new scan. An entry whose chunks are gone is
        left out (``_tensor`` then fetches it alone and reports it).
        """
        by_partition: dict[int, dict[int, tuple[int, int]]] = {}
        for n, (_, entry) in enumerate(wanted):
            for chunk, offset in entry.offsets.items():
                by_partition.setdefault(entry.partition, {})[offset] = (n, chunk)
        if not by_partition:
            return {}
        parts: dict[int, dict[int, bytes]] = {}
        runs = {p: _runs(sorted(index), _MAX_SCAN_GAP) for p, index in by_partition.items()}
        current = {p: 0 for p in runs}
        topic = self.config.topic
        timeout_s = self.config.request_timeout_s
        deadline = time.monotonic() + timeout_s
        fetcher = self._fetcher
        assert fetcher is not None
        try:
            fetcher.assign([RdTopicPartition(topic, p, runs[p][0][0]) for p in runs])
            while current:
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"fetching {len(wanted)} snapshots did not finish within {timeout_s:g}s"
                    )
                for message in fetcher.consume(_CONSUME_BATCH, 0.05):
                    partition = message.partition()
                    if partition is None or partition not in current:
                        continue
                    p = partition
                    error = message.error()
                    first, last = runs[p][current[p]]
                    at = message.offset()
                    if error is not None:
                        if error.code() != RdKafkaError._PARTITION_EOF:
                            raise KafkaException(error)
                        if at is not None and at > last:
                            # The end is past the run: chunks still missing were
                            # compacted away.
                            del current[p]
                        # Else the run is not visible yet (its commit marker is a few
                        # ms behind the index record): keep waiting.
                        continue
                    if at is None or at < first:
                        continue  # left over from before a seek
                    hit = by_partition[p].get(at)
                    value = message.value()
                    if hit is not None and value is not None:
                        parts.setdefault(hit[0], {})[hit[1]] = value
                    if at >= last:
                        current[p] += 1
                        if current[p] == len(runs[p]):
                            del current[p]
                        else:
                            fetcher.seek(RdTopicPartition(topic, p, runs[p][current[p]][0]))
        except KafkaException as e:
            raise StoreUnavailableError(f"fetching from {topic!r}: {e}") from e
        finally:
            try:
                fetcher.unassign()
            except KafkaException:
                log.debug("unassigning the fetcher", exc_info=True)
        out: dict[tuple[SnapshotKey, Version], bytes] = {}
        for n, (key, entry) in enumerate(wanted):
            got = parts.get(n, {})
            if len(got) == entry.chunks:
                payload = (
                    got[0] if entry.chunks == 1 else b"".join(got[i] for i in range(entry.chunks))
                )
                self.stats.fetched_bytes += len(payload)
                out[(key, entry.meta.version)] = payload
        return out

    def _transaction(
        self,
        records: Iterable[_Record],
        index_of: Callable[[Sequence[int]], list[_IndexRecord]] | None = None,
    ) -> list[int]:
        """Write ``records`` (key, value, headers, partition) as one transaction; their offsets.

        ``records`` may be a generator that encodes as it goes. Once they are
        acknowledged, ``index_of(offsets)`` gives the index topic's records, written in
        the same transaction. On a Kafka failure the producer is dropped (a new one
        fences it on the next write) and :class:`StoreUnavailableError` is raised. Any
        other error (from the generator) aborts the transaction and propagates.
        """
        timeout_s = self.config.request_timeout_s
        producer = self._writer()
        try:
            producer.begin_transaction()
            deliveries = [producer.send(self.config.topic, k, v, h, p) for k, v, h, p in records]
            producer.flush(timeout=timeout_s)
            offsets = [d.offset() for d in deliveries]
            if index_of is not None and self._index_partitions:
                n = len(self._index_partitions)
                index_topic = self.config.index_topic_name
                for k, v, p in index_of(offsets):
                    producer.send(index_topic, k, v, None, p % n)
                producer.flush(timeout=timeout_s)
            producer.commit_transaction(timeout_s)
        except (KafkaException, StoreUnavailableError) as e:
            self._drop_producer()
            raise StoreUnavailableError(
                f"writing to {self.config.topic!r} on {self.config.bootstrap} failed; the "
                f"transaction is not committed: {type(e).__name__}: {e}"
            ) from e
        except BaseException:
            self._abort(producer)
            raise
        return offsets

    def _abort(self, producer: TxnProducer) -> None:
        """Abort the open transaction, so readers are not held back until it times out."""
        try:
            producer.abort_transaction(self.config.request_timeout_s)
        except KafkaException:
            log.warning("aborting a failed put did not finish; dropping the producer")
            self._drop_producer()

    def _client_options(self) -> dict[str, Any]:
        """kafka-python security arguments, from the one ``kafka.security`` mapping."""
        return python_client_options(self.config.security)

    def _check_access(self) -> None:
        """Fail fast and clearly when the broker is down or refuses the TLS or SASL login.

        kafka-python reports an unreachable broker, a rejected password or an
        untrusted certificate only as a timeout after ``request_timeout_s``; the
        step-by-step probe (TCP, then TLS and SASL when configured) names the step,
        the listener and the mechanism, never the secret.
        """
        try:
            check_access(
                self.config.bootstrap,
                self.config.security,
                min(self.config.request_timeout_s, 10.0),
            )
        except FlinkAIKafkaError as e:
            raise StoreUnavailableError(
                redact(f"snapshot store {self.config.topic!r}: {e}")
            ) from None

    def _writer(self) -> TxnProducer:
        if self._producer is not None:
            return self._producer
        c = self.config
        timeout_ms = int(c.request_timeout_s * 1000)
        try:
            producer = TxnProducer(
                {
                    "bootstrap.servers": c.bootstrap,
                    **rdkafka_security(c.security),
                    "client.id": "flinkai-state-writer",
                    "transactional.id": c.transactional_id or f"flinkai-state-{uuid.uuid4().hex}",
                    "enable.idempotence": True,
                    "acks": "all",
                    # One batch per request fills it with chunks; batches must stay
                    # under the topic's max.message.bytes, which is max_record_bytes.
                    "message.max.bytes": max(c.max_record_bytes, 1_000_000),
                    "batch.size": c.max_record_bytes,
                    "linger.ms": 2,
                    "compression.type": "none",
                    "transaction.timeout.ms": int(c.transaction_timeout_s * 1000),
                    "request.timeout.ms": timeout_ms,
                    # librdkafka refuses a message timeout above the transaction's.
                    "message.timeout.ms": min(
                        timeout_ms + 1000, int(c.transaction_timeout_s * 1000)
                    ),
                    "socket.timeout.ms": timeout_ms,
                },
                c.request_timeout_s,
            )
        except (KafkaException, StoreUnavailableError) as e:
            raise StoreUnavailableError(
                f"cannot start a transactional producer on {c.bootstrap}: {e}"
            ) from e
        self._producer = producer
        return producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.purge()

    def _new_tail(self, topic: str) -> Tail:
        """A reader of the small records: the index topic, data records no index names."""
        c = self.config
        try:
            return Tail(
                {
                    "bootstrap.servers": c.bootstrap,
                    **rdkafka_security(c.security),
                    "client.id": "flinkai-state-tail",
                    **CONNECT_AT_ONCE,
                    "fetch.max.bytes": max(c.fetch_max_bytes, c.max_record_bytes),
                    "max.partition.fetch.bytes": max(16 * 1024 * 1024, c.max_record_bytes),
                    "socket.timeout.ms": int(c.request_timeout_s * 1000),
                },
                topic,
                c.request_timeout_s,
            )
        except KafkaException as e:
            raise StoreUnavailableError(f"cannot reach Kafka at {c.bootstrap}: {e}") from e

    def _new_fetcher(self) -> RdConsumer:
        """The librdkafka consumer that reads snapshot values by offset."""
        c = self.config
        try:
            return RdConsumer(fetcher_settings(c))
        except KafkaException as e:
            raise StoreUnavailableError(f"cannot reach Kafka at {c.bootstrap}: {e}") from e

    def _create_topic(self) -> None:
        c = self.config
        configs = {
            "cleanup.policy": "compact",
            "max.message.bytes": str(c.max_record_bytes),
            **c.topic_configs,
        }
        topics = [c.topic, c.index_topic_name] if c.index_topic else [c.topic]
        try:
            create_topics(
                c.bootstrap,
                topics,
                c.partitions,
                configs=configs,
                timeout_s=c.request_timeout_s,
                security=c.security,
            )
        except FlinkAIKafkaError as e:
            raise StoreUnavailableError(str(e)) from e

    def _connect(self) -> tuple[list[int], list[int]]:
        """The data and index topics' partitions, with every client connected.

        librdkafka connects a client on its first request, and on a busy machine that
        first round trip took 30-100 ms per client. The three clients make theirs at
        once (the calls release the GIL), so opening waits for one, not three; the
        fetcher's answer is discarded, it only warms its connection for the first get.
        """
        assert self._consumer is not None and self._fetcher is not None
        data_tail, index_tail, fetcher = self._consumer, self._index_reader, self._fetcher
        with ThreadPoolExecutor(3, thread_name_prefix="flinkai-state-open") as pool:
            data = pool.submit(self._topic_partitions, data_tail, required=True)
            index = (
                pool.submit(self._topic_partitions, index_tail, required=False)
                if index_tail is not None
                else None
            )
            warm = pool.submit(
                fetcher.list_topics, self.config.topic, self.config.request_timeout_s
            )
            partitions = data.result()
            index_partitions = index.result() if index is not None else []
            try:
                warm.result()
            except KafkaException:
                log.debug("warming the fetcher's connection failed", exc_info=True)
        return partitions, index_partitions

    def _topic_partitions(self, tail: Tail, *, required: bool) -> list[int]:
        """The tail's topic's partitions; ``[]`` for a missing topic not ``required``."""
        deadline = time.monotonic() + (self.config.request_timeout_s if required else 2.0)
        while True:
            try:
                ids = tail.partitions()
            except KafkaException as e:
                raise StoreUnavailableError(
                    f"cannot reach Kafka at {self.config.bootstrap}: {e}"
                ) from e
            if ids:
                return ids
            if time.monotonic() >= deadline:
                if not required:
                    return []
                raise StoreUnavailableError(
                    f"topic {tail.topic!r} not found on {self.config.bootstrap}"
                )
            time.sleep(0.05)

    def _close_clients(self) -> None:
        self._drop_producer()
        for tail in (self._consumer, self._index_reader):
            if tail is not None:
                tail.close()
        if self._fetcher is not None:
            try:
                self._fetcher.close()
            except (KafkaException, RuntimeError):
                log.debug("closing the fetcher", exc_info=True)
