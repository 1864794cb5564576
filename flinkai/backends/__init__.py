"""The inference layer: every model call in flinkai goes through a backend here.

:mod:`.base` is the contract (``infer_batch`` returns the outputs with the model
version), one module per backend (:mod:`.onnx`, :mod:`.triton`,
:mod:`.sentence_transformers`, :mod:`.scoring`), :mod:`.hotswap` follows a registry's
current version, :mod:`.catalog` builds a plain backend by name, :mod:`.factory`
builds the backend a config names (hot-swapping with a registry), :mod:`.shared`
keeps one loaded backend per worker process.
"""

from flinkai.backends.base import BatchResult, ColdStart, EmbeddingBackend, InferenceBackend
from flinkai.backends.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CircuitOpenError,
    InvalidInputError,
    ModelNotFoundError,
)

__all__ = [
    "BackendError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BatchResult",
    "CircuitOpenError",
    "ColdStart",
    "EmbeddingBackend",
    "InferenceBackend",
    "InvalidInputError",
    "ModelNotFoundError",
]
