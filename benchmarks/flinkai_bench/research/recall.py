"""recall@k of a vector index against exact search over the same vectors.

An approximate index (Chroma's HNSW) is judged against :class:`MemoryIndex`, which
scores every chunk. Both must hold the same chunks; :func:`exact_copy` builds the
exact one from what a Chroma collection really stores, so the comparison measures
the search, not a difference in data.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.rag.index import Chunk, UpsertDocument, VectorIndex
from flinkai.rag.memory import MemoryIndex

__all__ = ["RecallResult", "exact_copy", "recall_at_k"]


@dataclass(frozen=True)
class RecallResult:
    """recall@k over a set of queries.

    Attributes:
        k: Hits compared per query.
        queries: Number of queries.
        recall: Mean over queries of |approx top-k ∩ exact top-k| / |exact top-k|.
        worst: The lowest per-query recall.
        perfect: Share of queries whose top-k sets are equal.
        query_ms_p50: Median latency of the approximate index's queries.
        query_ms_p99: 99th percentile of those latencies.
    """

    k: int
    queries: int
    recall: float
    worst: float
    perfect: float
    query_ms_p50: float
    query_ms_p99: float


def recall_at_k(
    index: VectorIndex, exact: VectorIndex, queries: Sequence[np.ndarray] | np.ndarray, k: int = 10
) -> RecallResult:
    """Compare ``index``'s top-``k`` chunk ids with ``exact``'s, query by query.

    Raises:
        ValueError: No queries, or the exact index is empty.
    """
    if len(queries) == 0:
        raise ValueError("recall needs at least one query")
    if exact.count() == 0:
        raise ValueError("the exact index is empty; recall is undefined")
    recalls: list[float] = []
    latencies: list[float] = []
    for q in queries:
        want = {h.chunk_id for h in exact.query(q, k)}
        began = time.perf_counter()
        hits = index.query(q, k)
        latencies.append((time.perf_counter() - began) * 1000.0)
        got = {h.chunk_id for h in hits}
        recalls.append(len(want & got) / len(want))
    return RecallResult(
        k=k,
        queries=len(recalls),
        recall=float(np.mean(recalls)),
        worst=float(np.min(recalls)),
        perfect=float(np.mean([r == 1.0 for r in recalls])),
        query_ms_p50=float(np.percentile(latencies, 50)),
        query_ms_p99=float(np.percentile(latencies, 99)),
    )


def exact_copy(stored: Iterable[tuple[Chunk, int]]) -> MemoryIndex:
    """A :class:`MemoryIndex` holding exactly the given chunks, at their versions.

    Args:
        stored: ``(chunk, version)`` pairs, e.g. ``ChromaIndex.stored_chunks()``.
    """
    docs: dict[str, tuple[int, list[Chunk]]] = {}
    for chunk, version in stored:
        docs.setdefault(chunk.doc_id, (version, []))[1].append(chunk)
    exact = MemoryIndex()

    def position(c: Chunk) -> int:
        return int(c.chunk_id.rpartition("#")[2])

    exact.apply(
        [
            UpsertDocument(doc_id, version, sorted(chunks, key=position))
            for doc_id, (version, chunks) in docs.items()
        ]
    )
    return exact
