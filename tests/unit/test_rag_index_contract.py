"""The VectorIndex contract, run against every implementation.

``memory`` runs as a fast unit test; ``chroma`` runs the same tests on the real
session Chroma server (marked ``integration``), each in its own collection.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace

import httpx
import numpy as np
import pytest

from flinkai.config import RagConfig, load_config
from flinkai.local.process import free_port
from flinkai.rag import open_index
from flinkai.rag.chroma import ChromaIndex
from flinkai.rag.errors import IndexUnavailableError, InvalidChunkError
from flinkai.rag.index import (
    Chunk,
    DeleteDocument,
    Outcome,
    UpsertDocument,
    VectorIndex,
    chunk_id,
)
from flinkai.rag.memory import MemoryIndex
from flinkai.rag.server import ChromaServer

DIM = 16
APPLIED, STALE = Outcome.APPLIED, Outcome.STALE


def vec(seed: int, dim: int = DIM) -> np.ndarray:
    """A deterministic random unit vector."""
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def doc(doc_id: str, n: int, tag: str = "v", seed: int = 0) -> list[Chunk]:
    """``n`` chunks of ``doc_id`` whose texts carry ``tag`` (to tell versions apart)."""
    return [
        Chunk(
            doc_id,
            chunk_id(doc_id, i),
            f"{doc_id} {tag} {i}",
            vec(zlib.crc32(f"{doc_id}#{i}#{seed}".encode())),
        )
        for i in range(n)
    ]


def texts(index: VectorIndex) -> dict[str, str]:
    """chunk id -> text of every live chunk, read through query."""
    n = index.count()
    if n == 0:
        return {}
    return {h.chunk_id: h.text for h in index.query(vec(999), n + 5)}


@pytest.fixture(params=["memory", pytest.param("chroma", marks=pytest.mark.integration)])
def make_index(
    request: pytest.FixtureRequest, chroma_collection: str
) -> Iterator[Callable[[], VectorIndex]]:
    """Opens the implementation under test; for Chroma each call is a fresh client
    on the same collection (what a restarted job sees)."""
    opened: list[VectorIndex] = []
    if request.param == "memory":
        shared = MemoryIndex()

        def make() -> VectorIndex:
            return shared

    else:
        server: ChromaServer = request.getfixturevalue("chroma_server")
        config = replace(server.config(), collection=chroma_collection)

        def make() -> VectorIndex:
            index = ChromaIndex(config)
            opened.append(index)
            return index

    yield make
    if opened:
        opened[0].drop()  # type: ignore[attr-defined]
    for index in opened:
        index.close()


def test_empty_index_returns_no_hits(make_index: Callable[[], VectorIndex]) -> None:
    index = make_index()
    assert index.query(vec(1), 10) == []
    assert index.count() == 0
    assert index.documents() == {}
    assert index.versions() == {}
    assert index.chunk_ids() == {}


def test_newer_version_with_fewer_chunks_leaves_no_old_chunk(
    make_index: Callable[[], VectorIndex],
) -> None:
    index = make_index()
    assert index.upsert_document("a", 1, doc("a", 4, "old")) is APPLIED
    assert index.upsert_document("b", 1, doc("b", 2, "b1")) is APPLIED
    assert index.count() == 6
    assert index.upsert_document("a", 2, doc("a", 2, "new", seed=1)) is APPLIED
    assert index.chunk_ids() == {"a#0": 2, "a#1": 2, "b#0": 1, "b#1": 1}
    assert texts(index) == {"a#0": "a new 0", "a#1": "a new 1", "b#0": "b b1 0", "b#1": "b b1 1"}
    assert index.documents() == {"a": 2, "b": 1}
    # An upsert with no chunks keeps the document live with nothing to find.
    assert index.upsert_document("a", 3, []) is APPLIED
    assert set(index.chunk_ids()) == {"b#0", "b#1"}
    assert index.documents() == {"a": 3, "b": 1}


def test_equal_or_older_version_is_stale_and_changes_nothing(
    make_index: Callable[[], VectorIndex],
) -> None:
    index = make_index()
    index.upsert_document("a", 5, doc("a", 2, "five"))
    assert index.upsert_document("a", 4, doc("a", 3, "four")) is STALE
    assert index.upsert_document("a", 5, doc("a", 1, "five again")) is STALE
    assert texts(index) == {"a#0": "a five 0", "a#1": "a five 1"}
    assert index.documents() == {"a": 5}


def test_delete_leaves_a_tombstone_that_stops_an_older_replay(
    make_index: Callable[[], VectorIndex],
) -> None:
    index = make_index()
    index.upsert_document("a", 1, doc("a", 3))
    index.upsert_document("b", 1, doc("b", 1))
    assert index.delete_document("a", 2) is APPLIED
    assert set(index.chunk_ids()) == {"b#0"}
    assert all(h.doc_id != "a" for h in index.query(doc("a", 1)[0].vector, 10))
    # The replayed upsert (v1) and an equal-version upsert must not resurrect it.
    assert index.upsert_document("a", 1, doc("a", 3)) is STALE
    assert index.upsert_document("a", 2, doc("a", 3)) is STALE
    assert index.delete_document("a", 2) is STALE
    assert index.documents() == {"b": 1}
    assert index.versions() == {"a": 2, "b": 1}
    # A delete for a document never seen still leaves a tombstone.
    assert index.delete_document("ghost", 7) is APPLIED
    assert index.upsert_document("ghost", 6, doc("ghost", 1)) is STALE
    # A newer version brings a deleted document back.
    assert index.upsert_document("a", 3, doc("a", 1, "back")) is APPLIED
    assert index.documents() == {"a": 3, "b": 1}
    assert texts(index)["a#0"] == "a back 0"


def test_replaying_a_whole_stream_is_idempotent(make_index: Callable[[], VectorIndex]) -> None:
    stream = [
        UpsertDocument("a", 1, doc("a", 3, "a1")),
        UpsertDocument("b", 1, doc("b", 2, "b1")),
        UpsertDocument("a", 2, doc("a", 1, "a2")),
        DeleteDocument("b", 3),
        UpsertDocument("c", 1, doc("c", 2, "c1")),
        UpsertDocument("b", 2, doc("b", 5, "b2")),  # older than the delete
    ]
    index = make_index()
    first = [index.apply([op])[0] for op in stream]
    assert first == [APPLIED, APPLIED, APPLIED, APPLIED, APPLIED, STALE]
    state = (index.chunk_ids(), texts(index), index.documents(), index.versions())
    # After a restart, Flink replays from the last checkpoint: here, all of it, as one batch.
    again = make_index()
    assert again.apply(stream) == [STALE] * len(stream)
    assert (again.chunk_ids(), texts(again), again.documents(), again.versions()) == state
    assert state[2] == {"a": 2, "c": 1}
    assert set(state[0]) == {"a#0", "c#0", "c#1"}


def test_a_batch_is_applied_in_order(make_index: Callable[[], VectorIndex]) -> None:
    index = make_index()
    batch = [
        UpsertDocument("a", 1, doc("a", 3, "one")),
        UpsertDocument("a", 3, doc("a", 2, "three")),
        UpsertDocument("a", 2, doc("a", 4, "two")),
        DeleteDocument("b", 1),
        UpsertDocument("b", 2, doc("b", 1, "b")),
    ]
    assert index.apply(batch) == [APPLIED, APPLIED, STALE, APPLIED, APPLIED]
    assert index.documents() == {"a": 3, "b": 2}
    assert texts(index) == {"a#0": "a three 0", "a#1": "a three 1", "b#0": "b b 0"}
    assert index.apply([]) == []


def test_query_matches_exact_cosine_search(make_index: Callable[[], VectorIndex]) -> None:
    index = make_index()
    chunks = [Chunk(f"d{i}", f"d{i}#0", f"text {i}", vec(i) * (1 + i % 3)) for i in range(60)]
    index.apply([UpsertDocument(c.doc_id, 1, [c]) for c in chunks])
    matrix = np.stack([c.vector / np.linalg.norm(c.vector) for c in chunks])
    for q in range(5):
        query = vec(1000 + q) * 3.0  # not unit length: the index normalises
        exact = matrix @ (query / np.linalg.norm(query))
        order = np.argsort(-exact)[:7]
        hits = index.query(query, 7)
        assert [h.chunk_id for h in hits] == [chunks[i].chunk_id for i in order]
        assert [h.doc_id for h in hits] == [chunks[i].doc_id for i in order]
        np.testing.assert_allclose([h.score for h in hits], exact[order], atol=1e-5)
        assert [h.text for h in hits] == [chunks[i].text for i in order]
    # More than there are: all of them, best first.
    assert len(index.query(vec(5), 500)) == 60


def test_invalid_operations_fail_before_anything_is_written(
    make_index: Callable[[], VectorIndex],
) -> None:
    index = make_index()
    index.upsert_document("a", 1, doc("a", 1))
    good = UpsertDocument("ok", 1, doc("ok", 1))
    nan = doc("x", 1)[0].vector.copy()
    nan[0] = np.nan
    bad = [
        UpsertDocument("x", 1, [Chunk("x", "x#1", "t", vec(1))]),  # ids must start at #0
        UpsertDocument("x", 1, [Chunk("y", "y#0", "t", vec(1))]),  # another document's chunk
        UpsertDocument("x", 1, [Chunk("x", "x#0", "t", nan)]),
        UpsertDocument("x", 1, [Chunk("x", "x#0", "t", np.zeros(DIM, np.float32))]),
        UpsertDocument("x", 1, [Chunk("x", "x#0", "t", vec(1, DIM + 1))]),  # other dimension
        UpsertDocument("", 1, []),
        UpsertDocument("x", -1, []),
        DeleteDocument("x", "7"),  # type: ignore[arg-type]
    ]
    for op in bad:
        with pytest.raises(InvalidChunkError):
            index.apply([good, op])
    assert index.documents() == {"a": 1}
    assert set(index.chunk_ids()) == {"a#0"}
    with pytest.raises(InvalidChunkError):
        index.query(vec(1, DIM + 1), 3)
    with pytest.raises(InvalidChunkError):
        index.query(vec(1), 0)


# -- Chroma only ---------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("fail_at", ["delete", "versions"])
def test_chroma_replay_after_a_failed_write_converges(
    chroma_server: ChromaServer,
    chroma_collection: str,
    fail_at: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = replace(chroma_server.config(), collection=chroma_collection)
    index = ChromaIndex(config)
    try:
        index.apply(
            [UpsertDocument("a", 1, doc("a", 4, "old")), UpsertDocument("b", 1, doc("b", 1))]
        )
        target = index._chunks if fail_at == "delete" else index._versions
        method = "delete" if fail_at == "delete" else "upsert"
        calls: list[int] = []

        def broken(*args: object, **kwargs: object) -> None:
            calls.append(1)
            raise httpx.ConnectError("connection reset (injected)")

        monkeypatch.setattr(target, method, broken)
        batch = [UpsertDocument("a", 2, doc("a", 2, "new")), DeleteDocument("b", 2)]
        with pytest.raises(IndexUnavailableError, match="flinkai chroma start"):
            index.apply(batch)
        assert calls == [1]  # the fault happened, after the new chunks were written
        half = ChromaIndex(config)
        assert half.versions() == {"a": 1, "b": 1}
        assert half.chunk_ids()["a#0"] == 2
        # The job restarts with a fresh client and replays the batch.
        assert half.apply(batch) == [APPLIED, APPLIED]
        assert half.chunk_ids() == {"a#0": 2, "a#1": 2}
        assert half.documents() == {"a": 2}
        assert texts(half) == {"a#0": "a new 0", "a#1": "a new 1"}
        half.close()
    finally:
        monkeypatch.undo()
        index.drop()
        index.close()


def test_chroma_server_down_names_the_url_and_the_command() -> None:
    port = free_port()
    with pytest.raises(IndexUnavailableError) as e:
        ChromaIndex(RagConfig(port=port, timeout_s=2.0))
    assert f"http://127.0.0.1:{port}" in str(e.value)
    assert "flinkai chroma start" in str(e.value)
    # open_index, the sink's entry point, takes the whole config and fails the same way.
    config = load_config(env={"FLINKAI_RAG_PORT": str(port), "FLINKAI_RAG_TIMEOUT_S": "2"})
    with pytest.raises(IndexUnavailableError, match=f"127.0.0.1:{port}"):
        open_index(config)
