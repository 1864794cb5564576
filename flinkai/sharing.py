"""A process-wide pool of expensive objects, shared by key and reference-counted.

A Flink Python worker may host several instances of the same UDF (chained
operators, several queries using one model). Each would otherwise load its own
model session or start its own consumer thread. Instances borrow from a pool
instead; the first borrower creates the object, the last one to give it back
disposes of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["SharedPool"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Entry(Generic[V]):
    value: V
    refs: int


class SharedPool(Generic[K, V]):
    """Objects by key, created on first :meth:`acquire`, disposed on last :meth:`release`.

    Args:
        dispose: Frees an object nobody holds any more. Runs outside the lock,
            because it may wait (a thread join, a session close).
        what: Names the objects in error messages.
    """

    def __init__(self, dispose: Callable[[V], None] | None = None, what: str = "object") -> None:
        self._dispose = dispose
        self._what = what
        self._lock = threading.Lock()
        self._entries: dict[K, _Entry[V]] = {}

    def acquire(self, key: K, create: Callable[[], V]) -> V:
        """The object for ``key``, made by ``create`` on first use; one more holder.

        ``create`` runs under the pool's lock, so concurrent first users wait
        instead of loading twice; if it raises, nothing is held.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(create(), 0)
            entry.refs += 1
            return entry.value

    def release(self, value: V) -> None:
        """Give ``value`` back; the last holder's release disposes of it.

        Raises:
            ValueError: ``value`` is not held (released twice, or never acquired).
        """
        with self._lock:
            for key, entry in self._entries.items():
                if entry.value is value:
                    entry.refs -= 1
                    last = entry.refs <= 0
                    if last:
                        del self._entries[key]
                    break
            else:
                raise ValueError(f"release of a {self._what} that is not held (released twice?)")
        if last and self._dispose is not None:
            self._dispose(value)

    def refs(self, key: K) -> int:
        """How many holders share the object for ``key`` (0 when none exists)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.refs if entry else 0

    def values(self) -> list[V]:
        """The objects held now."""
        with self._lock:
            return [e.value for e in self._entries.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
