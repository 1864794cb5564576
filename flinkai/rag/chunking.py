"""Split a document into overlapping word windows; chunk ids ``doc_id#n``.

Why words and not the embedder's tokens: the chunk boundaries must be the same in
every process and for every backend (ONNX, Triton, a future model), and the sink
must not load a tokenizer to decide them. MiniLM reads 256 word pieces. On AG News
text, 128-word windows hold 173 pieces at the median and 0.9% of them exceed 256
(160-word windows: 215 and 7.2%), so the default 128 keeps nearly every chunk inside
the model's input. A chunk that does not fit is embedded from its first 256 pieces;
its text is still stored whole (the token counts include [CLS] and [SEP]).

``overlap`` words are repeated at the start of the next chunk, so a passage cut at a
boundary is still found whole in one of the two.

Chunks are slices of the original text (spacing and punctuation kept), so the text
a query returns is exactly what the document said.
"""

from __future__ import annotations

import re

from flinkai.config import RagConfig
from flinkai.rag.errors import InvalidChunkError
from flinkai.rag.index import chunk_id

__all__ = ["TooManyChunksError", "chunk_document", "chunk_text"]

_WORD = re.compile(r"\S+")


class TooManyChunksError(InvalidChunkError):
    """A document needs more than ``rag.max_chunks`` chunks; it is rejected, not cut."""


def chunk_text(text: str, words: int = 128, overlap: int = 24, max_chunks: int = 256) -> list[str]:
    """``text`` as windows of ``words`` words, each repeating ``overlap`` of the last.

    Deterministic: the same text and parameters always give the same chunks. A
    blank text gives ``[]``; a text of at most ``words`` words gives one chunk
    (stripped of surrounding whitespace).

    Raises:
        ValueError: ``words < 1`` or ``overlap`` not in ``0..words-1``.
        TooManyChunksError: More than ``max_chunks`` chunks would be needed.
    """
    if words < 1 or not 0 <= overlap < words:
        raise ValueError(f"need words >= 1 and 0 <= overlap < words, got {words}, {overlap}")
    spans = [m.span() for m in _WORD.finditer(text)]
    if not spans:
        return []
    step = words - overlap
    # Window starts: every `step` words, until a window reaches the last word.
    starts = [0]
    while starts[-1] + words < len(spans):
        starts.append(starts[-1] + step)
    if len(starts) > max_chunks:
        raise TooManyChunksError(
            f"the document has {len(spans)} words and needs {len(starts)} chunks of "
            f"{words} words; the limit is {max_chunks} (rag.max_chunks)"
        )
    out = []
    for s in starts:
        last = min(s + words, len(spans)) - 1
        out.append(text[spans[s][0] : spans[last][1]])
    return out


def chunk_document(
    doc_id: str, text: str, config: RagConfig | None = None
) -> list[tuple[str, str]]:
    """``[(doc_id#0, text0), (doc_id#1, text1), ...]`` with the ``rag`` config's window.

    Raises:
        TooManyChunksError: More than ``config.max_chunks`` chunks.
    """
    cfg = config or RagConfig()
    texts = chunk_text(text, cfg.chunk_words, cfg.chunk_overlap_words, cfg.max_chunks)
    return [(chunk_id(doc_id, n), t) for n, t in enumerate(texts)]
