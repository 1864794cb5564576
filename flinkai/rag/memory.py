"""An exact, in-process :class:`~flinkai.rag.index.VectorIndex`.

Brute-force cosine over every live chunk: the reference the Chroma index is checked
against (contract tests, recall@k) and a fast index for unit tests. Not shared
between processes and not durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.rag.errors import InvalidChunkError
from flinkai.rag.index import (
    Chunk,
    DeleteDocument,
    Hit,
    Operation,
    Outcome,
    VectorIndex,
    normalise,
    plan_outcomes,
    validate_operation,
)

__all__ = ["MemoryIndex"]


@dataclass(frozen=True)
class _Doc:
    version: int
    deleted: bool
    chunks: tuple[Chunk, ...]


class MemoryIndex(VectorIndex):
    """Exact cosine search over documents held in a dict."""

    def __init__(self) -> None:
        self._docs: dict[str, _Doc] = {}
        self._dim: int | None = None
        # Stacked vectors of the live chunks, rebuilt on the first query after a write.
        self._matrix: np.ndarray | None = None
        self._rows: list[Chunk] = []

    def apply(self, ops: Sequence[Operation]) -> list[Outcome]:
        dim = self._dim
        for op in ops:
            validate_operation(op, dim)
            if isinstance(op, DeleteDocument) or not op.chunks:
                continue
            dim = dim if dim is not None else int(np.asarray(op.chunks[0].vector).shape[0])
        current = {
            op.doc_id: self._docs[op.doc_id].version for op in ops if op.doc_id in self._docs
        }
        outcomes, winners = plan_outcomes(ops, current)
        for doc_id, op in winners.items():
            if isinstance(op, DeleteDocument):
                self._docs[doc_id] = _Doc(op.version, True, ())
            else:
                chunks = tuple(
                    Chunk(c.doc_id, c.chunk_id, c.text, normalise(c.vector)) for c in op.chunks
                )
                self._docs[doc_id] = _Doc(op.version, False, chunks)
        if winners:
            self._dim = dim
            self._matrix = None
        return outcomes

    def query(self, vector: np.ndarray, k: int) -> list[Hit]:
        if k < 1:
            raise InvalidChunkError(f"k must be >= 1, got {k}")
        q = normalise(vector)
        if self._dim is not None and q.shape[0] != self._dim:
            raise InvalidChunkError(
                f"query vector has dimension {q.shape[0]}, the index holds {self._dim}"
            )
        matrix, rows = self._stacked()
        if not rows:
            return []
        scores = matrix @ q
        # Best first; equal scores by chunk id, so the order is deterministic.
        order = sorted(range(len(rows)), key=lambda i: (-float(scores[i]), rows[i].chunk_id))[:k]
        return [
            Hit(rows[i].doc_id, rows[i].chunk_id, float(scores[i]), rows[i].text) for i in order
        ]

    def vectors(self) -> tuple[list[str], np.ndarray]:
        """Chunk ids and their unit vectors (rows in the same order), for exact baselines."""
        matrix, rows = self._stacked()
        return [c.chunk_id for c in rows], matrix

    def count(self) -> int:
        return sum(len(d.chunks) for d in self._docs.values())

    def chunk_ids(self) -> dict[str, int]:
        return {c.chunk_id: d.version for d in self._docs.values() for c in d.chunks}

    def documents(self) -> dict[str, int]:
        return {doc_id: d.version for doc_id, d in self._docs.items() if not d.deleted}

    def versions(self) -> dict[str, int]:
        return {doc_id: d.version for doc_id, d in self._docs.items()}

    def close(self) -> None:
        """Nothing to release; the data stays until the object is dropped."""

    def _stacked(self) -> tuple[np.ndarray, list[Chunk]]:
        if self._matrix is None:
            self._rows = [c for d in self._docs.values() for c in d.chunks]
            dim = self._dim or 0
            self._matrix = (
                np.stack([c.vector for c in self._rows])
                if self._rows
                else np.zeros((0, dim), dtype=np.float32)
            )
        return self._matrix, self._rows
