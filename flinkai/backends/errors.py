"""Errors an inference backend raises; each maps to a decision the caller makes."""

from __future__ import annotations

from flinkai.errors import FlinkAIError, SetupError

__all__ = [
    "BackendError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "CircuitOpenError",
    "InvalidInputError",
    "ModelNotFoundError",
    "ScoringModelError",
]


class BackendError(FlinkAIError):
    """Base class for inference failures."""


class BackendTimeoutError(BackendError):
    """A call exceeded its deadline; retrying may succeed."""


class BackendUnavailableError(BackendError):
    """The server or device cannot be reached; retry later or fail over."""


class CircuitOpenError(BackendUnavailableError):
    """Calls are short-circuited after repeated failures, until the reset timeout passes."""


class ModelNotFoundError(BackendError):
    """The model (or version) does not exist where the backend looked; do not retry."""


class InvalidInputError(BackendError):
    """The batch itself is bad (shape, dtype); do not retry, dead-letter it."""


class ScoringModelError(SetupError):
    """The scoring model is missing, unreadable, or does not match its ``PredictConfig``."""
