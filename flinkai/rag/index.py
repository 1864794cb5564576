"""The ``VectorIndex`` contract: versioned documents of chunks, searched by cosine.

A document is a ``doc_id``, an integer ``version`` and its chunks (``doc_id#0``,
``doc_id#1``, ...). The index keeps, per document, the highest version it has seen,
live or deleted (a tombstone). An operation carrying a version that is not newer
than that is ``STALE`` and changes nothing. This is what makes a sink fed from
Kafka effectively-once under replay:

- replaying an upsert or a delete that was already applied is a no-op;
- an older version replayed after a newer one never overwrites it;
- an older upsert replayed after a delete never resurrects the document;
- a newer upsert replaces *all* chunks of the document, so a version with fewer
  chunks leaves none of the old ones behind.

Writers of one ``doc_id`` must be serialised (a Flink sink keyed by ``doc_id``, or
one sink instance): the guard is read-then-write, not a server-side transaction.
Different documents may be written concurrently.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import Self

import numpy as np

from flinkai.rag.errors import InvalidChunkError

__all__ = [
    "Chunk",
    "DeleteDocument",
    "Hit",
    "Operation",
    "Outcome",
    "UpsertDocument",
    "VectorIndex",
    "chunk_id",
    "normalise",
    "plan_outcomes",
    "validate_operation",
]

#: Versions are stored as 64-bit integers (Chroma metadata, Kafka timestamps in ms).
_MAX_VERSION = 2**63 - 1


def chunk_id(doc_id: str, n: int) -> str:
    """The id of a document's ``n``-th chunk: ``doc_id#n``."""
    return f"{doc_id}#{n}"


@dataclass(frozen=True)
class Chunk:
    """One passage of a document and its embedding.

    Attributes:
        doc_id: The document it belongs to.
        chunk_id: ``f"{doc_id}#{n}"``; ``n`` counts from 0 without gaps.
        text: The passage, returned by queries as :attr:`Hit.text`.
        vector: float32 embedding; indexes L2-normalise it (cosine space).
    """

    doc_id: str
    chunk_id: str
    text: str
    vector: np.ndarray


@dataclass(frozen=True)
class Hit:
    """One query result.

    Attributes:
        doc_id: Document of the chunk.
        chunk_id: ``doc_id#n``.
        score: Cosine similarity to the query, in [-1, 1]; higher is better.
        text: The chunk's passage.
    """

    doc_id: str
    chunk_id: str
    score: float
    text: str


class Outcome(Enum):
    """What an upsert or delete did."""

    #: The version was newer than any seen for the document; the index changed.
    APPLIED = "applied"
    #: An equal or newer version (live or deleted) is already there; nothing changed.
    STALE = "stale"


@dataclass(frozen=True)
class UpsertDocument:
    """Replace every chunk of ``doc_id`` with ``chunks``, if ``version`` is newer.

    An empty ``chunks`` is allowed: the document is live with no passages.
    """

    doc_id: str
    version: int
    chunks: Sequence[Chunk]


@dataclass(frozen=True)
class DeleteDocument:
    """Remove every chunk of ``doc_id`` and leave a tombstone at ``version``, if newer."""

    doc_id: str
    version: int


Operation = UpsertDocument | DeleteDocument


def normalise(vector: np.ndarray) -> np.ndarray:
    """``vector`` as a 1-D float32 array of unit L2 norm.

    Raises:
        InvalidChunkError: Not 1-D, empty, not finite, or all zeros.
    """
    v = np.asarray(vector, dtype=np.float32)
    if v.ndim != 1 or v.size == 0:
        raise InvalidChunkError(f"a vector must be 1-D and non-empty, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise InvalidChunkError("a vector holds NaN or infinity")
    norm = float(np.linalg.norm(v))
    if norm == 0.0 or not math.isfinite(norm):
        raise InvalidChunkError("a zero vector has no direction; cosine is undefined")
    out: np.ndarray = v / np.float32(norm)
    return out


def validate_operation(op: Operation, dim: int | None = None) -> None:
    """Check an operation against the contract before anything is written.

    Args:
        op: The upsert or delete.
        dim: The index's vector dimension, when it already has one.

    Raises:
        InvalidChunkError: Empty ``doc_id``, a version outside 0..2^63-1, a chunk of
            another document, chunk ids not ``doc_id#0..n-1`` in order, or a bad vector.
    """
    if not isinstance(op.doc_id, str) or not op.doc_id:
        raise InvalidChunkError(f"doc_id must be a non-empty string, got {op.doc_id!r}")
    if isinstance(op.version, bool) or not isinstance(op.version, int):
        raise InvalidChunkError(f"version of {op.doc_id!r} must be an int, got {op.version!r}")
    if not 0 <= op.version <= _MAX_VERSION:
        raise InvalidChunkError(f"version of {op.doc_id!r} must be in 0..2^63-1, got {op.version}")
    if isinstance(op, DeleteDocument):
        return
    dims = {dim} if dim is not None else set()
    for n, chunk in enumerate(op.chunks):
        if chunk.doc_id != op.doc_id:
            raise InvalidChunkError(
                f"chunk {chunk.chunk_id!r} belongs to {chunk.doc_id!r}, not {op.doc_id!r}"
            )
        if chunk.chunk_id != chunk_id(op.doc_id, n):
            raise InvalidChunkError(
                f"chunk {n} of {op.doc_id!r} must have id {chunk_id(op.doc_id, n)!r}, "
                f"got {chunk.chunk_id!r}"
            )
        if not isinstance(chunk.text, str):
            raise InvalidChunkError(f"text of {chunk.chunk_id!r} must be a string")
        v = normalise(chunk.vector)
        dims.add(v.shape[0])
        if len(dims) > 1:
            raise InvalidChunkError(
                f"vector of {chunk.chunk_id!r} has dimension {v.shape[0]}, expected "
                f"{dim if dim is not None else sorted(dims)[0]}"
            )


def plan_outcomes(
    ops: Sequence[Operation], current: dict[str, int]
) -> tuple[list[Outcome], dict[str, Operation]]:
    """Outcomes of ``ops`` applied in order, and the one operation per document to write.

    Applying a batch in order and writing only each document's last applied
    operation leave the same final state, with one write per document.

    Args:
        ops: The batch, in stream order.
        current: doc_id -> highest version the index holds (live or tombstone), for
            the documents in ``ops``.

    Returns:
        The outcome of each operation, and doc_id -> the operation that wins.
    """
    seen = dict(current)
    outcomes: list[Outcome] = []
    winners: dict[str, Operation] = {}
    for op in ops:
        prior = seen.get(op.doc_id)
        if prior is not None and op.version <= prior:
            outcomes.append(Outcome.STALE)
            continue
        seen[op.doc_id] = op.version
        winners[op.doc_id] = op
        outcomes.append(Outcome.APPLIED)
    return outcomes, winners


class VectorIndex(ABC):
    """A store of versioned documents of chunks, searched by cosine similarity.

    Implementations: :class:`flinkai.rag.memory.MemoryIndex` (exact, in process;
    the recall baseline) and :class:`flinkai.rag.chroma.ChromaIndex` (the Chroma
    server). Both pass ``tests/unit/test_rag_index_contract.py``.
    """

    @abstractmethod
    def apply(self, ops: Sequence[Operation]) -> list[Outcome]:
        """Apply upserts and deletes in order; one outcome per operation.

        The batch form the sink uses: one round of reads and writes for many
        documents. If it raises part-way (server down), replaying the whole batch
        converges to the state a single successful call leaves.

        Raises:
            InvalidChunkError: An operation breaks the contract; nothing was written.
            IndexUnavailableError: The store failed; replay the batch.
        """

    def upsert_document(self, doc_id: str, version: int, chunks: Sequence[Chunk]) -> Outcome:
        """Replace all chunks of ``doc_id`` if ``version`` is newer than any seen."""
        return self.apply([UpsertDocument(doc_id, version, tuple(chunks))])[0]

    def delete_document(self, doc_id: str, version: int) -> Outcome:
        """Remove ``doc_id`` and keep a tombstone at ``version``, if newer than any seen."""
        return self.apply([DeleteDocument(doc_id, version)])[0]

    @abstractmethod
    def query(self, vector: np.ndarray, k: int) -> list[Hit]:
        """The ``k`` live chunks most similar to ``vector``, best first.

        An empty index returns ``[]``; fewer than ``k`` chunks returns them all.
        """

    @abstractmethod
    def count(self) -> int:
        """Live chunks."""

    @abstractmethod
    def chunk_ids(self) -> dict[str, int]:
        """Every stored chunk id -> the version of the document that wrote it."""

    @abstractmethod
    def documents(self) -> dict[str, int]:
        """Live documents: doc_id -> version (tombstones excluded)."""

    @abstractmethod
    def versions(self) -> dict[str, int]:
        """Every document seen: doc_id -> version, tombstones included."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the data stays (in the server, for Chroma)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
