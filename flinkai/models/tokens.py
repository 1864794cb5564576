"""The tokenizer artifact, and how texts become model feeds with as little padding as possible.

It sits with the artifacts (``tokenizer.json`` is one) so that the backends on the hot
path and the export and quantisation checks share it without importing each other.

Padding waste dominates transformer cost on CPU: a batch pays for its longest
text. So texts are sorted by token length, cut into sub-batches, and each
sub-batch is padded only to its own longest text. Backends scatter results back
with the sub-batch's index array, so callers always get input order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SubBatch", "TokenizedBatch", "cut_points", "load_tokenizer", "plan_sub_batches"]


@dataclass(frozen=True)
class SubBatch:
    """Rows ``index`` of the input, ready to feed (``input_ids``, ``attention_mask``, ``token_type_ids``)."""

    index: np.ndarray
    feed: dict[str, np.ndarray]


def load_tokenizer(path: str | Path, max_seq_length: int) -> Any:
    """A ``tokenizers.Tokenizer`` truncating at ``max_seq_length`` and never padding itself."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    # A shorter value than the model's is allowed: it trades accuracy on long texts for speed.
    tokenizer.enable_truncation(max_seq_length)
    tokenizer.no_padding()  # padded per sub-batch, to that sub-batch's longest text
    return tokenizer


@dataclass(frozen=True)
class TokenizedBatch:
    """A batch's token ids, concatenated once, so sub-batches are cut without per-token Python.

    Attributes:
        ids: Every text's ids, end to end.
        starts: Where text i begins in ``ids``.
        lengths: Tokens of text i.
        type_ids: Token type ids laid out as ``ids``, or None where every id is 0 (a
            single-sequence template gives one type id to the whole text).
    """

    ids: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    type_ids: np.ndarray | None

    @classmethod
    def encode(cls, tokenizer: Any, texts: Sequence[str]) -> TokenizedBatch:
        # encode_batch_fast (tokenizers >= 0.21) skips character offsets, which no
        # backend reads, so tokenising costs less CPU (`flinkai bench ceiling`).
        encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
        encodings = encode(list(texts))
        n = len(encodings)
        id_lists = [e.ids for e in encodings]  # one conversion from Rust per text
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=n)
        total = int(lengths.sum())
        ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=total)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        type_ids = None
        # The template gives every text the same segment, so the first text tells.
        if n and any(encodings[0].type_ids):
            type_ids = np.fromiter(
                chain.from_iterable(e.type_ids for e in encodings), dtype=np.int64, count=total
            )
        return cls(ids, starts, lengths, type_ids)

    def feed(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``index``, right-padded to their own longest text."""
        lengths = self.lengths[index]
        width = int(lengths.max()) if len(lengths) else 0
        columns = np.arange(width)
        mask = columns[None, :] < lengths[:, None]
        positions = (self.starts[index][:, None] + columns[None, :])[mask]
        ids = np.zeros(mask.shape, dtype=np.int64)
        ids[mask] = self.ids[positions]
        type_ids = np.zeros(mask.shape, dtype=np.int64)
        if self.type_ids is not None:
            type_ids[mask] = self.type_ids[positions]
        return {
            "input_ids": ids,
            "attention_mask": mask.astype(np.int64),
            "token_type_ids": type_ids,
        }


def cut_points(lengths: np.ndarray, batch_size: int, max_padding: float | None) -> list[int]:
    """Where to cut ``lengths`` (already in feed order) into sub-batches; ends, exclusive.

    A sub-batch ends at ``batch_size`` rows or, with ``max_padding``, before the row
    that would make its padded size exceed ``(1 + max_padding)`` x its real tokens.
    Sorted input makes that a cut between length groups: 30 random AG News texts in
    one batch of 32 carry 2.0x their tokens, cut at 0.2 they carry 1.15x in ~3.5 runs,
    and on CPU a run of 8 texts costs little more per text than a run of 32.
    """
    ends: list[int] = []
    start, width, real = 0, 0, 0
    for i, length in enumerate(lengths.tolist()):
        rows = i - start
        new_width = max(width, length)
        full = rows >= batch_size
        wasteful = (
            max_padding is not None
            and rows > 0
            and (rows + 1) * new_width > (1.0 + max_padding) * (real + length)
        )
        if full or wasteful:
            ends.append(i)
            start, new_width, real = i, length, 0
        width = new_width
        real += length
    if len(lengths):
        ends.append(len(lengths))
    return ends


def plan_sub_batches(
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int,
    sort_by_length: bool = True,
    max_padding: float | None = None,
) -> Iterator[SubBatch]:
    """Tokenise ``texts`` once and yield padded sub-batches of at most ``batch_size``.

    ``max_padding`` (with ``sort_by_length``) also cuts a sub-batch early when padding
    would exceed that fraction of its real tokens; see :func:`cut_points`.
    """
    batch = TokenizedBatch.encode(tokenizer, texts)
    lengths = batch.lengths
    n = len(lengths)
    order = np.argsort(lengths, kind="stable") if sort_by_length else np.arange(n)
    start = 0
    for end in cut_points(lengths[order], batch_size, max_padding if sort_by_length else None):
        idx = order[start:end]
        yield SubBatch(idx, batch.feed(idx))
        start = end
