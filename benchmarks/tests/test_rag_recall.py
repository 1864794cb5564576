"""recall@k and the exact copy, checked on indexes whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.rag.index import Chunk, UpsertDocument
from flinkai.rag.memory import MemoryIndex
from flinkai_bench.research.recall import exact_copy, recall_at_k


def _index(ids: range, x: np.ndarray) -> MemoryIndex:
    index = MemoryIndex()
    index.apply([UpsertDocument(f"d{i}", 1, [Chunk(f"d{i}", f"d{i}#0", "", x[i])]) for i in ids])
    return index


def test_identical_indexes_have_recall_one_and_a_half_index_has_less() -> None:
    x = np.random.default_rng(3).standard_normal((200, 8)).astype(np.float32)
    queries = np.random.default_rng(4).standard_normal((30, 8)).astype(np.float32)
    full = _index(range(200), x)
    assert recall_at_k(_index(range(200), x), full, queries, 10).recall == 1.0
    # Negative control: an index missing every odd document finds about half.
    half = recall_at_k(_index(range(0, 200, 2), x), full, queries, 10)
    assert 0.2 < half.recall < 0.8
    assert half.worst < 1.0 and half.perfect < 1.0
    assert half.queries == 30 and half.k == 10


def test_exact_copy_keeps_chunks_order_and_versions() -> None:
    v = np.eye(4, dtype=np.float32)
    stored = [
        (Chunk("a", "a#1", "a1", v[1]), 7),
        (Chunk("b", "b#0", "b0", v[2]), 3),
        (Chunk("a", "a#0", "a0", v[0]), 7),
    ]
    copy = exact_copy(stored)
    assert copy.documents() == {"a": 7, "b": 3}
    assert copy.chunk_ids() == {"a#0": 7, "a#1": 7, "b#0": 3}
    assert copy.query(v[1], 1)[0].text == "a1"


def test_recall_needs_queries_and_data() -> None:
    with pytest.raises(ValueError, match="query"):
        recall_at_k(MemoryIndex(), MemoryIndex(), [], 10)
    with pytest.raises(ValueError, match="empty"):
        recall_at_k(MemoryIndex(), MemoryIndex(), [np.ones(4)], 10)
