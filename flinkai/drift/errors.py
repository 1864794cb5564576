"""Errors of :mod:`flinkai.drift`."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["CalibrationError", "DriftError"]


class DriftError(FlinkAIError):
    """Base class of drift detection errors."""


class CalibrationError(DriftError, ValueError):
    """A reference sample cannot calibrate a threshold (too small, no spread)."""
