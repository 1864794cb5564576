"""A snapshot store that is opened again and again until its backing service answers.

A prefix cache is an optimisation: a worker whose broker is down when it starts
should complete prompts without it, not fail. :class:`ReopeningStore` tries to
open the real store once at construction. If that fails it logs one warning
naming the service, answers every call at once with :class:`StoreNotOpenError`
(a :class:`StoreUnavailableError`: the prefix cache counts a miss with reason
``store_unavailable`` and recomputes), and retries opening on a background thread
at most every ``retry_s`` seconds, triggered by those calls. Once open, it hands
every call to the real store.

Nothing is served that the real store did not verify, so a store that comes back
can never make a wrong cache produce output.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from flinkai.state.base import Snapshot, SnapshotKey, SnapshotMeta, SnapshotStore, Version
from flinkai.state.cache import MonotonicClock
from flinkai.state.errors import StoreNotOpenError, StoreUnavailableError

__all__ = ["DEFAULT_RETRY_S", "ReopeningStore"]

log = logging.getLogger(__name__)

#: Seconds between two attempts to open a store that is not there.
DEFAULT_RETRY_S = 30.0


class ReopeningStore(SnapshotStore):
    """Opens ``open_store()`` now, or later in the background; see the module docstring.

    Args:
        open_store: Opens the real store; raises :class:`StoreUnavailableError` when
            the service cannot be reached. Any other error at construction (a bad
            config, a missing secret) propagates: retrying would not fix it.
        describe: Names the service in log lines, e.g. the bootstrap servers.
        retry_s: Least seconds between two attempts.
        monotonic: Clock for the back-off.
    """

    def __init__(
        self,
        open_store: Callable[[], SnapshotStore],
        *,
        describe: str,
        retry_s: float = DEFAULT_RETRY_S,
        monotonic: MonotonicClock = time.monotonic,
    ) -> None:
        super().__init__()
        if retry_s <= 0:
            raise ValueError(f"retry_s must be > 0, got {retry_s}")
        self.describe = describe
        self.retry_s = retry_s
        #: Attempts to open that failed, the first one included.
        self.failed_attempts = 0
        self._open_store = open_store
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._inner: SnapshotStore | None = None
        self._next_try = 0.0
        self._opener: threading.Thread | None = None
        self._closed = False
        self._attempt(first=True)

    @property
    def available(self) -> bool:
        """Whether the real store is open."""
        return self._inner is not None

    def wait(self, timeout_s: float) -> bool:
        """Wait for a background attempt in progress; whether the store is open after it."""
        opener = self._opener
        if opener is not None:
            opener.join(timeout_s)
        return self.available

    # -- the contract, handed to the real store --------------------------------

    def put(self, key: SnapshotKey, tensor: np.ndarray, *, model_version: str) -> Version:
        return self._store().put(key, tensor, model_version=model_version)

    def put_many(
        self, items: Sequence[tuple[SnapshotKey, np.ndarray]], *, model_version: str
    ) -> list[Version]:
        return self._store().put_many(items, model_version=model_version)

    def get(
        self,
        key: SnapshotKey,
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> Snapshot | None:
        return self._store().get(key, model_version=model_version, dtype=dtype, shape=shape)

    def get_many(
        self,
        keys: Sequence[SnapshotKey],
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> list[Snapshot | None]:
        return self._store().get_many(keys, model_version=model_version, dtype=dtype, shape=shape)

    def get_version(
        self,
        key: SnapshotKey,
        version: Version,
        *,
        model_version: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> Snapshot:
        return self._store().get_version(
            key, version, model_version=model_version, dtype=dtype, shape=shape
        )

    def versions(self, key: SnapshotKey) -> list[Version]:
        return self._store().versions(key)

    def delete(self, key: SnapshotKey, version: Version | None = None) -> int:
        return self._store().delete(key, version)

    def _meta(self, key: SnapshotKey, version: Version) -> SnapshotMeta:
        raise NotImplementedError("reads go through the real store's public methods")

    def _tensor(self, key: SnapshotKey, meta: SnapshotMeta) -> np.ndarray:
        raise NotImplementedError("reads go through the real store's public methods")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            inner, self._inner = self._inner, None
        if inner is not None:
            inner.close()

    # -- internals --------------------------------------------------------------

    def _store(self) -> SnapshotStore:
        inner = self._inner
        if inner is not None:
            return inner
        self._maybe_retry()
        raise StoreNotOpenError(
            f"the snapshot store at {self.describe} is not open "
            f"({self.failed_attempts} failed attempts; retrying every {self.retry_s:g}s)"
        )

    def _maybe_retry(self) -> None:
        with self._lock:
            busy = self._opener is not None and self._opener.is_alive()
            if self._closed or busy or self._monotonic() < self._next_try:
                return
            self._opener = threading.Thread(
                target=self._attempt, name="flinkai-state-reopen", daemon=True
            )
            self._opener.start()

    def _attempt(self, first: bool = False) -> None:
        try:
            store = self._open_store()
        except StoreUnavailableError as e:
            self._failed(e)
            return
        except Exception as e:
            if first:
                raise
            # A background attempt must not die silently; the next call retries.
            self._failed(e)
            return
        with self._lock:
            if self._closed:
                store.close()
                return
            self._inner = store
            self.stats = store.stats
        if self.failed_attempts:
            log.warning(
                "the snapshot store at %s is open after %d failed attempts; the prefix "
                "cache is back",
                self.describe,
                self.failed_attempts,
            )

    def _failed(self, e: BaseException) -> None:
        with self._lock:
            self.failed_attempts += 1
            self._next_try = self._monotonic() + self.retry_s
            first = self.failed_attempts == 1
        if first:
            log.warning(
                "the snapshot store at %s is unavailable (%s); running without the prefix "
                "cache (every lookup a miss) and retrying every %gs",
                self.describe,
                e,
                self.retry_s,
            )
        else:
            log.debug("the snapshot store at %s is still unavailable: %s", self.describe, e)
