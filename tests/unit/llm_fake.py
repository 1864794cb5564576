"""A tiny deterministic causal decoder with the ``OnnxDecoder`` interface, for unit tests.

Its K/V at position ``p`` depends on every token up to ``p`` (a running hash), and its
logits on the whole cache, so a restored cache that differs anywhere from the one a
full prefill makes changes the output. Integration tests use the real ONNX decoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flinkai.llm.cache import TOKEN_AXIS, KvCache, ModelShape

VOCAB = 97


class FakeDecoder:
    """Causal, deterministic; counts the tokens each forward prefilled."""

    def __init__(self, model_version: str = "f1", n_layers: int = 3) -> None:
        self.model_id = "test/fake-decoder"
        self.model_version = model_version
        self.shape = ModelShape(n_layers=n_layers, n_kv_heads=2, head_dim=4, vocab_size=VOCAB)
        self.prefilled: list[int] = []

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]:
        past = past if past is not None else self.shape.empty_cache()
        self.prefilled.append(len(token_ids))
        start = past.seq_len
        keys, values = [], []
        for layer in range(self.shape.n_layers):
            prev = float(past.keys[layer][0, 0, -1, 0]) if start else 0.0
            rows = []
            for j, token in enumerate(token_ids):
                prev = float((prev * 31 + int(token) * 7 + (start + j) + layer) % 1009)
                rows.append(prev + np.arange(self.shape.n_kv_heads * 4).reshape(2, 4))
            new = np.asarray(rows, dtype=np.float32).transpose(1, 0, 2)[None]
            keys.append(np.concatenate([past.keys[layer], new], axis=TOKEN_AXIS))
            values.append(np.concatenate([past.values[layer], -new / 3], axis=TOKEN_AXIS))
        cache = KvCache(tuple(keys), tuple(values))
        total = sum(float(k.sum()) + float(v.sum()) for k, v in zip(keys, values, strict=True))
        logits = -np.abs(np.arange(VOCAB) - (int(total) % VOCAB)).astype(np.float32)
        return logits, cache


class AttentionDecoder:
    """One causal attention layer in float64 numpy, with padding masks and batched steps.

    Small enough for unit tests, real enough that left padding, position ids and the
    attention mask matter: a wrong mask or position changes the logits. float64 keeps
    batching's rounding far below the argmax margins, so runs compare token for token.
    """

    def __init__(self, seed: int = 0, vocab: int = VOCAB, dim: int = 16, heads: int = 2) -> None:
        rng = np.random.default_rng(seed)
        self.model_id = "test/attention-decoder"
        self.model_version = f"a{seed}"
        self.head_dim = dim // heads
        self.shape = ModelShape(
            n_layers=1, n_kv_heads=heads, head_dim=self.head_dim, dtype="float64", vocab_size=vocab
        )
        self.embed = rng.normal(size=(vocab, dim))
        self.wq, self.wk, self.wv = (rng.normal(size=(dim, dim)) / dim**0.5 for _ in range(3))
        self.out = rng.normal(size=(dim, vocab)) * 3
        self.steps: list[int] = []  # rows per batched step

    def _pos(self, positions: np.ndarray) -> np.ndarray:
        dim = self.embed.shape[1]
        return np.sin(positions[..., None] * (1 + np.arange(dim)) / 7.0)

    def _split(self, x: np.ndarray) -> np.ndarray:  # [b, t, dim] -> [b, heads, t, head_dim]
        b, t, _ = x.shape
        return x.reshape(b, t, self.shape.n_kv_heads, self.head_dim).transpose(0, 2, 1, 3)

    def _run(
        self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray, past: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        x = self.embed[ids] + self._pos(positions)  # [b, t, dim]
        q, k, v = (self._split(x @ w) for w in (self.wq, self.wk, self.wv))
        keys = np.concatenate([past[0], k], axis=TOKEN_AXIS)
        values = np.concatenate([past[1], v], axis=TOKEN_AXIS)
        total, new = keys.shape[2], ids.shape[1]
        scores = q @ keys.transpose(0, 1, 3, 2) / self.head_dim**0.5  # [b, h, new, total]
        causal = np.arange(total)[None, :] <= (total - new + np.arange(new))[:, None]
        allowed = causal[None, None] & (mask[:, None, None, :] > 0)
        scores = np.where(allowed, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        attended = (weights @ values)[:, :, -1, :].reshape(ids.shape[0], -1)
        return attended @ self.out, [keys, values]

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]:
        past = past if past is not None else self.shape.empty_cache()
        ids = np.asarray(token_ids, dtype=np.int64).reshape(1, -1)
        start = past.seq_len
        positions = np.arange(start, start + ids.shape[1]).reshape(1, -1)
        mask = np.ones((1, start + ids.shape[1]), dtype=np.int64)
        logits, present = self._run(ids, mask, positions, [past.keys[0], past.values[0]])
        return logits[0], KvCache((present[0],), (present[1],))

    def forward_batch(
        self, inputs: Any, past: Sequence[np.ndarray], present: Sequence[np.ndarray]
    ) -> np.ndarray:
        self.steps.append(int(inputs.input_ids.shape[0]))
        logits, out = self._run(
            inputs.input_ids, inputs.attention_mask, inputs.position_ids, list(past)
        )
        for dst, src in zip(present, out, strict=True):
            np.copyto(dst, src)
        return logits
