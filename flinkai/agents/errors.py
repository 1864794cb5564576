"""Errors raised by the risk-decision agents (data, models, graph)."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["AgentsError", "RiskDataError", "RiskModelError"]


class AgentsError(FlinkAIError):
    """Base class for errors from :mod:`flinkai.agents`."""


class RiskDataError(AgentsError, ValueError):
    """A risk data file (transactions, clients) is missing or malformed."""


class RiskModelError(AgentsError):
    """A risk model is missing, malformed, or cannot be trained or loaded."""
