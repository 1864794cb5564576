"""Test support for RAG jobs: the index a documents topic implies, and its diff from a real one.

``rag_ingest.sql`` promises that once it has read the topic up to some offsets, the
index equals the fold of those records under the version guard: per document, the
valid event with the highest version wins (an equal version changes nothing), and a
winning delete or tombstone leaves the document absent. :func:`fold_documents`
computes that fold from the records themselves, with the job's own parser and
chunker; :func:`diff_index` lists every way an index differs from it (ghost
documents or chunks, missing ones, wrong versions). Tests and ``flinkai bench rag``
use both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flinkai.config import RagConfig
from flinkai.functions.doc_events import MAX_DOCUMENT_BYTES, DocEvent, DocOp, parse_doc_event
from flinkai.rag.chunking import TooManyChunksError, chunk_document

__all__ = ["DocState", "ExpectedIndex", "diff_index", "fold_documents"]


@dataclass(frozen=True)
class DocState:
    """The winning event of one document: its version, and its text if live."""

    version: int
    text: str | None


@dataclass(frozen=True)
class ExpectedIndex:
    """What the index must hold.

    Attributes:
        versions: Every document with a winning event: doc_id -> version (deleted too).
        documents: Live documents: doc_id -> version.
        chunk_ids: Live chunks: chunk id -> the version of its document.
    """

    versions: dict[str, int]
    documents: dict[str, int]
    chunk_ids: dict[str, int]


def fold_documents(
    records: Iterable[tuple[bytes | None, bytes | None, int]], rag: RagConfig
) -> ExpectedIndex:
    """Fold ``(key, value, timestamp_ms)`` records, in offset order, into the final state.

    Records the job dead-letters (invalid events, documents over ``rag.max_chunks``
    or without words) do not take part, as they never reach the index.
    """
    winners: dict[str, DocState] = {}
    for key, value, ts in records:
        event = parse_doc_event(key, value, ts, MAX_DOCUMENT_BYTES)
        if not isinstance(event, DocEvent):
            continue
        chunks: list[tuple[str, str]] = []
        if event.op is DocOp.UPSERT:
            try:
                chunks = chunk_document(event.doc_id, event.text or "", rag)
            except TooManyChunksError:
                continue
            if not chunks:
                continue
        prior = winners.get(event.doc_id)
        if prior is not None and event.version <= prior.version:
            continue
        winners[event.doc_id] = DocState(event.version, event.text)
    documents = {d: s.version for d, s in winners.items() if s.text is not None}
    chunk_ids = {
        cid: s.version
        for d, s in winners.items()
        if s.text is not None
        for cid, _ in chunk_document(d, s.text, rag)
    }
    return ExpectedIndex({d: s.version for d, s in winners.items()}, documents, chunk_ids)


def diff_index(
    expected: ExpectedIndex,
    versions: Mapping[str, int],
    documents: Mapping[str, int],
    chunk_ids: Mapping[str, int],
) -> list[str]:
    """Every difference between an index and ``expected``; empty when they are equal.

    Args:
        expected: From :func:`fold_documents`.
        versions: ``index.versions()`` (tombstones included).
        documents: ``index.documents()``.
        chunk_ids: Every stored chunk id -> version (``ChromaIndex.chunk_ids()``).
    """
    problems: list[str] = []
    for name, want, got in (
        ("document", expected.documents, documents),
        ("version", expected.versions, versions),
        ("chunk", expected.chunk_ids, chunk_ids),
    ):
        ghosts = sorted(set(got) - set(want))
        missing = sorted(set(want) - set(got))
        wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
        if ghosts:
            problems.append(f"{len(ghosts)} ghost {name}(s): {ghosts[:5]}")
        if missing:
            problems.append(f"{len(missing)} missing {name}(s): {missing[:5]}")
        if wrong:
            shown = [(k, got[k], want[k]) for k in wrong[:5]]
            problems.append(f"{len(wrong)} {name}(s) at the wrong version (got, want): {shown}")
    return problems
