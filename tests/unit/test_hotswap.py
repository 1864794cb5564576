"""Hot swap between batches, with a fake backend and a fake clock: no model needed."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import BackendError
from flinkai.backends.hotswap import (
    HotSwappingBackend,
    hot_swapping_backend,
)
from flinkai.config import Config
from flinkai.models.registry import (
    POINTER_FILE,
    REGISTRY_MANIFEST,
    ModelNotPublishedError,
    ModelRegistry,
    PublishedModel,
    RegistryConfig,
)

NAME = "fake-model"
DIM = 8
WEIGHTS = "weights.bin"


def expected_vector(version: str, text: str, dim: int = DIM) -> np.ndarray:
    """What version ``version`` of the fake model returns for ``text``."""
    digest = hashlib.sha256(f"{version}|{text}".encode()).digest()
    v = np.frombuffer(digest[: dim * 4], dtype=np.uint8).astype(np.float32)[:dim] + 1.0
    return v / np.linalg.norm(v)


class FakeBackend(EmbeddingBackend):
    """Deterministic vectors from a hash of (version, text); records its lifecycle."""

    name = "fake"

    def __init__(
        self,
        published: PublishedModel,
        *,
        on_batch: Callable[[FakeBackend], None] | None = None,
    ) -> None:
        super().__init__()
        self.published = published
        self.on_batch = on_batch
        self.loaded = False
        self.closed = False
        self.dim = 0

    def load(self) -> None:
        weights = self.published.file(WEIGHTS).read_bytes()
        if weights.startswith(b"BROKEN"):
            raise BackendError(f"cannot parse {WEIGHTS}")
        self.dim = int(weights.split(b":")[0])
        self.loaded = True

    def close(self) -> None:
        self.closed = True

    @property
    def model_version(self) -> str:
        return self.published.model_version

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        if not self.loaded or self.closed:
            raise BackendError(f"{self.model_version} used while not loaded")
        if self.on_batch is not None:
            self.on_batch(self)
        version = self.published.version
        return np.stack([expected_vector(version, t, self.dim) for t in batch])


class Factory:
    """Builds FakeBackends and keeps them, so tests can check which were closed."""

    def __init__(self) -> None:
        self.built: list[FakeBackend] = []
        self.on_batch: Callable[[FakeBackend], None] | None = None

    def __call__(self, published: PublishedModel) -> EmbeddingBackend:
        backend = FakeBackend(published, on_batch=self.on_batch)
        self.built.append(backend)
        return backend


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def publish(reg: ModelRegistry, tag: str, *, dim: int = DIM, weights: bytes | None = None) -> str:
    payload = weights if weights is not None else f"{dim}:{tag}".encode()
    return reg.publish(NAME, {WEIGHTS: payload, "notes.txt": tag.encode()}).version


def rows_version(vectors: np.ndarray, texts: Sequence[str], candidates: Sequence[str]) -> set[str]:
    """The versions whose fake model produced each row (one entry per distinct version)."""
    found = set()
    for row, text in zip(vectors, texts, strict=True):
        matches = [v for v in candidates if np.allclose(row, expected_vector(v, text, len(row)))]
        assert len(matches) == 1, f"row for {text!r} matches {matches}"
        found.add(matches[0])
    return found


@pytest.fixture
def reg(tmp_path: Path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "registry")


@pytest.fixture
def factory() -> Factory:
    return Factory()


def _backend(
    reg: ModelRegistry, factory: Factory, clock: Callable[[], float], poll_s: float = 10.0
) -> HotSwappingBackend:
    backend = HotSwappingBackend(reg, NAME, factory, poll_interval_s=poll_s, clock=clock)
    backend.load()
    return backend


TEXTS = ["alpha", "beta", "gamma"]


def test_new_version_is_picked_up_between_batches_after_the_poll_interval(
    reg: ModelRegistry, factory: Factory
) -> None:
    v1 = publish(reg, "one")
    clock = FakeClock()
    backend = _backend(reg, factory, clock)
    assert backend.model_version == f"{NAME}@{v1}"
    assert backend.dim == DIM

    vectors, version = backend.infer_batch(TEXTS)
    assert version == f"{NAME}@{v1}"
    assert rows_version(vectors, TEXTS, [v1]) == {v1}

    v2 = publish(reg, "two")
    clock.now = 5.0  # poll not due yet
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert not factory.built[0].closed

    clock.now = 10.0
    vectors, version = backend.infer_batch(TEXTS)
    assert version == f"{NAME}@{v2}"
    assert rows_version(vectors, TEXTS, [v1, v2]) == {v2}
    assert backend.model_version == f"{NAME}@{v2}"
    assert factory.built[0].closed, "the old backend is closed after the swap"
    assert backend.stats.swaps == 1
    assert backend.stats.sequence == 2
    backend.close()
    assert factory.built[1].closed


def test_publish_during_a_batch_takes_effect_on_the_next_one(
    reg: ModelRegistry, factory: Factory
) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    published: list[str] = []

    def publish_once(_: FakeBackend) -> None:
        if not published:
            published.append(publish(reg, "two"))

    factory.built[0].on_batch = publish_once
    vectors, version = backend.infer_batch(TEXTS)
    assert version == f"{NAME}@{v1}"
    v2 = published[0]
    assert rows_version(vectors, TEXTS, [v1, v2]) == {v1}
    vectors, version = backend.infer_batch(TEXTS)
    assert version == f"{NAME}@{v2}"
    assert rows_version(vectors, TEXTS, [v1, v2]) == {v2}


def test_batch_in_flight_finishes_on_the_old_version(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock())
    started, release = threading.Event(), threading.Event()

    def block(_: FakeBackend) -> None:
        started.set()
        assert release.wait(10)

    factory.built[0].on_batch = block
    result: list[tuple[np.ndarray, str]] = []
    worker = threading.Thread(target=lambda: result.append(backend.infer_batch(TEXTS)))
    worker.start()
    assert started.wait(10)

    v2 = publish(reg, "two")
    assert backend.check_now()
    assert not factory.built[0].closed, "still running a batch"
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v2}"

    release.set()
    worker.join(10)
    vectors, version = result[0]
    assert version == f"{NAME}@{v1}"
    assert rows_version(vectors, TEXTS, [v1, v2]) == {v1}
    assert factory.built[0].closed, "closed by its last batch"
    assert not factory.built[1].closed


@pytest.mark.parametrize("consumers", [1, 2])
def test_ten_publishes_under_steady_load(
    reg: ModelRegistry, factory: Factory, consumers: int
) -> None:
    """0 failed rows, one version per batch, versions never go back, last one wins."""
    sequence = {publish(reg, "v0"): 0}
    backend = HotSwappingBackend(reg, NAME, factory, poll_interval_s=0.0)
    backend.load()
    done = threading.Event()
    failures: list[BaseException] = []
    per_thread: list[list[tuple[str, np.ndarray]]] = [[] for _ in range(consumers)]
    texts = [f"text {i}" for i in range(16)]

    def publisher() -> None:
        try:
            for i in range(1, 11):
                sequence[publish(reg, f"v{i}")] = i
                # Wait until it serves, so each of the 10 publishes is a swap.
                for _ in range(2500):
                    if backend.stats.swaps >= i:
                        break
                    threading.Event().wait(0.002)
        except BaseException as e:
            failures.append(e)
        finally:
            done.set()

    def consumer(out: list[tuple[str, np.ndarray]]) -> None:
        try:
            while not done.is_set() or len(out) < 200:
                out.append(backend.infer_batch(texts)[::-1])
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=publisher)] + [
        threading.Thread(target=consumer, args=(out,)) for out in per_thread
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures

    last = max(sequence, key=lambda v: sequence[v])
    expected = {v: np.stack([expected_vector(v, t) for t in texts]) for v in sequence}
    for out in per_thread:
        assert len(out) >= 200
        for label, vectors in out:
            version = label.split("@", 1)[1]
            # Row by row: every row comes from the version the batch is stamped with.
            assert np.array_equal(vectors, expected[version]), label
        seqs = [sequence[label.split("@", 1)[1]] for label, _ in out]
        assert seqs == sorted(seqs), "versions per batch never go back"
        # A consumer's last batch may have started just before another thread swapped.
        assert seqs[-1] >= 9
        assert len(set(seqs)) >= 2
    assert backend.stats.swaps == 10, "every publish was swapped in"
    assert backend.infer_batch(texts)[1] == f"{NAME}@{last}"
    assert backend.stats.rejections == 0
    # Every backend but the serving one has been closed.
    assert [b.closed for b in factory.built] == [True] * (len(factory.built) - 1) + [False]
    backend.close()


def test_corrupt_version_is_rejected_and_old_keeps_serving(
    reg: ModelRegistry, factory: Factory
) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    v2 = publish(reg, "two")
    weights = reg.version_dir(NAME, v2) / WEIGHTS
    original = weights.read_bytes()
    weights.write_bytes(bytes([original[0] ^ 0xFF]) + original[1:])

    vectors, version = backend.infer_batch(TEXTS)
    assert version == f"{NAME}@{v1}"
    assert rows_version(vectors, TEXTS, [v1, v2]) == {v1}
    assert backend.stats.rejections == 1
    assert "sha256" in str(backend.stats.last_rejection)
    assert len(factory.built) == 1, "a version failing verification is never built"

    # Not retried on every batch while CURRENT is unchanged...
    backend.infer_batch(TEXTS)
    assert backend.stats.rejections == 1
    # ...but on request, e.g. after a repair.
    weights.write_bytes(original)
    backend.request_reload()
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v2}"
    assert backend.stats.swaps == 1


def test_missing_manifest_is_rejected(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    v2 = publish(reg, "two")
    (reg.version_dir(NAME, v2) / REGISTRY_MANIFEST).unlink()
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert "manifest is missing" in str(backend.stats.last_rejection)
    # The next good publish is taken.
    v3 = publish(reg, "three")
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v3}"


def test_backend_that_fails_to_load_is_rejected_and_closed(
    reg: ModelRegistry, factory: Factory
) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    publish(reg, "two", weights=b"BROKEN model file")
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert "cannot parse" in str(backend.stats.last_rejection)
    assert factory.built[1].closed
    assert not factory.built[0].closed


def test_unreadable_pointer_is_rejected(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    (reg.root / NAME / POINTER_FILE).write_text("garbage")
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert "invalid pointer" in str(backend.stats.last_rejection)
    v2 = publish(reg, "two")
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v2}"


def test_dimension_change_is_rejected_unless_allowed(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    v2 = publish(reg, "wide", dim=16)
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert "16 dimensions" in str(backend.stats.last_rejection)

    relaxed = HotSwappingBackend(reg, NAME, factory, poll_interval_s=0.0, allow_dim_change=True)
    reg.rollback(NAME, v1)
    relaxed.load()
    reg.rollback(NAME, v2)
    vectors, version = relaxed.infer_batch(TEXTS)
    assert (version, vectors.shape, relaxed.dim) == (f"{NAME}@{v2}", (3, 16), 16)


def test_rollback_is_followed(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    v2 = publish(reg, "two")
    backend = _backend(reg, factory, FakeClock(), poll_s=0.0)
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v2}"
    reg.rollback(NAME, v1)
    assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"


def test_load_without_a_published_version_fails(reg: ModelRegistry, factory: Factory) -> None:
    backend = HotSwappingBackend(reg, NAME, factory)
    with pytest.raises(ModelNotPublishedError):
        backend.load()
    with pytest.raises(BackendError, match="before load"):
        backend.infer_batch(TEXTS)


def test_every_backend_returns_the_version_with_its_outputs(
    reg: ModelRegistry, factory: Factory
) -> None:
    v1 = publish(reg, "one")
    plain = FakeBackend(reg.current(NAME))
    plain.load()
    assert plain.infer_batch(TEXTS).model_version == f"{NAME}@{v1}"
    hot = _backend(reg, factory, FakeClock())
    vectors, version = hot.infer_batch(TEXTS)
    assert version == f"{NAME}@{v1}"
    assert np.array_equal(vectors, plain.infer_batch(TEXTS).outputs)


def test_built_from_config(reg: ModelRegistry, factory: Factory) -> None:
    v1 = publish(reg, "one")
    config = Config().with_overrides(model={"name": NAME})
    backend = hot_swapping_backend(
        config, RegistryConfig(root=str(reg.root), poll_interval_s=1.5), factory=factory
    )
    assert (backend.model_name, backend.poll_interval_s) == (NAME, 1.5)
    with backend:
        assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
    assert factory.built[0].closed
