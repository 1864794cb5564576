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
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SubBatch", "cut_points", "load_tokenizer", "pad_encodings", "plan_sub_batches"]


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


def pad_encodings(encodings: Sequence[Any], lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Right-pad one sub-batch to its own longest text, without a Python loop per row."""
    width = int(lengths.max())
    mask = np.arange(width)[None, :] < lengths[:, None]
    total = int(lengths.sum())
    ids = np.zeros(mask.shape, dtype=np.int64)
    ids[mask] = np.fromiter((t for e in encodings for t in e.ids), dtype=np.int64, count=total)
    type_ids = np.zeros(mask.shape, dtype=np.int64)
    type_ids[mask] = np.fromiter(
        (t for e in encodings for t in e.type_ids), dtype=np.int64, count=total
    )
    return {"input_ids": ids, "attention_mask": mask.astype(np.int64), "token_type_ids": type_ids}


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
    encodings = tokenizer.encode_batch(list(texts))
    n = len(encodings)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable") if sort_by_length else np.arange(n)
    start = 0
    for end in cut_points(lengths[order], batch_size, max_padding if sort_by_length else None):
        idx = order[start:end]
        yield SubBatch(idx, pad_encodings([encodings[i] for i in idx], lengths[idx]))
        start = end
