"""Errors of the SQL functions' logic (row errors are data, not exceptions)."""

from __future__ import annotations

from flinkai.errors import SetupError

__all__ = ["ScoringModelError"]


class ScoringModelError(SetupError):
    """The scoring model is missing, unreadable, or does not match :class:`PredictConfig`."""
