"""An in-process snapshot store: the reference implementation, and fast unit tests.

It encodes and verifies exactly as the Kafka store does (same codec, same header),
so corruption and mismatch behave alike; only persistence and sharing between
processes are missing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from flinkai.state.base import (
    SnapshotKey,
    SnapshotMeta,
    SnapshotStore,
    Version,
    WallClockMs,
    next_version,
    wall_clock_ms,
)
from flinkai.state.codec import CodecConfig, decode, encode
from flinkai.state.errors import SnapshotNotFoundError

__all__ = ["InMemorySnapshotStore"]


@dataclass
class _Stored:
    meta: SnapshotMeta
    payload: bytes


class InMemorySnapshotStore(SnapshotStore):
    """Snapshots in a dict, encoded; every read decodes and verifies.

    Args:
        codec: How payloads are encoded.
        max_versions_per_key: Versions kept per key; a put drops the oldest beyond it.
        clock_ms: Wall clock for versions (milliseconds since the epoch).
    """

    def __init__(
        self,
        codec: CodecConfig | None = None,
        *,
        max_versions_per_key: int = 2,
        clock_ms: WallClockMs = wall_clock_ms,
    ) -> None:
        super().__init__()
        if max_versions_per_key < 1:
            raise ValueError(f"max_versions_per_key must be >= 1, got {max_versions_per_key}")
        self.codec = codec or CodecConfig()
        self.max_versions_per_key = max_versions_per_key
        self._clock_ms = clock_ms
        self._data: dict[SnapshotKey, dict[Version, _Stored]] = {}
        # Highest version ever given per key, so a delete does not let versions repeat.
        self._high: dict[SnapshotKey, Version] = {}
        self._lock = threading.Lock()

    def put(self, key: SnapshotKey, tensor: np.ndarray, *, model_version: str) -> Version:
        """See :meth:`SnapshotStore.put`."""
        with self._lock:
            version = next_version(self._high.get(key), self._clock_ms())
            meta, payload = encode(tensor, self.codec, version=version, model_version=model_version)
            versions = self._data.setdefault(key, {})
            versions[version] = _Stored(meta, payload)
            for old in sorted(versions)[: -self.max_versions_per_key]:
                del versions[old]
            self._high[key] = version
            self.stats.puts += 1
        return version

    def versions(self, key: SnapshotKey) -> list[Version]:
        """See :meth:`SnapshotStore.versions`."""
        with self._lock:
            return sorted(self._data.get(key, {}))

    def delete(self, key: SnapshotKey, version: Version | None = None) -> int:
        """See :meth:`SnapshotStore.delete`."""
        with self._lock:
            versions = self._data.get(key, {})
            doomed = list(versions) if version is None else [v for v in versions if v == version]
            for v in doomed:
                del versions[v]
            if not versions:
                self._data.pop(key, None)
            return len(doomed)

    def _stored(self, key: SnapshotKey, version: Version) -> _Stored:
        with self._lock:
            stored = self._data.get(key, {}).get(version)
        if stored is None:
            raise SnapshotNotFoundError(f"no version {version} of {key}")
        return stored

    def _meta(self, key: SnapshotKey, version: Version) -> SnapshotMeta:
        return self._stored(key, version).meta

    def _tensor(self, key: SnapshotKey, meta: SnapshotMeta) -> np.ndarray:
        return decode(self._stored(key, meta.version).payload, meta)
