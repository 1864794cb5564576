"""A batch of running sequences that decode together: one forward, one token each.

The exported decoder takes any batch size. Rows of different lengths share one
past KV tensor per layer, ``[rows, n_kv_heads, width, head_dim]``, each row
left-padded to the widest; the ``attention_mask`` is 0 over the padding and every
row passes its own true ``position_ids``. That gives the same tokens as decoding
each sequence alone (``tests/unit/test_llm_scheduler.py`` checks it on the real
model).

Why two buffers per tensor, written in place: the graph concatenates past and new
KV and writes the whole "present" tensor every step, so each step costs one copy of
the live KV whatever we do. The decoder writes that present into the buffer that is
not the past (ping-pong), so a join only writes the joining row and a leave only
moves the last row into the gap. Rebuilding the whole batch on every join or leave
cost more than a decode step at 16 rows (about 135 ms against 105 ms at width 160).
A full rebuild remains for a joiner wider than the batch and to trim padding that
no row needs any more.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.lora import Adapter, LoraSpec

__all__ = ["BatchForward", "KvBatch", "StepInputs"]

# Trim when this many columns are padding in every row (and at least a quarter of the
# width): each step reads and writes those columns for nothing.
_TRIM_MIN_COLUMNS = 16


@dataclass(frozen=True)
class StepInputs:
    """The non-KV inputs of one batched decode step."""

    input_ids: np.ndarray  # [rows, 1] int64
    attention_mask: np.ndarray  # [rows, width + 1] int64
    position_ids: np.ndarray  # [rows, 1] int64
    lora: Mapping[str, np.ndarray] | None = None  # name -> [rows, ...]: each row's adapter


class BatchForward(Protocol):
    """What :class:`KvBatch` needs of a decoder (``OnnxDecoder.forward_batch``)."""

    def forward_batch(
        self, inputs: StepInputs, past: Sequence[np.ndarray], present: Sequence[np.ndarray]
    ) -> np.ndarray:
        """Write the present KV into ``present`` (K then V per layer); return ``[rows, vocab]`` logits."""
        ...


class _Buffers:
    """Flat storage for the 2 * n_layers KV tensors, viewed as ``[rows, heads, width, dim]``.

    A C-contiguous prefix of a flat array reshaped to any (rows, width) is itself
    contiguous, which is what the decoder needs of its inputs and outputs.
    """

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape
        self.flats: list[np.ndarray] = []

    def views(self, rows: int, width: int, keep: bool = False) -> list[np.ndarray]:
        """Views of ``rows`` x ``width``; grows the storage (keeping its prefix if ``keep``)."""
        s = self.shape
        need = rows * s.n_kv_heads * width * s.head_dim
        n = 2 * s.n_layers
        if not self.flats or self.flats[0].size < need:
            size = max(need, int(1.5 * (self.flats[0].size if self.flats else 0)))
            grown = [np.empty(size, dtype=np.dtype(s.dtype)) for _ in range(n)]
            if keep and self.flats:
                for new, old in zip(grown, self.flats, strict=True):
                    new[: old.size] = old
            self.flats = grown
        return [f[:need].reshape(rows, s.n_kv_heads, width, s.head_dim) for f in self.flats]


class _LoraRows:
    """Each row's adapter matrices, ``[rows, ...]`` per LoRA input, in row order.

    Rows move as the KV rows do (a leave moves the last row into the gap), so an
    adapter is copied once, when its row joins.
    """

    def __init__(self, spec: LoraSpec) -> None:
        self.spec = spec
        self.zeros = spec.zeros()
        self.store: dict[str, np.ndarray] = {}
        self.adapters: list[Adapter | None] = []

    def _grow(self, rows: int) -> None:
        have = next(iter(self.store.values())).shape[0] if self.store else 0
        if rows <= have:
            return
        cap = max(rows, 2 * have, 4)
        grown = {n: np.zeros((cap, *z.shape), np.float32) for n, z in self.zeros.items()}
        for n, old in self.store.items():
            grown[n][:have] = old
        self.store = grown

    def append(self, adapter: Adapter | None) -> None:
        i = len(self.adapters)
        self._grow(i + 1)
        src = self.zeros if adapter is None else adapter.params
        for n, buf in self.store.items():
            buf[i] = src[n]
        self.adapters.append(adapter)

    def remove(self, i: int) -> None:
        last = len(self.adapters) - 1
        if i != last:
            for buf in self.store.values():
                buf[i] = buf[last]
            self.adapters[i] = self.adapters[last]
        self.adapters.pop()

    def inputs(self) -> dict[str, np.ndarray]:
        rows = len(self.adapters)
        return {n: buf[:rows] for n, buf in self.store.items()}


class KvBatch:
    """The running rows' KV, left-padded to one width; rows are addressed by key.

    Args:
        shape: The decoder's cache shape.
        lora: The decoder's LoRA inputs; each row then carries its adapter (or zeros).
    """

    def __init__(self, shape: ModelShape, lora: LoraSpec | None = None) -> None:
        self.shape = shape
        self.lora = lora
        self.rebuilds = 0
        self.rebuild_s = 0.0
        self._reset()

    def _reset(self) -> None:
        # New buffers: an idle batch gives its memory back.
        self._lora_rows = _LoraRows(self.lora) if self.lora is not None else None
        self._buffers = (_Buffers(self.shape), _Buffers(self.shape))
        self.keys: list[str] = []
        self._cur = 0  # which of the two buffers holds the past
        self._past: list[np.ndarray] = []  # 2 * n_layers views, K then V per layer
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
        """Bytes of the batch's live KV, padding included (what each step reads)."""
        return self.nbytes_if(len(self.keys), self.width)

    def nbytes_if(self, rows: int, width: int) -> int:
        """Bytes of a batch of ``rows`` rows ``width`` columns wide."""
        return rows * width * self.shape.kv_bytes_per_token

    def length(self, key: str) -> int:
        """True tokens of a row."""
        return int(self._lengths[self.keys.index(key)])

    def width_after(self, lengths: Sequence[int], trim: bool = False) -> int:
        """The width :meth:`change` leaves for rows of true ``lengths``.

        Padding that no row needs is kept until it is worth a copy, or when ``trim``.
        """
        if not lengths:
            return 0
        width = max(lengths)
        slack = self.width - width
        if slack <= 0 or trim or (slack >= _TRIM_MIN_COLUMNS and 4 * slack >= self.width):
            return width
        return self.width

    def adapter(self, key: str) -> Adapter | None:
        """The adapter a row decodes with."""
        if self._lora_rows is None:
            return None
        return self._lora_rows.adapters[self.keys.index(key)]

    def change(
        self,
        leave: Sequence[str],
        join: Sequence[tuple[str, KvCache]],
        trim: bool = False,
        adapters: Mapping[str, Adapter | None] | None = None,
    ) -> None:
        """Drop rows ``leave`` and append the rows ``join`` (``trim``: drop all spare padding).

        ``adapters`` names a joining row's adapter (absent: the base model).
        """
        if not leave and not join and not trim:
            return
        started = time.perf_counter()
        for key in leave:
            self._remove(self.keys.index(key))
        if not self.keys and not join:
            self._reset()
            return
        width = self.width_after(
            [*(int(n) for n in self._lengths), *(c.seq_len for _, c in join)], trim
        )
        if width != self.width:
            self._rewidth(width)
        for key, cache in join:
            self._append(key, cache)
            if self._lora_rows is not None:
                self._lora_rows.append((adapters or {}).get(key))
            elif adapters and adapters.get(key) is not None:
                raise ValueError(f"row {key!r} has an adapter; this batch takes none")
        self.rebuild_s += time.perf_counter() - started

    def _remove(self, i: int) -> None:
        last = len(self.keys) - 1
        if self._lora_rows is not None:
            self._lora_rows.remove(i)
        if i != last:  # the last row fills the gap: one row copied, not the batch
            for arr in self._past:
                arr[i] = arr[last]
            self.keys[i] = self.keys[last]
            self._lengths[i] = self._lengths[last]
            self._mask[i] = self._mask[last]
        self.keys.pop()
        self._lengths = self._lengths[:last]
        self._mask = self._mask[:last]
        self._past = self._buffers[self._cur].views(last, self.width)

    def _rewidth(self, width: int) -> None:
        """Copy the rows into the other buffer at ``width`` (trim or widen the left padding)."""
        rows, old = len(self.keys), self.width
        other = 1 - self._cur
        views = self._buffers[other].views(rows, width)
        if rows:
            for new, arr in zip(views, self._past, strict=True):
                if width >= old:
                    new[:, :, : width - old] = 0
                    new[:, :, width - old :] = arr
                else:  # the columns dropped are padding in every row
                    new[:] = arr[:, :, old - width :]
        self._cur, self._past = other, views
        cols = np.arange(width)
        self._mask = (cols[None, :] >= (width - self._lengths)[:, None]).astype(np.int64)
        self.rebuilds += 1

    def _append(self, key: str, cache: KvCache) -> None:
        rows, width, n = len(self.keys), self.width, cache.seq_len
        self._past = self._buffers[self._cur].views(rows + 1, width, keep=True)
        layers = self.shape.n_layers
        for layer in range(layers):
            for kv, tensors in enumerate((cache.keys, cache.values)):
                row = self._past[2 * layer + kv][rows]
                row[:, : width - n] = 0  # finite padding: 0 attention weight times NaN is NaN
                row[:, width - n :] = tensors[layer][0]
        self.keys.append(key)
        self._lengths = np.append(self._lengths, n)
        mask_row = (np.arange(width) >= width - n).astype(np.int64)
        self._mask = np.vstack([self._mask.reshape(rows, width), mask_row[None, :]])

    def extract(self, key: str) -> KvCache:
        """One row's KV without its padding (a copy: the buffers are reused)."""
        i = self.keys.index(key)
        start = self.width - int(self._lengths[i])
        layers = self.shape.n_layers
        return KvCache(
            keys=tuple(self._past[2 * n][i : i + 1, :, start:, :].copy() for n in range(layers)),
            values=tuple(
                self._past[2 * n + 1][i : i + 1, :, start:, :].copy() for n in range(layers)
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
            lora=self._lora_rows.inputs() if self._lora_rows is not None else None,
        )
        other = 1 - self._cur
        present = self._buffers[other].views(rows, self.width + 1)
        logits = decoder.forward_batch(inputs, self._past, present)
        self._cur, self._past = other, present
        self._mask = mask
        self._lengths = self._lengths + 1
        return logits
