"""The snapshot store contract, and the plain data it moves.

A snapshot is one tensor (e.g. the K/V cache of one layer for one token prefix)
stored under a :class:`SnapshotKey` ``(model_id, layer_idx, prefix_hash)``. Each
put makes a new :class:`Version` of that key; a store keeps the newest few.

Reads are verified: :meth:`SnapshotStore.get` returns the newest version that
passes its checksum and matches the requested model version, dtype and shape, and
counts every version it had to skip by reason. A corrupt or mismatched snapshot is
never returned.
"""

from __future__ import annotations

import hashlib
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import numpy as np

from flinkai.state.errors import (
    SnapshotCorruptError,
    SnapshotMismatchError,
    SnapshotNotFoundError,
)

__all__ = [
    "Snapshot",
    "SnapshotKey",
    "SnapshotMeta",
    "SnapshotStore",
    "StoreStats",
    "Version",
    "WallClockMs",
    "check_expected",
    "check_unique_keys",
    "next_version",
    "prefix_hash",
    "wall_clock_ms",
]

_HEX = re.compile(r"^[0-9a-f]+$")
#: ``@`` and ``#`` separate version and chunk in Kafka record keys; whitespace is a typo.
_MODEL_ID = re.compile(r"^[^@#\s]+$")
#: 128 bits of sha256: collisions between prefixes are out of reach, keys stay short.
PREFIX_HASH_HEX = 32


def prefix_hash(token_ids: Sequence[int] | np.ndarray) -> str:
    """The hash that names a token prefix in a :class:`SnapshotKey`.

    Args:
        token_ids: The prefix's token ids, in order.

    Returns:
        32 lowercase hex digits of sha256 over the ids as little-endian int64.
    """
    ids = np.asarray(token_ids, dtype="<i8")
    return hashlib.sha256(ids.tobytes()).hexdigest()[:PREFIX_HASH_HEX]


#: Wall-clock source for versions: milliseconds since the epoch.
WallClockMs = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch; versions start from it."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, order=True)
class Version:
    """A snapshot version: wall-clock milliseconds, then a sequence id.

    Ordered as a tuple. :func:`next_version` keeps versions of one key strictly
    increasing even when the clock steps back or two puts share a millisecond.

    Attributes:
        ms: Milliseconds since the epoch when it was made (or the previous version's
            ``ms`` when the clock had not moved past it).
        seq: Sequence id within ``ms``.
    """

    ms: int
    seq: int = 0

    def __str__(self) -> str:
        return f"{self.ms}.{self.seq}"

    @classmethod
    def parse(cls, text: str) -> Version:
        """Read ``"<ms>.<seq>"`` as written by ``str()``.

        Raises:
            ValueError: Not two non-negative integers.
        """
        ms, sep, seq = text.partition(".")
        if not sep or not ms.isdigit() or not seq.isdigit():
            raise ValueError(f"not a snapshot version: {text!r}")
        return cls(int(ms), int(seq))


def next_version(previous: Version | None, now_ms: int) -> Version:
    """The version after ``previous`` at wall time ``now_ms``; always greater.

    A clock that stepped back (or did not move) keeps ``previous.ms`` and bumps the
    sequence id, so versions of a key are monotonic whatever the clock does.
    """
    if previous is None or now_ms > previous.ms:
        return Version(now_ms, 0)
    return Version(previous.ms, previous.seq + 1)


@dataclass(frozen=True)
class SnapshotKey:
    """What a snapshot is of: one layer of one model for one token prefix.

    Attributes:
        model_id: Model name, e.g. ``HuggingFaceTB/SmolLM2-135M``; no ``@``, ``#``
            or whitespace.
        layer_idx: Layer index, ``>= 0``.
        prefix_hash: Lowercase hex, as :func:`prefix_hash` makes it.
    """

    model_id: str
    layer_idx: int
    prefix_hash: str

    def __post_init__(self) -> None:
        if not _MODEL_ID.match(self.model_id):
            raise ValueError(f"model_id {self.model_id!r} is empty or holds '@', '#' or spaces")
        if self.layer_idx < 0:
            raise ValueError(f"layer_idx must be >= 0, got {self.layer_idx}")
        if not _HEX.match(self.prefix_hash):
            raise ValueError(f"prefix_hash must be lowercase hex, got {self.prefix_hash!r}")

    def __str__(self) -> str:
        return f"{self.model_id}_{self.layer_idx}_{self.prefix_hash}"

    @classmethod
    def parse(cls, text: str) -> SnapshotKey:
        """Read ``{model_id}_{layer_idx}_{prefix_hash}``; ``model_id`` may hold ``_``.

        Raises:
            ValueError: Not in that form.
        """
        parts = text.rsplit("_", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            raise ValueError(f"not a snapshot key: {text!r}")
        return cls(parts[0], int(parts[1]), parts[2])


@dataclass(frozen=True)
class SnapshotMeta:
    """Everything stored beside a snapshot's bytes; checked before the bytes are used.

    Attributes:
        version: Its version.
        model_version: Version of the model that made the tensor.
        dtype: NumPy dtype name (``float16``, ``float32``...).
        shape: Tensor shape.
        compression: How the payload is encoded (see :mod:`flinkai.state.codec`).
        sha256: Hex digest of the raw tensor bytes (C order, little-endian).
        payload_bytes: Size of the encoded payload.
    """

    version: Version
    model_version: str
    dtype: str
    shape: tuple[int, ...]
    compression: str
    sha256: str
    payload_bytes: int

    @property
    def raw_bytes(self) -> int:
        """Size of the decoded tensor."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Snapshot:
    """A verified snapshot as a store returns it.

    Attributes:
        key: What it is of.
        version: Its version.
        model_version: Model version that made it.
        tensor: The tensor; read-only (stores may share it between callers).
    """

    key: SnapshotKey
    version: Version
    model_version: str
    tensor: np.ndarray


@dataclass
class StoreStats:
    """Counters a store keeps; read them, do not write them.

    Attributes:
        puts: Snapshots written.
        hits: ``get`` calls that returned a snapshot.
        misses: ``get`` calls that returned nothing.
        rejected: Reason -> versions refused (corrupt or mismatched); see
            :mod:`flinkai.state.errors`.
        evicted: Reason (``lru``, ``ttl``) -> cache entries dropped.
        fetched_bytes: Encoded bytes read back from the backing service on cache misses.
    """

    puts: int = 0
    hits: int = 0
    misses: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    evicted: Counter[str] = field(default_factory=Counter)
    fetched_bytes: int = 0


def check_expected(
    meta: SnapshotMeta,
    *,
    model_version: str | None,
    dtype: str | None,
    shape: Sequence[int] | None,
) -> None:
    """Raise :class:`SnapshotMismatchError` unless ``meta`` matches what is asked for.

    ``None`` means "any".
    """
    if model_version is not None and meta.model_version != model_version:
        raise SnapshotMismatchError(
            "model_version", f"stored {meta.model_version!r}, asked for {model_version!r}"
        )
    if dtype is not None and meta.dtype != np.dtype(dtype).name:
        raise SnapshotMismatchError(
            "dtype", f"stored {meta.dtype}, asked for {np.dtype(dtype).name}"
        )
    if shape is not None and meta.shape != tuple(shape):
        raise SnapshotMismatchError("shape", f"stored {meta.shape}, asked for {tuple(shape)}")


def check_unique_keys(items: Sequence[tuple[SnapshotKey, np.ndarray]]) -> None:
    keys = [k for k, _ in items]
    if len(set(keys)) != len(keys):
        raise ValueError("put_many got the same key twice; put one version per key at a time")


class SnapshotStore(ABC):
    """A versioned store of tensor snapshots.

    Implementations provide :meth:`put`, :meth:`versions`, :meth:`delete` and two
    read hooks (``_meta``, ``_tensor``); :meth:`get_version` and :meth:`get` (the
    newest valid version) are built on them, so every store verifies and counts alike.

    Contract:
        * Versions of a key are strictly increasing, whatever the wall clock does.
        * A put is atomic: a reader sees the whole snapshot or nothing of it.
        * A returned snapshot passed its checksum and matched the model version,
          dtype and shape asked for. Any other version is skipped and its reason
          counted in :attr:`stats`.
        * A store keeps at most its configured number of versions per key.

    Stores are context managers; :meth:`close` releases connections.
    """

    def __init__(self) -> None:
        self.stats = StoreStats()

    @abstractmethod
    def put(self, key: SnapshotKey, tensor: np.ndarray, *, model_version: str) -> Version:
        """Store ``tensor`` as the next version of ``key``.

        Args:
            key: What it is a snapshot of.
            tensor: A numeric array; stored as C-order little-endian bytes.
            model_version: Version of the model that made it; checked on read.

        Returns:
            The new version.
        """

    def get_version(
        self,
        key: SnapshotKey,
        version: Version,
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> Snapshot:
        """One version of ``key``, verified.

        The stored header is checked against the request before any payload is read.

        Raises:
            SnapshotNotFoundError: No such version.
            SnapshotCorruptError: Its bytes failed verification (counted).
            SnapshotMismatchError: Another model version, dtype or shape (counted).
        """
        meta = self._meta(key, version)
        try:
            check_expected(meta, model_version=model_version, dtype=dtype, shape=shape)
            tensor = self._tensor(key, meta)
        except (SnapshotCorruptError, SnapshotMismatchError) as e:
            self.stats.rejected[e.reason] += 1
            raise
        return Snapshot(key, meta.version, meta.model_version, tensor)

    @abstractmethod
    def _meta(self, key: SnapshotKey, version: Version) -> SnapshotMeta:
        """The stored header of one version.

        Raises:
            SnapshotNotFoundError: No such version.
            SnapshotCorruptError: It is already known to be corrupt.
        """

    @abstractmethod
    def _tensor(self, key: SnapshotKey, meta: SnapshotMeta) -> np.ndarray:
        """The verified, read-only tensor of the version ``meta`` describes.

        Raises:
            SnapshotNotFoundError: Its bytes are gone (deleted meanwhile).
            SnapshotCorruptError: They fail verification.
        """

    @abstractmethod
    def versions(self, key: SnapshotKey) -> list[Version]:
        """Stored versions of ``key``, oldest first (including ones found corrupt)."""

    @abstractmethod
    def delete(self, key: SnapshotKey, version: Version | None = None) -> int:
        """Delete one version of ``key``, or all of them when ``version`` is ``None``.

        Returns:
            How many versions were deleted (0 when there were none).
        """

    def get(
        self,
        key: SnapshotKey,
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> Snapshot | None:
        """The newest version of ``key`` that is sound and matches the request.

        Versions that fail are skipped, newest first, and counted by reason; an
        older valid version is served instead.

        Returns:
            The snapshot, or ``None`` (a miss) when no version qualifies.
        """
        return self._newest(
            key, self.versions(key), model_version=model_version, dtype=dtype, shape=shape
        )

    def get_many(
        self,
        keys: Sequence[SnapshotKey],
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> list[Snapshot | None]:
        """:meth:`get` for each key, in order; a store may do it in fewer round trips.

        A prefix restore reads one snapshot per layer and block, hundreds per
        prompt; the Kafka store catches up with the topic once for all of them and
        fetches the uncached ones in one scan.
        """
        return [self.get(k, model_version=model_version, dtype=dtype, shape=shape) for k in keys]

    def put_many(
        self, items: Sequence[tuple[SnapshotKey, np.ndarray]], *, model_version: str
    ) -> list[Version]:
        """:meth:`put` for each ``(key, tensor)``; a store may make it one atomic write.

        Raises:
            ValueError: A key appears twice.
        """
        check_unique_keys(items)
        return [self.put(k, t, model_version=model_version) for k, t in items]

    def _newest(
        self,
        key: SnapshotKey,
        versions: Sequence[Version],
        *,
        model_version: str | None,
        dtype: str | None,
        shape: Sequence[int] | None,
    ) -> Snapshot | None:
        """The newest of ``versions`` that verifies and matches; counts hit or miss."""
        for version in reversed(versions):
            try:
                snapshot = self.get_version(
                    key, version, model_version=model_version, dtype=dtype, shape=shape
                )
            except (SnapshotNotFoundError, SnapshotCorruptError, SnapshotMismatchError):
                continue
            self.stats.hits += 1
            return snapshot
        self.stats.misses += 1
        return None

    def close(self) -> None:  # noqa: B027 - a hook: stores without resources need no close
        """Release connections and threads; the store is unusable afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
