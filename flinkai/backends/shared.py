"""One loaded backend per worker process and model, shared by every UDF instance in it.

A Flink Python worker may host several instances of the same UDF (operator
chaining, several functions using one model). Loading a model per instance
multiplies memory and start-up time, so instances borrow a process-wide backend
and the last one to close releases it.
"""

from __future__ import annotations

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.scoring import OnnxScoringBackend
from flinkai.config import Config, PredictConfig
from flinkai.sharing import SharedPool

__all__ = [
    "acquire_embedding_backend",
    "acquire_scoring_backend",
    "live_backends",
    "live_scoring_backends",
    "refs",
    "release_embedding_backend",
    "release_scoring_backend",
]


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
            # A registry backend subscribes to its control topic on this broker.
            d["kafka"]["bootstrap_servers"] if d["registry"]["control_topic"] else None,
        )
    )


_pool: SharedPool[str, EmbeddingBackend] = SharedPool(lambda b: b.close(), "backend")


def acquire_embedding_backend(config: Config) -> EmbeddingBackend:
    """The process's backend for ``config``, loaded on first use."""
    from flinkai.backends.factory import create_embedding_backend

    def create() -> EmbeddingBackend:
        backend = create_embedding_backend(config)
        backend.load()
        return backend

    return _pool.acquire(_key(config), create)


def release_embedding_backend(backend: EmbeddingBackend) -> None:
    """Give a backend back; the last release closes it.

    Raises:
        ValueError: ``backend`` is not held (released twice, or never acquired).
    """
    _pool.release(backend)


def refs(config: Config) -> int:
    """How many holders share the backend for ``config`` (0 when none is loaded)."""
    return _pool.refs(_key(config))


def live_backends() -> int:
    """How many backends are loaded in this process (for tests and metrics)."""
    return len(_pool)


_scoring: SharedPool[PredictConfig, OnnxScoringBackend] = SharedPool(
    lambda b: b.close(), "scoring model"
)


def acquire_scoring_backend(config: PredictConfig) -> OnnxScoringBackend:
    """The process's scoring backend for ``config``, loaded on first use.

    Several UDF instances in one Python worker (chained operators, several queries)
    then share one session instead of each loading the model.
    """

    def create() -> OnnxScoringBackend:
        backend = OnnxScoringBackend(config)
        backend.load()
        return backend

    return _scoring.acquire(config, create)


def release_scoring_backend(backend: OnnxScoringBackend) -> None:
    """Give a scoring backend back; the last release closes it.

    Raises:
        ValueError: ``backend`` is not held (released twice, or never acquired).
    """
    _scoring.release(backend)


def live_scoring_backends() -> int:
    """How many scoring backends this process holds (for tests and diagnostics)."""
    return len(_scoring)
