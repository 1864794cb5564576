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

Each store tails the topic from the start into an index of versions (metadata and
chunk offsets only). Tensors are fetched by offset when asked for, verified,
and kept in a byte-bounded LRU cache with a TTL.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kafka.errors as kerrors
import numpy as np
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

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

__all__ = [
    "RECORD_OVERHEAD_BYTES",
    "KafkaSnapshotStore",
    "KafkaStoreConfig",
    "parse_headers",
    "record_headers",
    "record_key",
]

log = logging.getLogger(__name__)

#: Room left in each record for key, headers and batch framing (they take < 1 KiB).
RECORD_OVERHEAD_BYTES = 4096
#: poll timeout while catching up (see ``sync``).
_SYNC_POLL_MS = 10
#: Records between two wanted offsets read through rather than seeking again.
_MAX_SCAN_GAP = 256
_T = TypeVar("_T")
#: One record of a transaction: key, value (None: tombstone), headers, partition.
_Record = tuple[bytes, bytes | memoryview | None, list[tuple[str, bytes]], int]


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
    def chunk_bytes(self) -> int:
        """Payload bytes per record."""
        return self.max_record_bytes - RECORD_OVERHEAD_BYTES


def record_key(key: SnapshotKey, version: Version, chunk: int) -> bytes:
    """The Kafka record key of one chunk of one version."""
    return f"{key}@{version}#{chunk}".encode()


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


def _partition_of(key: SnapshotKey, partitions: int) -> int:
    digest = hashlib.sha256(str(key).encode()).digest()
    return int.from_bytes(digest[:4], "big") % partitions


def _bounded(fn: Callable[[], _T], timeout_s: float, what: str) -> _T:
    """Run ``fn`` with a deadline: kafka-python's commit and abort take no timeout."""
    result: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as e:
            error.append(e)

    thread = threading.Thread(target=target, name=f"flinkai-state-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise StoreUnavailableError(f"{what} did not finish within {timeout_s:g}s")
    if error:
        raise error[0]
    return result[0]


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
        # Payloads fetched in one scan by get_many, consumed by _tensor.
        self._prefetched: dict[tuple[SnapshotKey, Version], bytes] = {}
        self._producer: Any = None
        self._consumer: Any = None
        self._fetcher: Any = None
        self._closed = False
        self._check_access()
        try:
            if config.create_topic:
                self._create_topic()
            self._consumer = self._new_consumer("index")
            self._fetcher = self._new_consumer("fetch")
            self._partitions = self._topic_partitions()
            self._consumer.assign(self._partitions)
            self._consumer.seek_to_beginning(*self._partitions)
            self.sync()
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
                    version = next_version(self._high.get(key), self._clock_ms())
                    meta, payload = encode(
                        tensor, self.config.codec, version=version, model_version=model_version
                    )
                    view = memoryview(payload)
                    chunks = [view[i : i + size] for i in range(0, len(payload), size)]
                    chunks = chunks or [view[:0]]
                    partition = _partition_of(key, len(self._partitions))
                    kept = sorted(self._index.get(key, {}))
                    pruned = kept[: max(0, len(kept) - (self.config.max_versions_per_key - 1))]
                    planned.append(
                        (key, tensor, version, meta, len(chunks), partition, pruned, len(records))
                    )
                    # Values stay memoryviews of the payload: no copy before the producer's.
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

            offsets = self._transaction(encoded())
            self._skip_own(records, offsets)
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
            return sorted(self._index.get(key, {}))

    def delete(self, key: SnapshotKey, version: Version | None = None) -> int:
        """See :meth:`SnapshotStore.delete`; tombstones every chunk in one transaction.

        Raises:
            StoreUnavailableError: The transaction did not commit; nothing was deleted.
        """
        with self._lock:
            self.sync()
            entries = self._index.get(key, {})
            doomed = [v for v in entries if version is None or v == version]
            if not doomed:
                return 0
            partition = _partition_of(key, len(self._partitions))
            self._transaction(
                [
                    (record_key(key, v, i), None, [], partition)
                    for v in doomed
                    for i in range(entries[v].chunks)
                ]
            )
            for v in doomed:
                self._forget(key, v)
            return len(doomed)

    def sync(self) -> None:
        """Read the topic up to its last stable offset into the index.

        Raises:
            StoreUnavailableError: The broker did not answer within ``request_timeout_s``.
        """
        with self._lock:
            timeout_s = self.config.request_timeout_s
            deadline = time.monotonic() + timeout_s
            try:
                end = self._consumer.end_offsets(self._partitions)
                while any(self._consumer.position(tp) < end[tp] for tp in self._partitions):
                    if time.monotonic() >= deadline:
                        raise StoreUnavailableError(
                            f"reading {self.config.topic!r} on {self.config.bootstrap} did not "
                            f"reach its end within {timeout_s:g}s"
                        )
                    # Short: a fetch that holds only a commit marker returns no records,
                    # and poll would wait its whole timeout although the position moved.
                    for records in self._consumer.poll(timeout_ms=_SYNC_POLL_MS).values():
                        for record in records:
                            self._apply(record)
            except kerrors.KafkaError as e:
                raise StoreUnavailableError(
                    f"reading {self.config.topic!r} on {self.config.bootstrap} failed: {e}"
                ) from e

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
            entry = self._index.get(key, {}).get(version)
            if entry is not None or version <= self._high.get(key, Version(-1)):
                return entry
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _apply(self, record: Any) -> None:
        """Fold one committed record into the index."""
        try:
            key, version, chunk = _parse_record_key(record.key or b"")
        except ValueError as e:
            log.warning("skipping record at offset %d of %r: %s", record.offset, record.topic, e)
            self.stats.rejected["header"] += 1
            return
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
        for partition, own in by_partition.items():
            tp = TopicPartition(self.config.topic, partition)
            own.sort()
            try:
                position = self._consumer.position(tp)
            except kerrors.KafkaError:
                continue
            if own[0] == position and own[-1] - own[0] == len(own) - 1:
                # The commit marker after them is skipped by the reader as usual.
                self._consumer.seek(tp, own[-1] + 1)

    def _forget(self, key: SnapshotKey, version: Version) -> None:
        self._pending.pop((key, version), None)
        self._cache.discard((key, version))
        versions = self._index.get(key)
        if versions is not None:
            versions.pop(version, None)
            if not versions:
                del self._index[key]

    def _fetch(self, key: SnapshotKey, entry: _Entry) -> bytes:
        """The payload of ``entry``, read back by offset."""
        tp = TopicPartition(self.config.topic, entry.partition)
        wanted = {offset: chunk for chunk, offset in entry.offsets.items()}
        parts: dict[int, bytes] = {}
        last = max(wanted)
        timeout_s = self.config.request_timeout_s
        deadline = time.monotonic() + timeout_s
        try:
            self._fetcher.assign([tp])
            self._fetcher.seek(tp, min(wanted))
            while len(parts) < len(wanted) and self._fetcher.position(tp) <= last:
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"fetching {key} did not finish within {timeout_s:g}s"
                    )
                for records in self._fetcher.poll(timeout_ms=200).values():
                    for r in records:
                        chunk = wanted.get(r.offset)
                        if chunk is not None and r.value is not None:
                            parts[chunk] = r.value
        except kerrors.KafkaError as e:
            raise StoreUnavailableError(f"fetching {key} from {self.config.topic!r}: {e}") from e
        if len(parts) < len(wanted):
            # Compacted away after a tombstone the index has not read yet.
            raise SnapshotNotFoundError(f"chunks of {key} version {entry.meta.version} are gone")
        payload = b"".join(parts[i] for i in range(entry.chunks))
        self.stats.fetched_bytes += len(payload)
        return payload

    def _fetch_many(
        self, wanted: Sequence[tuple[SnapshotKey, _Entry]]
    ) -> dict[tuple[SnapshotKey, Version], bytes]:
        """Payloads of several entries, read in as few sequential scans as possible.

        Snapshots written by one ``put_many`` sit next to each other in the log, so
        a prefix restore is one seek and one read instead of one round trip per
        snapshot. Offsets further apart than ``_MAX_SCAN_GAP`` start a new scan.
        An entry whose chunks are gone is left out (``_tensor`` then fetches it
        alone and reports it).
        """
        by_partition: dict[int, dict[int, tuple[int, int]]] = {}
        for n, (_, entry) in enumerate(wanted):
            for chunk, offset in entry.offsets.items():
                by_partition.setdefault(entry.partition, {})[offset] = (n, chunk)
        parts: dict[int, dict[int, bytes]] = {}
        timeout_s = self.config.request_timeout_s
        deadline = time.monotonic() + timeout_s
        try:
            for partition, index in by_partition.items():
                tp = TopicPartition(self.config.topic, partition)
                self._fetcher.assign([tp])
                for first, last in _runs(sorted(index), _MAX_SCAN_GAP):
                    self._fetcher.seek(tp, first)
                    while self._fetcher.position(tp) <= last:
                        if time.monotonic() >= deadline:
                            raise StoreUnavailableError(
                                f"fetching {len(wanted)} snapshots did not finish within "
                                f"{timeout_s:g}s"
                            )
                        for records in self._fetcher.poll(timeout_ms=200).values():
                            for r in records:
                                hit = index.get(r.offset)
                                if hit is not None and r.value is not None:
                                    parts.setdefault(hit[0], {})[hit[1]] = r.value
        except kerrors.KafkaError as e:
            raise StoreUnavailableError(f"fetching from {self.config.topic!r}: {e}") from e
        out: dict[tuple[SnapshotKey, Version], bytes] = {}
        for n, (key, entry) in enumerate(wanted):
            got = parts.get(n, {})
            if len(got) == entry.chunks:
                payload = b"".join(got[i] for i in range(entry.chunks))
                self.stats.fetched_bytes += len(payload)
                out[(key, entry.meta.version)] = payload
        return out

    def _transaction(self, records: Iterable[_Record]) -> list[int]:
        """Write ``records`` (key, value, headers, partition) as one transaction; their offsets.

        ``records`` may be a generator that encodes as it goes. On a Kafka failure
        the producer is dropped (a new one fences it on the next write) and
        :class:`StoreUnavailableError` is raised. Any other error (from the
        generator) aborts the transaction and propagates.
        """
        timeout_s = self.config.request_timeout_s
        producer = self._writer()
        try:
            producer.begin_transaction()
            futures = [
                producer.send(self.config.topic, key=k, value=v, headers=h or None, partition=p)
                for k, v, h, p in records
            ]
            producer.flush(timeout=timeout_s)
            offsets = [int(f.get(timeout=timeout_s).offset) for f in futures]
            _bounded(producer.commit_transaction, timeout_s, "commit")
        except (kerrors.KafkaError, StoreUnavailableError) as e:
            self._drop_producer()
            raise StoreUnavailableError(
                f"writing to {self.config.topic!r} on {self.config.bootstrap} failed; the "
                f"transaction is not committed: {type(e).__name__}: {e}"
            ) from e
        except BaseException:
            self._abort(producer)
            raise
        return offsets

    def _abort(self, producer: Any) -> None:
        """Abort the open transaction, so readers are not held back until it times out."""
        try:
            _bounded(producer.abort_transaction, self.config.request_timeout_s, "abort")
        except (kerrors.KafkaError, StoreUnavailableError):
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

    def _writer(self) -> Any:
        if self._producer is not None:
            return self._producer
        c = self.config
        try:
            producer = KafkaProducer(
                bootstrap_servers=c.bootstrap,
                **self._client_options(),
                client_id="flinkai-state-writer",
                transactional_id=c.transactional_id or f"flinkai-state-{uuid.uuid4().hex}",
                enable_idempotence=True,
                acks="all",
                max_request_size=c.max_record_bytes,
                transaction_timeout_ms=int(c.transaction_timeout_s * 1000),
                request_timeout_ms=int(c.request_timeout_s * 1000),
                max_block_ms=int(c.request_timeout_s * 1000),
                delivery_timeout_ms=int(c.request_timeout_s * 1000) + 1000,
                # Fills whole requests with chunks instead of one record per request.
                batch_size=min(c.max_record_bytes, 1_048_576),
            )
            _bounded(producer.init_transactions, c.request_timeout_s, "init_transactions")
        except (kerrors.KafkaError, StoreUnavailableError) as e:
            raise StoreUnavailableError(
                f"cannot start a transactional producer on {c.bootstrap}: {e}"
            ) from e
        self._producer = producer
        return producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.close(timeout=0)
        except kerrors.KafkaError:
            log.debug("closing a failed producer", exc_info=True)

    def _new_consumer(self, role: str) -> Any:
        c = self.config
        try:
            return KafkaConsumer(
                bootstrap_servers=c.bootstrap,
                **self._client_options(),
                client_id=f"flinkai-state-{role}",
                group_id=None,
                enable_auto_commit=False,
                isolation_level="read_committed",
                request_timeout_ms=int(c.request_timeout_s * 1000) + 1000,
                fetch_max_bytes=64 * 1024 * 1024,
                max_partition_fetch_bytes=max(16 * 1024 * 1024, c.max_record_bytes),
            )
        except kerrors.KafkaError as e:
            raise StoreUnavailableError(f"cannot reach Kafka at {c.bootstrap}: {e}") from e

    def _create_topic(self) -> None:
        c = self.config
        configs = {
            "cleanup.policy": "compact",
            "max.message.bytes": str(c.max_record_bytes),
            **c.topic_configs,
        }
        try:
            create_topics(
                c.bootstrap,
                [c.topic],
                c.partitions,
                configs=configs,
                timeout_s=c.request_timeout_s,
                security=c.security,
            )
        except FlinkAIKafkaError as e:
            raise StoreUnavailableError(str(e)) from e

    def _topic_partitions(self) -> list[TopicPartition]:
        deadline = time.monotonic() + self.config.request_timeout_s
        while True:
            ids = self._consumer.partitions_for_topic(self.config.topic)
            if ids:
                return [TopicPartition(self.config.topic, p) for p in sorted(ids)]
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(
                    f"topic {self.config.topic!r} not found on {self.config.bootstrap}"
                )
            time.sleep(0.1)

    def _close_clients(self) -> None:
        self._drop_producer()
        for client in (self._consumer, self._fetcher):
            if client is None:
                continue
            try:
                client.close()
            except kerrors.KafkaError:
                log.debug("closing a consumer", exc_info=True)
