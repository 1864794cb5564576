"""``text_to_vector``: a batch of texts in, a batch of (embedding, model version, error) out.

Failures are data: an inference error marks every row of the batch with the
reason, and the SQL job routes those rows to the dead-letter topic, so a
failing model server never stops the job and never drops an event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import BackendError
from flinkai.backends.shared import acquire_embedding_backend, release_embedding_backend
from flinkai.config import Config
from flinkai.functions.events import Reason

__all__ = ["EmbeddingFunction", "EmbeddingResult"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddingResult:
    """Column-wise result of one batch; ``errors[i]`` is None when row i succeeded."""

    embeddings: list[np.ndarray | None]
    model_version: str
    errors: list[str | None]


class EmbeddingFunction:
    """Holds a shared backend between ``open`` and ``close``; call it per batch."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._backend: EmbeddingBackend | None = None

    def open(self) -> None:
        if self._backend is None:
            self._backend = acquire_embedding_backend(self.config)

    def close(self) -> None:
        if self._backend is not None:
            release_embedding_backend(self._backend)
            self._backend = None

    @property
    def backend(self) -> EmbeddingBackend:
        if self._backend is None:
            raise RuntimeError("EmbeddingFunction used before open()")
        return self._backend

    def __call__(self, texts: Sequence[str | None]) -> EmbeddingResult:
        backend = self.backend
        n = len(texts)
        errors: list[str | None] = [None] * n
        embeddings: list[np.ndarray | None] = [None] * n
        # The job validates texts first; this guards direct use of the function.
        ok = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        for i in set(range(n)) - set(ok):
            errors[i] = f"{Reason.EMPTY_TEXT.value}: text is null or blank"
        version = backend.model_version
        if ok:
            batch: list[str] = [texts[i] for i in ok]  # type: ignore[misc]
            try:
                # The version comes back with the vectors: a hot-swapping backend may
                # switch versions right after this batch, and every row must name its own.
                result = backend.infer_batch(batch)
                vectors, version = result.outputs, result.model_version
            except BackendError as e:
                log.warning("batch of %d failed: %s", len(ok), e)
                detail = f"{Reason.INFERENCE_FAILED.value}: {type(e).__name__}: {e}"
                for i in ok:
                    errors[i] = detail
            else:
                if vectors.shape != (len(ok), backend.dim):
                    # Never pad or truncate silently: a wrong shape is a backend bug.
                    raise ValueError(
                        f"backend {backend.name} returned shape {vectors.shape}, "
                        f"expected ({len(ok)}, {backend.dim})"
                    )
                for row, i in enumerate(ok):
                    embeddings[i] = vectors[row]
        return EmbeddingResult(embeddings, version, errors)
