"""DocumentIndexer and Retriever on the in-memory index with the real MiniLM model.

The same classes run inside ``index_document`` and ``retrieve``; the Flink jobs on the
real Chroma server are tested in tests/integration/test_rag_jobs.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flinkai.config import Config, load_config
from flinkai.functions.doc_events import DocEvent, DocOp
from flinkai.functions.rag_index import DocumentIndexer
from flinkai.functions.retrieve import Retriever
from flinkai.rag.memory import MemoryIndex

T0 = 1764576000000
LONG = " ".join(f"word{i}" for i in range(300))  # 300 words -> 3 chunks of 160/32


@pytest.fixture
def config(model_artifacts: object) -> Config:
    return load_config(env={})


@pytest.fixture
def index() -> MemoryIndex:
    return MemoryIndex()


@pytest.fixture
def indexer(config: Config, index: MemoryIndex) -> Iterator[DocumentIndexer]:
    ix = DocumentIndexer(config, index_factory=lambda _: index)
    ix.open()
    yield ix
    ix.close()


def up(doc: str, version: int, text: str) -> DocEvent:
    return DocEvent(doc, DocOp.UPSERT, version, text)


def delete(doc: str, version: int) -> DocEvent:
    return DocEvent(doc, DocOp.DELETE, version, None)


def test_update_with_fewer_chunks_leaves_no_ghost(
    indexer: DocumentIndexer, index: MemoryIndex
) -> None:
    first = indexer.apply([up("a", T0, LONG), None, up("b", T0, "short text about cats")])
    assert [r.outcome for r in first] == ["APPLIED", None, "APPLIED"]
    assert first[0].chunks == 3 and first[2].chunks == 1
    assert first[0].model_version and first[1].error is None
    assert index.count() == 4
    second = indexer.apply([up("a", T0 + 1, "now one short chunk")])
    assert second[0].outcome == "APPLIED" and second[0].chunks == 1
    assert index.count() == 2
    assert index.documents() == {"a": T0 + 1, "b": T0}


def test_replays_are_stale_and_deletes_stick(indexer: DocumentIndexer, index: MemoryIndex) -> None:
    batch = [up("a", T0 + 5, "five"), up("a", T0 + 3, "three"), delete("b", T0)]
    assert [r.outcome for r in indexer.apply(batch)] == ["APPLIED", "STALE", "APPLIED"]
    # The same batch again (a replay after a restart) changes nothing.
    assert [r.outcome for r in indexer.apply(batch)] == ["STALE", "STALE", "STALE"]
    assert indexer.apply([delete("a", T0 + 6)])[0].outcome == "APPLIED"
    assert indexer.apply([up("a", T0 + 5, "five")])[0].outcome == "STALE"  # no resurrection
    assert index.documents() == {} and index.count() == 0


def test_document_over_the_chunk_limit_is_an_error_not_a_cut(config: Config) -> None:
    small = config.with_overrides(rag={"max_chunks": 2})
    index = MemoryIndex()
    ix = DocumentIndexer(small, index_factory=lambda _: index)
    ix.open()
    try:
        [r, ok] = ix.apply([up("a", T0, LONG), up("b", T0, "fine")])
    finally:
        ix.close()
    assert r.outcome is None and r.error is not None and r.error.startswith("oversized_text:")
    assert ok.outcome == "APPLIED"
    assert index.documents() == {"b": T0}


def test_retrieve_empty_index_then_ranked_hits(
    config: Config, indexer: DocumentIndexer, index: MemoryIndex
) -> None:
    retriever = Retriever(config, index_factory=lambda _: index)
    retriever.open()
    try:
        assert retriever("anything", 5) == []
        indexer.apply(
            [
                up("cats", T0, "Cats are small domesticated felines that purr."),
                up("stocks", T0, "The stock market fell sharply on interest rate fears."),
            ]
        )
        hits = retriever("shares dropped as rates rose", 5)
        assert retriever(None, 5) == [] and retriever("q", 0) == []
    finally:
        retriever.close()
    assert hits is not None and [h.doc_id for h in hits] == ["stocks", "cats"]
    assert hits[0].score > hits[1].score and hits[0].chunk_id == "stocks#0"
