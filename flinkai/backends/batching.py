"""Turn texts into model feeds with as little padding as possible.

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

__all__ = ["SubBatch", "load_tokenizer", "pad_encodings", "plan_sub_batches"]


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


def plan_sub_batches(
    tokenizer: Any, texts: Sequence[str], batch_size: int, sort_by_length: bool = True
) -> Iterator[SubBatch]:
    """Tokenise ``texts`` once and yield padded sub-batches of at most ``batch_size``."""
    encodings = tokenizer.encode_batch(list(texts))
    n = len(encodings)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable") if sort_by_length else np.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        yield SubBatch(idx, pad_encodings([encodings[i] for i in idx], lengths[idx]))
