"""Inference backends: one module per backend, one public class each."""

from flinkai.backends.base import ColdStart, EmbeddingBackend, InferenceBackend
from flinkai.backends.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    CircuitOpen,
    InvalidInput,
    ModelNotFound,
)

__all__ = [
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "CircuitOpen",
    "ColdStart",
    "EmbeddingBackend",
    "InferenceBackend",
    "InvalidInput",
    "ModelNotFound",
]
