"""Errors an inference backend raises; each maps to a decision the caller makes."""

from __future__ import annotations

from flinkai.errors import FlinkAIError, SetupError

__all__ = [
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "CircuitOpen",
    "InvalidInput",
    "ModelNotFound",
    "ScoringModelError",
]


class BackendError(FlinkAIError):
    """Base class for inference failures."""


class BackendTimeout(BackendError):
    """A call exceeded its deadline; retrying may succeed."""


class BackendUnavailable(BackendError):
    """The server or device cannot be reached; retry later or fail over."""


class CircuitOpen(BackendUnavailable):
    """Calls are short-circuited after repeated failures, until the reset timeout passes."""


class ModelNotFound(BackendError):
    """The model (or version) does not exist where the backend looked; do not retry."""


class InvalidInput(BackendError):
    """The batch itself is bad (shape, dtype); do not retry, dead-letter it."""


class ScoringModelError(SetupError):
    """The scoring model is missing, unreadable, or does not match its ``PredictConfig``."""
