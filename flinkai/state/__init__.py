"""Versioned snapshot stores for LLM KV-cache tensors.

One contract (:class:`SnapshotStore`), two implementations: in-memory for tests
and single processes, Kafka (a compacted topic) for sharing between workers.
``docs/state-store.md`` describes the Kafka format, its guarantees and figures.
"""

from flinkai.state.base import (
    Snapshot,
    SnapshotKey,
    SnapshotMeta,
    SnapshotStore,
    StoreStats,
    Version,
    next_version,
    prefix_hash,
)
from flinkai.state.cache import ByteLRUCache
from flinkai.state.codec import CodecConfig
from flinkai.state.errors import (
    SnapshotCorruptError,
    SnapshotMismatchError,
    SnapshotNotFoundError,
    StateError,
    StoreNotOpenError,
    StoreUnavailableError,
)
from flinkai.state.kafka import KafkaSnapshotStore, KafkaStoreConfig
from flinkai.state.memory import InMemorySnapshotStore
from flinkai.state.reopening import ReopeningStore

__all__ = [
    "ByteLRUCache",
    "CodecConfig",
    "InMemorySnapshotStore",
    "KafkaSnapshotStore",
    "KafkaStoreConfig",
    "ReopeningStore",
    "Snapshot",
    "SnapshotCorruptError",
    "SnapshotKey",
    "SnapshotMeta",
    "SnapshotMismatchError",
    "SnapshotNotFoundError",
    "SnapshotStore",
    "StateError",
    "StoreNotOpenError",
    "StoreStats",
    "StoreUnavailableError",
    "Version",
    "next_version",
    "prefix_hash",
]
