"""Half-precision storage of the KV cache: do greedy tokens change?

``store_dtype: float16`` halves the bytes a restore moves, and it rounds every cached
key and value to 11 significant bits. This check decodes each of the project's 20
chat prompts twice: once with no cache, once with the first ``share`` of the prompt
(whole blocks, as the prefix cache stores it) restored through the store's own codec
at half precision. It reports, per prompt, whether the greedy tokens are equal, where
they first differ, and how far the first logits moved. It is a claim about this model
and these prompts, not a proof for any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from flinkai.llm.cache import KvCache
from flinkai.llm.generate import Decoder, greedy
from flinkai.state.base import Version
from flinkai.state.codec import CodecConfig, decode, encode
from flinkai_bench.research.llm_prompts import chat_prompts

__all__ = ["F16_CODEC", "fp16_token_check", "through_codec"]

#: The half-precision configuration the bench reports (the fast exact one, narrowed).
F16_CODEC = CodecConfig(
    codec="none", byte_shuffle=False, checksum="xxh3_128", store_dtype="float16"
)


def through_codec(cache: KvCache, codec: CodecConfig) -> KvCache:
    """``cache`` after a store round trip: each layer's keys and values encoded and decoded."""

    def trip(tensor: np.ndarray) -> np.ndarray:
        meta, payload = encode(tensor, codec, version=Version(1), model_version="check")
        return decode(payload, meta)

    return KvCache(
        keys=tuple(trip(k) for k in cache.keys), values=tuple(trip(v) for v in cache.values)
    )


def fp16_token_check(
    decoder: Decoder,
    prompt_ids: Callable[[list[dict[str, str]]], list[int]],
    *,
    share: float = 0.9,
    block_tokens: int = 64,
    new_tokens: int = 32,
    codec: CodecConfig = F16_CODEC,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Greedy tokens with a half-precision restored prefix against no cache, on 20 prompts.

    Args:
        decoder: The decoder.
        prompt_ids: Applies the chat template (the model's tokenizer).
        share: Fraction of each prompt restored (rounded down to whole blocks).
        block_tokens: The prefix cache's block size.
        new_tokens: Tokens decoded per prompt, eos not stopping (equal lengths).
        codec: The store codec the prefix goes through.
        progress: Called with one line per prompt.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, chat in enumerate(chat_prompts()):
        ids = prompt_ids(chat)
        cached = int(len(ids) * share) // block_tokens * block_tokens
        want = greedy(decoder, ids, max_new_tokens=new_tokens, stop_ids=())
        row: dict[str, Any] = {"prompt": i, "tokens": len(ids), "restored": cached}
        if cached == 0:
            row.update(equal=True, first_difference=None, max_logit_delta=0.0, skipped=True)
        else:
            _, prefix = decoder.forward(ids[:cached])
            half = through_codec(prefix, codec)
            got = greedy(decoder, ids, max_new_tokens=new_tokens, stop_ids=(), past=half)
            exact_logits, _ = decoder.forward(ids[cached:], prefix)
            half_logits, _ = decoder.forward(ids[cached:], half)
            diff = next(
                (
                    n
                    for n, (a, b) in enumerate(zip(want.token_ids, got.token_ids, strict=True))
                    if a != b
                ),
                None,
            )
            row.update(
                equal=want.token_ids == got.token_ids,
                first_difference=diff,
                max_logit_delta=float(np.abs(half_logits - exact_logits).max()),
                max_cache_delta=float(
                    max(
                        np.abs(a - b).max()
                        for a, b in zip(
                            prefix.keys + prefix.values, half.keys + half.values, strict=True
                        )
                    )
                ),
                skipped=False,
            )
        rows.append(row)
        if progress is not None:
            progress(
                f"prompt {i}: {row['tokens']} tokens, {row['restored']} restored, "
                f"{'equal' if row['equal'] else 'DIFFERENT at ' + str(row['first_difference'])}"
            )
    checked = [r for r in rows if not r["skipped"]]
    return {
        "codec": codec.compression + "+f16",
        "share": share,
        "block_tokens": block_tokens,
        "new_tokens": new_tokens,
        "prompts": len(rows),
        "checked": len(checked),
        "equal": sum(r["equal"] for r in checked),
        "max_logit_delta": max((r["max_logit_delta"] for r in checked), default=0.0),
        "seconds": time.perf_counter() - started,
        "rows": rows,
    }
