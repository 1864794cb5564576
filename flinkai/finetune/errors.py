"""Errors of the fine-tuning job."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["FinetuneError", "TrainerStateError"]


class FinetuneError(FlinkAIError):
    """Base class of the fine-tuning errors."""


class TrainerStateError(FinetuneError, ValueError):
    """A trainer blob that cannot be restored into this trainer; ``reason`` is a short word.

    Reasons: ``malformed`` (not a trainer blob), ``format`` (another layout version),
    ``mismatch`` (made by a trainer with another base model or settings).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
