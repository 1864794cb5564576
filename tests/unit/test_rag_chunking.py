"""Word-window chunking: coverage, overlap, ids, limits, determinism."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flinkai.config import RagConfig
from flinkai.rag.chunking import TooManyChunksError, chunk_document, chunk_text
from flinkai.rag.errors import InvalidChunkError


def test_short_and_blank_texts() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\t ") == []
    assert chunk_text("  one two  three ") == ["one two  three"]


def test_windows_overlap_and_cover_every_word() -> None:
    text = " ".join(f"w{i}" for i in range(24))
    chunks = chunk_text(text, words=10, overlap=3)
    assert [c.split() for c in chunks] == [
        [f"w{i}" for i in range(0, 10)],
        [f"w{i}" for i in range(7, 17)],
        [f"w{i}" for i in range(14, 24)],
    ]
    # One word more needs a fourth, shorter window.
    longer = chunk_text(text + " w24", words=10, overlap=3)
    assert longer[3].split() == ["w21", "w22", "w23", "w24"]
    # Exactly `words` words: one chunk, no empty tail.
    assert len(chunk_text(" ".join(["x"] * 10), words=10, overlap=3)) == 1


def test_chunks_are_slices_of_the_original_text() -> None:
    text = "Dr. Smith,\tM.D.  said:\n\n“Hello — world!”  ok"
    for c in chunk_text(text, words=3, overlap=1):
        assert c in text


def test_document_ids_and_config() -> None:
    config = RagConfig(chunk_words=4, chunk_overlap_words=1)
    got = chunk_document("doc-7", "a b c d e f g", config)
    assert got == [("doc-7#0", "a b c d"), ("doc-7#1", "d e f g")]
    assert chunk_document("x", "") == []


def test_too_many_chunks_is_rejected_not_truncated() -> None:
    with pytest.raises(TooManyChunksError, match="limit is 2") as e:
        chunk_text(" ".join(["w"] * 100), words=10, overlap=0, max_chunks=2)
    assert isinstance(e.value, InvalidChunkError)
    with pytest.raises(ValueError):
        chunk_text("a b", words=3, overlap=3)


@given(
    words=st.lists(st.text("abcé", min_size=1, max_size=4), max_size=60),
    size=st.integers(1, 12),
    data=st.data(),
)
def test_every_word_is_in_some_chunk_in_order(
    words: list[str], size: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    text = " ".join(words)
    chunks = chunk_text(text, words=size, overlap=overlap, max_chunks=10_000)
    assert chunks == chunk_text(text, words=size, overlap=overlap, max_chunks=10_000)
    assert all(len(c.split()) <= size for c in chunks)
    # Dropping each chunk's overlap with the one before gives back the text's words.
    rebuilt = chunks[0].split() if chunks else []
    for prev, cur in itertools.pairwise(chunks):
        if overlap:
            assert prev.split()[-overlap:] == cur.split()[:overlap]
        rebuilt += cur.split()[overlap:]
    assert rebuilt == text.split()
