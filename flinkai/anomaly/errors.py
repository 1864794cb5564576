"""Errors raised by the anomaly-detection code (scoring, models)."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["AnomalyError", "AnomalyModelError", "DetectorInputError", "NabDataError"]


class AnomalyError(FlinkAIError):
    """Base class for errors from :mod:`flinkai.anomaly`."""


class NabDataError(AnomalyError, ValueError):
    """A NAB folder, window list or detector output is malformed or inconsistent."""


class AnomalyModelError(AnomalyError):
    """An anomaly model is missing, malformed, or cannot be trained or exported."""


class DetectorInputError(AnomalyError, ValueError):
    """A streaming detector was given a value, setting or snapshot it cannot use."""
