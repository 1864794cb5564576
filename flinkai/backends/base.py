"""The contract every inference backend implements.

A backend is created cheaply, then :meth:`InferenceBackend.load` does the expensive
part (session create, model load, warm-up) once per worker process. Flink UDFs call
``load`` in ``open()`` and ``close`` in ``close()``; they never load per row.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from flinkai.config import EmbeddingConfig

__all__ = ["BatchResult", "ColdStart", "EmbeddingBackend", "InferenceBackend"]

In = TypeVar("In")


@dataclass
class ColdStart:
    """Seconds spent in each start-up phase, for the benchmark's cold-start report."""

    phases_s: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return sum(self.phases_s.values())


class BatchResult(NamedTuple):
    """The outputs of one batch, and the exact model version that computed all of them.

    The version travels with the outputs, as in Beam's ``PredictionResult`` (also a
    named tuple): a hot-swapping backend may switch versions right after a batch, and
    every row must name the version that really produced it.

    Attributes:
        outputs: One row per input, in input order.
        model_version: ``<name>@<version>`` of the model that ran the batch.
    """

    outputs: np.ndarray
    model_version: str


class InferenceBackend(abc.ABC, Generic[In]):
    """Load a model, run batches, release resources.

    Every model call in flinkai goes through this contract. Required: :meth:`load`,
    :meth:`_infer`. Hooks with defaults: :meth:`batch_size` and :attr:`model_version`.
    :meth:`infer_batch` returns the outputs with the version that produced them.
    """

    #: Short name used in metrics labels and config (``onnx``, ``triton``, ...).
    name: str = "backend"

    def __init__(self) -> None:
        self.cold_start = ColdStart()

    @abc.abstractmethod
    def load(self) -> None:
        """Do the expensive, one-off work. Idempotent."""

    @abc.abstractmethod
    def _infer(self, batch: Sequence[In]) -> np.ndarray:
        """Run one batch on the loaded model; one output row per input, in input order."""

    def infer_batch(self, batch: Sequence[In]) -> BatchResult:
        """Run one batch; the outputs with the version of the model that ran it."""
        return BatchResult(self._infer(batch), self.model_version)

    def close(self) -> None:
        """Release sessions, connections and device memory."""

    def batch_size(self) -> int:
        """Preferred number of inputs per ``infer_batch`` call."""
        return 32

    @property
    def model_version(self) -> str:
        """Identifies the exact model that produced an output (written with each row)."""
        return "unknown"

    def __enter__(self) -> InferenceBackend[In]:
        self.load()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EmbeddingBackend(InferenceBackend[str]):
    """Text in, one float32 vector of :attr:`dim` per text out (L2-normalised)."""

    dim: int = 0
    #: Sub-batch size and length sorting; each backend sets it in ``__init__``
    #: (``EmbeddingConfig`` rejects a bad batch size itself).
    embedding_config: EmbeddingConfig = EmbeddingConfig()
    #: ``<name>@<version>`` of the loaded model; backends set it in :meth:`load`.
    _version: str = "unknown"

    def batch_size(self) -> int:
        return self.embedding_config.batch_size

    @property
    def model_version(self) -> str:
        return self._version
