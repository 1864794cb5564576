"""The exact-state checker of the RAG index: the topic's fold, and its own negative tests."""

from __future__ import annotations

import json

from flinkai.config import RagConfig
from flinkai.testing.rag_index import diff_index, fold_documents

T0 = 1764576000000
RAG = RagConfig(chunk_words=4, chunk_overlap_words=1)


def ev(doc: str, version: int, text: str | None = None, op: str = "upsert") -> bytes:
    body: dict[str, object] = {"doc_id": doc, "updated_at": version, "op": op}
    if text is not None:
        body["text"] = text
    return json.dumps(body).encode()


RECORDS = [
    (b"a", ev("a", T0 + 2, "one two three four five six seven"), 0),  # 3 chunks of 4/1
    (b"a", ev("a", T0 + 1, "older version must lose"), 0),
    (b"a", ev("a", T0 + 3, "now short"), 0),  # fewer chunks: a#1, a#2 must go
    (b"b", ev("b", T0, "bee"), 0),
    (b"b", None, T0 + 10),  # tombstone
    (b"c", ev("c", T0, "sea"), 0),
    (b"c", ev("c", T0 + 1, op="delete"), 0),
    (b"c", ev("c", T0, "sea"), 0),  # replayed older upsert: no resurrection
    (b"d", b"not json", 0),
    (b"e", ev("e", T0, "eee"), 0),
]


def test_fold_applies_the_version_guard() -> None:
    want = fold_documents(RECORDS, RAG)
    assert want.documents == {"a": T0 + 3, "e": T0}
    assert want.versions == {"a": T0 + 3, "b": T0 + 10, "c": T0 + 1, "e": T0}
    assert want.chunk_ids == {"a#0": T0 + 3, "e#0": T0}


def test_diff_is_empty_only_for_the_exact_state() -> None:
    want = fold_documents(RECORDS, RAG)
    assert diff_index(want, want.versions, want.documents, want.chunk_ids) == []
    # Negative controls: each fault is reported.
    ghost_chunk = {**want.chunk_ids, "a#1": T0 + 2}
    assert any(
        "ghost chunk" in p for p in diff_index(want, want.versions, want.documents, ghost_chunk)
    )
    resurrected = {**want.documents, "c": T0}
    problems = diff_index(want, want.versions, resurrected, want.chunk_ids)
    assert any("ghost document" in p for p in problems)
    missing = {k: v for k, v in want.documents.items() if k != "e"}
    assert any(
        "missing document" in p for p in diff_index(want, want.versions, missing, want.chunk_ids)
    )
    stale = {**want.versions, "a": T0 + 2}
    assert any(
        "wrong version" in p for p in diff_index(want, stale, want.documents, want.chunk_ids)
    )
