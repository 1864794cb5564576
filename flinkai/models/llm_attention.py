"""Grouped-query attention without copies of the KV heads, for the decoder export.

transformers' eager attention expands every key/value head to the query heads it
serves (``repeat_kv``) before the two matmuls. Traced to ONNX that is an ``Expand``
per key and value tensor per layer: each decode step writes the whole past KV again,
``n_heads / n_kv_heads`` times over (3x for SmolLM2-135M). On a CPU a decode step is
bound by memory traffic, so that copy made a 16-row step at past 140 take 1.18x as
long (``flinkai bench llm-step``, docs/llm.md).

Here the query heads of one KV head are stacked along the query axis instead, so both
matmuls read each key/value head once. The arithmetic per query head is unchanged
(the same dot products and softmax); the export's logit check compares the traced
graph with transformers' own eager model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from flinkai.llm.artifacts import GROUPED_ATTENTION

__all__ = ["ATTENTION_NAME", "grouped_attention"]

#: The name the export registers with transformers' attention interface; the manifest
#: records it, and the runtime checks it (it must not import this torch-side module).
ATTENTION_NAME = GROUPED_ATTENTION


def _attention(torch: Any) -> Any:
    def grouped(
        module: Any,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        scaling: float,
        dropout: float = 0.0,
        **_: Any,
    ) -> tuple[Any, None]:
        batch, heads, q_len, dim = query.shape
        kv_heads = key.shape[1]
        groups = heads // kv_heads
        # Query head h uses KV head h // groups (repeat_kv's order): stack each KV
        # head's `groups` query heads along the query axis.
        stacked = query.reshape(batch, kv_heads, groups * q_len, dim)
        weights = torch.matmul(stacked, key.transpose(2, 3)) * scaling
        total = weights.shape[-1]
        weights = weights.reshape(batch, kv_heads, groups, q_len, total)
        if attention_mask is not None:  # [batch, 1, q_len, total]: the same for every head
            weights = weights + attention_mask[:, :, None, :, :total]
        weights = torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        out = torch.matmul(weights.reshape(batch, kv_heads, groups * q_len, total), value)
        return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None

    return grouped


@contextlib.contextmanager
def grouped_attention(torch: Any, transformers: Any, model: Any) -> Iterator[None]:
    """Run ``model`` with the grouped attention (eager masks) inside the block."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    transformers.AttentionInterface.register(ATTENTION_NAME, _attention(torch))
    transformers.AttentionMaskInterface.register(
        ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["eager"]
    )
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = before
