"""A tiny deterministic causal decoder with the ``OnnxDecoder`` interface, for unit tests.

Its K/V at position ``p`` depends on every token up to ``p`` (a running hash), and its
logits on the whole cache, so a restored cache that differs anywhere from the one a
full prefill makes changes the output. Integration tests use the real ONNX decoder.
"""

from __future__ import annotations

from collections.abc import Sequence

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
