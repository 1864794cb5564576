"""The adapters a worker serves: versions hot-plugged while it runs, and rollback.

An :class:`AdapterSet` holds, per adapter name, the last few versions and which one
is current. A feed (``flinkai.kafka.adapter_feed``: a ``read_committed`` consumer
of the adapters topic) calls :meth:`AdapterSet.publish` and
:meth:`AdapterSet.rollback` from its own thread; the scheduler calls
:meth:`AdapterSet.pin` when it admits a request, and the sequence keeps the version
it got until it finishes, so no completion mixes two versions.

A bad adapter (truncated bytes, another rank, another base model...) is refused with
its reason and the current version stays.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flinkai.llm.lora import Adapter, AdapterError, LoraSpec, check_adapter_name

__all__ = ["AdapterEvent", "AdapterSet"]

log = logging.getLogger(__name__)

Action = Literal["publish", "rollback", "rejected"]


@dataclass(frozen=True)
class AdapterEvent:
    """One change to the set, for metrics and the bench.

    Attributes:
        name: Adapter name.
        version: The version that became current (rejected: the one refused, or -1).
        action: ``publish``, ``rollback`` or ``rejected``.
        at_s: Wall-clock time (``time.time()``) the change took effect.
        reason: Why it was rejected.
    """

    name: str
    version: int
    action: Action
    at_s: float
    reason: str | None = None


class AdapterSet:
    """Versions of named adapters for one decoder; thread-safe.

    Args:
        spec: The decoder's LoRA inputs.
        base_model: The decoder's ``model_version``; adapters for another are refused.
        keep_versions: Versions kept per name (the current one always), for rollback.
        wall: Wall-clock seconds (tests pass a fake).
    """

    def __init__(
        self,
        spec: LoraSpec,
        base_model: str,
        *,
        keep_versions: int = 4,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.spec = spec
        self.base_model = base_model
        self.keep_versions = keep_versions
        self.wall = wall
        self.rejected: Counter[str] = Counter()
        self.events: deque[AdapterEvent] = deque(maxlen=1024)
        self._lock = threading.Lock()
        self._versions: dict[str, dict[int, Adapter]] = {}
        self._current: dict[str, int] = {}

    def publish(self, adapter: Adapter | bytes) -> Adapter:
        """Check an adapter (or its ``.onnx_adapter`` bytes) and make it its name's current.

        A version already held is made current again without a copy (a feed that
        replays the topic from the start after a restart).

        Raises:
            AdapterError: It does not fit the decoder; the current version stays.
        """
        try:
            if isinstance(adapter, bytes | bytearray | memoryview):
                adapter = Adapter.decode(bytes(adapter))
            adapter.check(self.spec, self.base_model)
        except AdapterError as e:
            self._reject(getattr(adapter, "name", "?"), getattr(adapter, "version", -1), e)
            raise
        with self._lock:
            versions = self._versions.setdefault(adapter.name, {})
            versions.setdefault(adapter.version, adapter)
            self._current[adapter.name] = adapter.version
            # The oldest versions go first; the current one always stays.
            for old in sorted(versions)[: max(0, len(versions) - self.keep_versions)]:
                if old != adapter.version:
                    del versions[old]
            self.events.append(AdapterEvent(adapter.name, adapter.version, "publish", self.wall()))
        log.info("adapter %s is current", adapter.tag)
        return versions[adapter.version]

    def rollback(self, name: str, to_version: int | None = None) -> Adapter:
        """Make ``to_version`` (default: the newest one older than the current) current.

        Raises:
            AdapterError: ``unknown_adapter`` or ``unknown_version`` (not held any more).
        """
        with self._lock:
            versions = self._versions.get(name)
            if not versions:
                raise self._reject(name, to_version or -1, AdapterError(
                    "unknown_adapter", f"no version of adapter {name!r} is loaded"))  # fmt: skip
            current = self._current[name]
            if to_version is None:
                older = [v for v in versions if v < current]
                if not older:
                    raise self._reject(name, -1, AdapterError(
                        "unknown_version", f"{name}@{current} has no older version held"))  # fmt: skip
                to_version = max(older)
            if to_version not in versions:
                raise self._reject(name, to_version, AdapterError(
                    "unknown_version",
                    f"{name}@{to_version} is not held (held: {sorted(versions)})"))  # fmt: skip
            self._current[name] = to_version
            self.events.append(AdapterEvent(name, to_version, "rollback", self.wall()))
            adapter = versions[to_version]
        log.info("adapter %s rolled back to version %d", name, to_version)
        return adapter

    def _reject(self, name: str, version: int, error: AdapterError) -> AdapterError:
        self.rejected[error.reason] += 1
        self.events.append(AdapterEvent(name, version, "rejected", self.wall(), error.reason))
        log.warning("adapter %s@%s refused, the current version stays: %s", name, version, error)
        return error

    def current(self, name: str) -> Adapter | None:
        """The version of ``name`` a request admitted now gets, or None."""
        with self._lock:
            version = self._current.get(name)
            return None if version is None else self._versions[name][version]

    def pin(self, name: str) -> Adapter:
        """The current version of ``name``, for a sequence to keep.

        Raises:
            AdapterError: ``invalid_name`` or ``unknown_adapter``.
        """
        check_adapter_name(name)
        adapter = self.current(name)
        if adapter is None:
            raise AdapterError("unknown_adapter", f"no version of adapter {name!r} is loaded")
        return adapter

    def names(self) -> dict[str, int]:
        """Adapter name -> current version."""
        with self._lock:
            return dict(self._current)
