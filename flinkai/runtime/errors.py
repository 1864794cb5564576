"""Errors of the SQL script runner."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["JobFailedError", "ScriptError"]


class ScriptError(FlinkAIError):
    """A script cannot run: bad SQL, unknown function, missing placeholder or jar."""


class JobFailedError(FlinkAIError):
    """The Flink job was submitted but failed while running."""
