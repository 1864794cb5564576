"""Errors of the LLM runtime (export, cache, decoder, tokenizer)."""

from __future__ import annotations

from flinkai.errors import FlinkAIError, SetupError

__all__ = ["EXPORT_LLM_HINT", "CacheShapeError", "LlmArtifactError", "LlmError"]

#: How to (re)build the decoder artifacts, appended to errors about them.
EXPORT_LLM_HINT = "run `flinkai model export-llm`"


class LlmError(FlinkAIError):
    """Base class of the LLM runtime's errors."""


class CacheShapeError(LlmError, ValueError):
    """KV-cache tensors disagree in layers, heads, head size, dtype or token count."""


class LlmArtifactError(LlmError, SetupError):
    """The exported decoder is missing, incomplete or does not match its manifest."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{detail} ({EXPORT_LLM_HINT} to rebuild it)")
