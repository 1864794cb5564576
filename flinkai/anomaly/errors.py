"""Errors raised by the anomaly-detection scoring code."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["AnomalyError", "NabDataError"]


class AnomalyError(FlinkAIError):
    """Base class for errors from :mod:`flinkai.anomaly`."""


class NabDataError(AnomalyError, ValueError):
    """A NAB folder, window list or detector output is malformed or inconsistent."""
