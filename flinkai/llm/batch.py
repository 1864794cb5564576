"""A batch of running sequences that decode together: one forward, one token each.

The exported decoder takes any batch size. Rows of different lengths share one
past KV tensor per layer, ``[rows, n_kv_heads, width, head_dim]``, each row
left-padded to the widest; the ``attention_mask`` is 0 over the padding and every
row passes its own true ``position_ids``. That gives the same tokens as decoding
each sequence alone (``tests/unit/test_llm_scheduler.py`` checks it on the real
model).

Why gather copies and not a slot buffer updated in place: the graph concatenates
past and new KV and returns the whole "present" tensor, so every step already
writes every row's KV once. Between membership changes the present tensors become
the next past as they are (no copy); a join or a leave rebuilds the batch once
(one more copy of the live KV), and trims the columns that are padding in every row.
``flinkai bench llm-serve`` reports the share of step time spent rebuilding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from flinkai.llm.cache import TOKEN_AXIS, KvCache, ModelShape

__all__ = ["BatchForward", "KvBatch", "StepInputs"]


@dataclass(frozen=True)
class StepInputs:
    """The non-KV inputs of one batched decode step."""

    input_ids: np.ndarray  # [rows, 1] int64
    attention_mask: np.ndarray  # [rows, width + 1] int64
    position_ids: np.ndarray  # [rows, 1] int64


class BatchForward(Protocol):
    """What :class:`KvBatch` needs of a decoder (``OnnxDecoder.forward_batch``)."""

    def forward_batch(
        self, inputs: StepInputs, past: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]: ...


class KvBatch:
    """The running rows' KV, left-padded to one width; rows are addressed by key.

    Args:
        shape: The decoder's cache shape.
    """

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape
        self.rebuilds = 0
        self.rebuild_s = 0.0
        self._reset()

    def _reset(self) -> None:
        self.keys: list[str] = []
        self._past: list[np.ndarray] = []  # 2 * n_layers arrays, K then V per layer
        self._mask = np.zeros((0, 0), dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def width(self) -> int:
        """Columns of the shared past (the longest row plus any padding)."""
        return int(self._mask.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes the batch's KV tensors hold, padding included (what memory sees)."""
        return sum(int(a.nbytes) for a in self._past)

    def nbytes_if(self, rows: int, width: int) -> int:
        """Bytes of a batch of ``rows`` rows ``width`` columns wide."""
        return rows * width * self.shape.kv_bytes_per_token

    def length(self, key: str) -> int:
        """True tokens of a row."""
        return int(self._lengths[self.keys.index(key)])

    def change(self, leave: Sequence[str], join: Sequence[tuple[str, KvCache]]) -> None:
        """Drop rows ``leave`` and append the rows ``join`` in one rebuild."""
        if not leave and not join:
            return
        started = time.perf_counter()
        gone = set(leave)
        keep = [i for i, k in enumerate(self.keys) if k not in gone]
        lengths = [int(self._lengths[i]) for i in keep] + [c.seq_len for _, c in join]
        keys = [self.keys[i] for i in keep] + [k for k, _ in join]
        if not keys:
            self._reset()
            return
        # Trim the columns that no kept row needs; widen for a longer joiner.
        width = max(lengths)
        old_width = self.width
        parts: list[list[np.ndarray]] = [[] for _ in range(2 * self.shape.n_layers)]
        if keep:
            idx = np.asarray(keep)
            drop = old_width - min(width, old_width)
            for j, arr in enumerate(self._past):
                kept = arr[idx, :, drop:, :]
                if width > old_width:
                    kept = _left_pad(kept, width - old_width)
                parts[j].append(kept)
        for _, cache in join:
            for layer in range(self.shape.n_layers):
                for kv, tensors in enumerate((cache.keys, cache.values)):
                    parts[2 * layer + kv].append(_left_pad(tensors[layer], width - cache.seq_len))
        self._past = [np.ascontiguousarray(np.concatenate(p, axis=0)) for p in parts]
        self.keys = keys
        self._lengths = np.asarray(lengths, dtype=np.int64)
        cols = np.arange(width)
        self._mask = (cols[None, :] >= (width - self._lengths)[:, None]).astype(np.int64)
        self.rebuilds += 1
        self.rebuild_s += time.perf_counter() - started

    def extract(self, key: str) -> KvCache:
        """One row's KV without its padding (a copy: to offload or keep a session)."""
        i = self.keys.index(key)
        start = self.width - int(self._lengths[i])
        layers = self.shape.n_layers
        return KvCache(
            keys=tuple(
                np.ascontiguousarray(self._past[2 * n][i : i + 1, :, start:, :])
                for n in range(layers)
            ),
            values=tuple(
                np.ascontiguousarray(self._past[2 * n + 1][i : i + 1, :, start:, :])
                for n in range(layers)
            ),
        )

    def step(self, decoder: BatchForward, tokens: Sequence[int]) -> np.ndarray:
        """Decode one token per row (``tokens`` in row order); returns ``[rows, vocab]`` logits."""
        rows = len(self.keys)
        mask = np.concatenate([self._mask, np.ones((rows, 1), dtype=np.int64)], axis=1)
        inputs = StepInputs(
            input_ids=np.asarray(tokens, dtype=np.int64).reshape(rows, 1),
            attention_mask=mask,
            position_ids=self._lengths.reshape(rows, 1).copy(),
        )
        logits, present = decoder.forward_batch(inputs, self._past)
        self._past = present
        self._mask = mask
        self._lengths = self._lengths + 1
        return logits


def _left_pad(tensor: np.ndarray, n: int) -> np.ndarray:
    if n <= 0:
        return tensor
    pad = np.zeros((tensor.shape[0], tensor.shape[1], n, tensor.shape[3]), dtype=tensor.dtype)
    return np.concatenate([pad, tensor], axis=TOKEN_AXIS)
