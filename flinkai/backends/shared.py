"""One loaded backend per worker process, shared by every UDF instance in it.

A Flink Python worker may host several instances of the same UDF (operator
chaining, several functions using one model). Loading a model per instance
multiplies memory and start-up time, so instances borrow a process-wide backend
and the last one to close releases it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from flinkai.backends.base import EmbeddingBackend
from flinkai.config import Config

__all__ = [
    "acquire_embedding_backend",
    "live_backends",
    "refs",
    "release_embedding_backend",
]


@dataclass
class _Entry:
    backend: EmbeddingBackend
    refs: int


_lock = threading.Lock()
_entries: dict[str, _Entry] = {}


def _key(config: Config) -> str:
    # Only the sections that change which model is loaded, and how, identify a backend.
    d = config.as_dict()
    return repr(
        (
            d["embedding"]["backend"],
            d["model"],
            d["onnx"],
            d["triton"],
            d["embedding"]["batch_size"],
            d["registry"],
        )
    )


def acquire_embedding_backend(config: Config) -> EmbeddingBackend:
    """The process's backend for ``config``, loaded on first use."""
    from flinkai.backends.registry import create_embedding_backend

    key = _key(config)
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            backend = create_embedding_backend(config)
            backend.load()  # under the lock: concurrent first users wait instead of loading twice
            entry = _entries[key] = _Entry(backend, 0)
        entry.refs += 1
        return entry.backend


def release_embedding_backend(backend: EmbeddingBackend) -> None:
    """Give a backend back; the last release closes it.

    Raises:
        ValueError: ``backend`` is not held (released twice, or never acquired).
    """
    with _lock:
        for key, entry in list(_entries.items()):
            if entry.backend is backend:
                entry.refs -= 1
                if entry.refs <= 0:
                    del _entries[key]
                    backend.close()
                return
    raise ValueError("release of a backend that is not held (released twice?)")


def refs(config: Config) -> int:
    """How many holders share the backend for ``config`` (0 when none is loaded)."""
    with _lock:
        entry = _entries.get(_key(config))
        return entry.refs if entry else 0


def live_backends() -> int:
    """How many backends are loaded in this process (for tests and metrics)."""
    with _lock:
        return len(_entries)
