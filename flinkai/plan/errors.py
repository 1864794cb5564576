"""Errors of the memory planners."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["PlanError"]


class PlanError(FlinkAIError, ValueError):
    """A planner was given a shape or setting it cannot size (e.g. a negative length)."""
