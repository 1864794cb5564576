"""Serve the registry's current model, and swap to a new version between batches.

Hot swap is an inference concern, so it lives with the backends; the registry it
reads from (:mod:`flinkai.models.registry`) only stores artifacts.

:class:`HotSwappingBackend` wraps the backend of one published version. Before each
batch (at most every ``poll_interval_s``) it stats the model's ``CURRENT`` pointer.
When the pointer names another version it verifies that version, builds and loads
(warms) its backend, and only then makes it the one new batches use. A batch
already running finishes on the backend it started on, and the old backend is
closed once its last batch is done, so no batch mixes versions and no row is lost.
A version that fails to verify or load is logged, counted and skipped; the old
version keeps serving until ``CURRENT`` changes again.

:meth:`HotSwappingBackend.infer_batch` returns the vectors together with
the version that produced them, so a caller can stamp every row exactly, even when
another thread swaps versions right after the batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.backends.base import BatchResult, EmbeddingBackend
from flinkai.backends.catalog import create_plain_backend
from flinkai.backends.errors import BackendError
from flinkai.config import Config
from flinkai.models.control import ControlSubscription, ControlTopic, subscribe
from flinkai.models.registry import (
    POINTER_FILE,
    ModelRegistry,
    PublishedModel,
    RegistryConfig,
    RegistryError,
    VerifyMode,
    registry_root,
)

__all__ = [
    "BackendFactory",
    "HotSwapStats",
    "HotSwappingBackend",
    "artifact_dir_factory",
    "hot_swapping_backend",
]

log = logging.getLogger(__name__)

#: Builds a (not yet loaded) backend for one published version.
BackendFactory = Callable[[PublishedModel], EmbeddingBackend]


@dataclass(frozen=True)
class HotSwapStats:
    """Counters of one :class:`HotSwappingBackend`.

    Attributes:
        version: The version serving new batches.
        sequence: Its publish sequence number.
        swaps: Versions swapped in since :meth:`~HotSwappingBackend.load`.
        rejections: Versions that failed to verify or load, and unreadable pointers.
        polls: Times ``CURRENT`` was stat'ed.
        last_rejection: The reason of the latest rejection, if any.
    """

    version: str
    sequence: int
    swaps: int
    rejections: int
    polls: int
    last_rejection: str | None


@dataclass
class _Slot:
    """One loaded version and the batches running on it."""

    backend: EmbeddingBackend
    published: PublishedModel
    manifest_sha256: str
    inflight: int = 0
    retired: bool = False
    closed: bool = False

    @property
    def label(self) -> str:
        return self.published.model_version


class HotSwappingBackend(EmbeddingBackend):
    """An embedding backend that follows a model's ``CURRENT`` version in a registry.

    Args:
        registry: Where versions are published.
        model_name: The model's name in the registry.
        factory: Builds the backend of one version (not loaded; this class loads it),
            e.g. :func:`artifact_dir_factory`.
        poll_interval_s: Least time between two looks at ``CURRENT``; 0 looks before
            every batch (a ``stat``, about a microsecond).
        verify: How a new version's files are checked before loading it.
        allow_dim_change: Accept a version with another embedding width.
        control: A Kafka control topic whose ``reload`` messages for ``model_name``
            call :meth:`request_reload` (see :mod:`flinkai.models.control`); read
            from :meth:`load` until :meth:`close`. The ``CURRENT`` poll runs either way.
        clock: Monotonic seconds; tests pass a fake one.

    Thread-safe: UDF instances sharing this backend may call it concurrently. The
    thread that notices a new version loads it before running its own batch; other
    threads keep using the old version meanwhile.

    Example:
        >>> backend = HotSwappingBackend(  # doctest: +SKIP
        ...     ModelRegistry("/srv/models"), "minilm", artifact_dir_factory(config)
        ... )
        >>> with backend:  # doctest: +SKIP
        ...     result = backend.infer_batch(["a text"])  # .outputs, .model_version
    """

    name = "hotswap"

    def __init__(
        self,
        registry: ModelRegistry,
        model_name: str,
        factory: BackendFactory,
        *,
        poll_interval_s: float = 5.0,
        verify: VerifyMode = "once",
        allow_dim_change: bool = False,
        control: ControlTopic | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if poll_interval_s < 0:
            raise ValueError(f"poll_interval_s must be >= 0, got {poll_interval_s}")
        self.registry = registry
        self.model_name = model_name
        self.factory = factory
        self.poll_interval_s = poll_interval_s
        self.verify: VerifyMode = verify
        self.allow_dim_change = allow_dim_change
        self.control_topic = control
        self._control: ControlSubscription | None = None
        self._clock = clock
        self._state = threading.Lock()  # guards _active, slot counters, _last_label
        self._swap = threading.Lock()  # one thread checks and loads at a time
        self._active: _Slot | None = None
        self._retired: list[_Slot] = []
        self._last_label = "unknown"
        self._seen_signature: tuple[int, ...] | None = None
        self._next_poll = 0.0
        self._reload = threading.Event()
        self._swaps = 0
        self._rejections = 0
        self._polls = 0
        self._last_rejection: str | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def load(self) -> None:
        """Load the current version; fails if there is none or it is damaged.

        Raises:
            ModelNotPublishedError: Nothing is published under ``model_name``.
            CorruptVersionError: The current version fails verification.
            FlinkAIError: The version's backend failed to load.
        """
        with self._swap:
            if self._active is not None:
                return
            if self.control_topic is not None and self._control is None:
                # Before reading CURRENT: a publish during the load is then either read
                # now or announced to the listener.
                self._control = subscribe(self.control_topic, self.model_name, self)
            try:
                self._load_current()
            except BaseException:
                self._unsubscribe()
                raise

    def _load_current(self) -> None:
        """Load the version ``CURRENT`` names and make it serve; under ``_swap``."""
        t0 = time.perf_counter()
        self._seen_signature = self._pointer_signature()
        pointer = self.registry.read_pointer(self.model_name)
        published = self.registry.load(
            self.model_name,
            pointer.version,
            verify=self.verify,
            manifest_sha256=pointer.manifest_sha256,
        )
        self.cold_start.phases_s["registry_verify"] = time.perf_counter() - t0
        backend = self.factory(published)
        backend.load()
        self.cold_start.phases_s.update(backend.cold_start.phases_s)
        self.dim = backend.dim
        slot = _Slot(backend, published, pointer.manifest_sha256)
        with self._state:
            self._active = slot
            self._last_label = slot.label
        self._next_poll = self._clock() + self.poll_interval_s
        log.info("serving %s from %s", slot.label, published.path)

    def close(self) -> None:
        """Stop listening to the control topic; close the serving backend and any old one."""
        self._unsubscribe()
        with self._swap, self._state:
            slots = [s for s in [self._active, *self._retired] if s is not None and not s.closed]
            for slot in slots:
                slot.closed = True
            self._active = None
            self._retired = []
        for slot in slots:
            slot.backend.close()

    def _unsubscribe(self) -> None:
        subscription, self._control = self._control, None
        if subscription is not None:
            subscription.close()

    @property
    def control(self) -> ControlSubscription | None:
        """The control-topic subscription while loaded, if a control topic is set."""
        return self._control

    # -- inference ------------------------------------------------------------------------

    def batch_size(self) -> int:
        slot = self._active
        return slot.backend.batch_size() if slot is not None else super().batch_size()

    @property
    def model_version(self) -> str:
        """The version that ran the latest batch (the loaded one before any batch)."""
        return self._last_label

    @property
    def published(self) -> PublishedModel:
        """The version serving new batches."""
        slot = self._active
        if slot is None:
            raise BackendError(f"{type(self).__name__} used before load()")
        return slot.published

    def infer_batch(self, batch: Sequence[str]) -> BatchResult:
        """Embed texts, first swapping to a newer version if one is due.

        Returns:
            The vectors, and ``<name>@<version>`` of the one version that computed all of them.

        Raises:
            BackendError: Called before :meth:`load`, or the backend failed on the batch.
        """
        self._maybe_swap()
        with self._state:
            slot = self._active
            if slot is None:
                raise BackendError(f"{type(self).__name__}.infer_batch called before load()")
            slot.inflight += 1
        try:
            vectors = slot.backend.infer_batch(batch).outputs
        finally:
            with self._state:
                slot.inflight -= 1
                self._last_label = slot.label
                close_now = slot.retired and slot.inflight == 0 and not slot.closed
                if close_now:
                    slot.closed = True
                    self._retired.remove(slot)
            if close_now:
                self._close_retired(slot)
        return BatchResult(vectors, slot.label)

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        return self.infer_batch(batch).outputs

    # -- swapping -------------------------------------------------------------------------

    def request_reload(self) -> None:
        """Look at ``CURRENT`` before the next batch, even if it looks unchanged.

        For an external trigger (a control-topic message, a signal): it also retries a
        version rejected earlier, e.g. after its files were repaired.
        """
        self._reload.set()

    def check_now(self) -> bool:
        """Look at ``CURRENT`` now and swap if it names another version.

        Returns:
            Whether a new version now serves.
        """
        with self._swap:
            return self._check(force=True)

    @property
    def stats(self) -> HotSwapStats:
        slot = self._active
        return HotSwapStats(
            version=slot.label if slot else "unknown",
            sequence=slot.published.sequence if slot else -1,
            swaps=self._swaps,
            rejections=self._rejections,
            polls=self._polls,
            last_rejection=self._last_rejection,
        )

    def _maybe_swap(self) -> None:
        now = self._clock()
        if now < self._next_poll and not self._reload.is_set():
            return
        # Another thread is already checking (or loading): keep serving, don't queue up.
        if not self._swap.acquire(blocking=False):
            return
        try:
            force = self._reload.is_set()
            self._reload.clear()
            self._next_poll = now + self.poll_interval_s
            if self._active is not None:
                self._check(force=force)
        finally:
            self._swap.release()

    def _pointer_signature(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.registry.pointer_path(self.model_name))
        except FileNotFoundError:
            return None
        # CURRENT is replaced by a rename, so its inode changes on every publish.
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)

    def _check(self, *, force: bool) -> bool:
        """Swap to the version ``CURRENT`` names if it is new and loads; under ``_swap``."""
        active = self._active
        if active is None:
            return False
        self._polls += 1
        try:
            signature = self._pointer_signature()
        except OSError as e:
            self._reject(f"cannot stat {POINTER_FILE}: {e}")
            return False
        if signature == self._seen_signature and not force:
            return False
        self._seen_signature = signature
        try:
            pointer = self.registry.read_pointer(self.model_name)
        except RegistryError as e:
            self._reject(str(e))
            return False
        if (pointer.version, pointer.manifest_sha256) == (
            active.published.version,
            active.manifest_sha256,
        ):
            return False  # rewritten pointer, same version (e.g. identical re-publish)
        t0 = time.perf_counter()
        backend: EmbeddingBackend | None = None
        try:
            published = self.registry.load(
                self.model_name,
                pointer.version,
                verify=self.verify,
                manifest_sha256=pointer.manifest_sha256,
            )
            backend = self.factory(published)
            backend.load()
            if backend.dim != self.dim and not self.allow_dim_change:
                raise RegistryError(
                    f"{published.model_version} embeds into {backend.dim} dimensions, the "
                    f"serving {active.label} into {self.dim} (allow_dim_change is off)"
                )
        # Whatever breaks while loading a new version, the old one must keep serving.
        except Exception as e:
            if backend is not None:
                self._close_quietly(backend, f"{self.model_name}@{pointer.version}")
            self._reject(f"{self.model_name}@{pointer.version}: {type(e).__name__}: {e}")
            return False
        slot = _Slot(backend, published, pointer.manifest_sha256)
        with self._state:
            old, self._active = active, slot
            self.dim = backend.dim
            close_old = old.inflight == 0
            if close_old:
                old.closed = True
            else:
                old.retired = True  # the last batch still running on it closes it
                self._retired.append(old)
        self._swaps += 1
        log.info(
            "hot swap %s -> %s (sequence %d, verified and warmed in %.2fs)",
            active.label,
            slot.label,
            published.sequence,
            time.perf_counter() - t0,
        )
        if close_old:
            self._close_retired(old)
        return True

    def _reject(self, reason: str) -> None:
        self._rejections += 1
        self._last_rejection = reason
        serving = self._active.label if self._active else "nothing"
        log.error(
            "rejected a new version of %s, still serving %s: %s", self.model_name, serving, reason
        )

    def _close_retired(self, slot: _Slot) -> None:
        self._close_quietly(slot.backend, slot.label)
        log.info("closed %s", slot.label)

    @staticmethod
    def _close_quietly(backend: EmbeddingBackend, label: str) -> None:
        try:
            backend.close()
        # A failing close of a backend no batch uses must not fail the batch that triggered it.
        except Exception:
            log.exception("closing the backend of %s failed", label)


def artifact_dir_factory(config: Config) -> BackendFactory:
    """A factory for ``config.embedding.backend`` with ``model.dir`` set to the version folder.

    Fits backends that load from ``ModelConfig.dir`` (``onnx``): publish the folder
    written by ``flinkai model export``. The artifact manifest's ``name`` must equal
    ``model.name``, and its ``dim`` ``model.dim``, or loading the version fails.
    """

    def build(published: PublishedModel) -> EmbeddingBackend:
        # The model section points at the version's folder; a plain backend, never
        # another hot-swapping one (create_plain_backend ignores the registry section).
        version_config = dataclasses.replace(
            config, model=dataclasses.replace(config.model, dir=str(published.path))
        )
        return create_plain_backend(version_config)

    return build


def hot_swapping_backend(
    config: Config,
    registry_config: RegistryConfig,
    *,
    factory: BackendFactory | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> HotSwappingBackend:
    """The hot-swapping backend a config describes (not loaded).

    Args:
        config: The flinkai config; ``model.name`` is the default registry name.
        registry_config: Registry root, name, poll interval, checks and control topic
            (read from ``config.kafka.bootstrap_servers``).
        factory: Builds each version's backend; :func:`artifact_dir_factory` by default.
        clock: Monotonic seconds.
    """
    return HotSwappingBackend(
        ModelRegistry(registry_root(registry_config)),
        registry_config.name or config.model.name,
        factory or artifact_dir_factory(config),
        poll_interval_s=registry_config.poll_interval_s,
        verify=registry_config.verify,
        allow_dim_change=registry_config.allow_dim_change,
        control=(
            ControlTopic(config.kafka.bootstrap_servers, registry_config.control_topic)
            if registry_config.control_topic
            else None
        ),
        clock=clock,
    )
