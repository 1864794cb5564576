"""A cache bounded by bytes (least recently used goes first) and by age (TTL).

Time comes from an injected monotonic clock, so tests move it explicitly.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["ByteLRUCache", "MonotonicClock"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Seconds from an arbitrary origin that never goes back, like :func:`time.monotonic`.
MonotonicClock = Callable[[], float]


@dataclass
class _Entry(Generic[V]):
    value: V
    nbytes: int
    stored_at: float


class ByteLRUCache(Generic[K, V]):
    """Values with a byte size; the total stays within ``max_bytes``.

    An entry expires ``ttl_s`` after it was stored (reads do not extend it: the age
    of a snapshot copy is what matters, not how popular it is). A value larger than
    the whole budget is not cached.

    Args:
        max_bytes: Byte budget; 0 disables the cache.
        ttl_s: Maximum age of an entry; ``None`` for no limit.
        clock: Monotonic seconds; defaults to :func:`time.monotonic`.

    Attributes:
        evicted: Reason (``lru``, ``ttl``) -> entries dropped.
    """

    def __init__(
        self, max_bytes: int, ttl_s: float | None = None, clock: MonotonicClock = time.monotonic
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 or None, got {ttl_s}")
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()
        # Keys in the order they were stored (reads do not move them), so the oldest
        # are found without a scan: a restore puts hundreds of blocks in a row.
        self._by_age: dict[K, None] = {}
        self._bytes = 0
        self.evicted: Counter[str] = Counter()

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value, marked as most recently used; ``None`` if absent or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._expired(entry, self._clock()):
            self._drop(key, "ttl")
            return None
        self._entries.move_to_end(key)
        return entry.value

    def put(self, key: K, value: V, nbytes: int) -> bool:
        """Store ``value``, evicting expired entries, then the least recently used.

        Returns:
            Whether it was stored (False when it alone exceeds the budget).
        """
        self.discard(key)
        if nbytes > self.max_bytes:
            return False
        now = self._clock()
        self.expire(now)
        while self._bytes + nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)), "lru")
        self._entries[key] = _Entry(value, nbytes, now)
        self._by_age[key] = None
        self._bytes += nbytes
        return True

    def discard(self, key: K) -> None:
        """Remove ``key`` if present (not counted as an eviction)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
            del self._by_age[key]

    def expire(self, now: float | None = None) -> int:
        """Drop every expired entry; how many were dropped."""
        if self.ttl_s is None:
            return 0
        at = self._clock() if now is None else now
        dropped = 0
        while self._by_age:
            oldest = next(iter(self._by_age))
            if not self._expired(self._entries[oldest], at):
                break
            self._drop(oldest, "ttl")
            dropped += 1
        return dropped

    def clear(self) -> None:
        """Remove everything (not counted as evictions)."""
        self._entries.clear()
        self._by_age.clear()
        self._bytes = 0

    def _expired(self, entry: _Entry[V], now: float) -> bool:
        return self.ttl_s is not None and now - entry.stored_at >= self.ttl_s

    def _drop(self, key: K, reason: str) -> None:
        self.discard(key)
        self.evicted[reason] += 1
