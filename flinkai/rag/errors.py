"""Errors of the vector index and its local server."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["IndexUnavailableError", "InvalidChunkError", "RagError"]


class RagError(FlinkAIError):
    """Base class of the errors :mod:`flinkai.rag` raises."""


class IndexUnavailableError(RagError):
    """The vector store cannot be reached or refused a request.

    The message names the server URL and how to start a local one.
    """


class InvalidChunkError(RagError, ValueError):
    """A chunk, vector, version or document id breaks the index contract.

    Raised before anything is written, so a bad document changes nothing.
    """
