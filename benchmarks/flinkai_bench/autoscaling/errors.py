"""Errors of the autoscaling package."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["ChartError"]


class ChartError(FlinkAIError):
    """The chart could not be rendered, or does not hold what autoscaling needs."""
