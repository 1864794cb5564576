"""Greedy decoding on :class:`~flinkai.llm.decoder.OnnxDecoder`, with prefix reuse.

``decode_greedy`` is the one greedy loop of the package: it takes a cache that
already covers a prefix of the prompt (restored from a snapshot store, say),
prefills only the rest, then decodes one token per forward until a stop id or the
token budget. ``greedy`` is the same loop with the stop ids and the default budget
taken from the model's manifest, i.e. from its own generation config.
:class:`~flinkai.llm.prefix.PrefixCache` decodes through ``decode_greedy`` too, so a
cached and an uncached run compare token for token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from flinkai.llm.artifacts import LlmManifest
from flinkai.llm.cache import KvCache
from flinkai.llm.errors import LlmError

__all__ = ["Completion", "Decoder", "Detokenizer", "Forward", "decode_greedy", "greedy"]


class Forward(Protocol):
    """What :func:`decode_greedy` needs of a decoder: one forward pass on a cache."""

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]: ...


class Decoder(Forward, Protocol):
    """What :func:`greedy` needs of a decoder (``OnnxDecoder`` or a test double)."""

    @property
    def manifest(self) -> LlmManifest: ...


class Detokenizer(Protocol):
    """Turns ids back into text (``LlmTokenizer``)."""

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str: ...


@dataclass(frozen=True)
class Completion:
    """The result of one greedy decode.

    Attributes:
        token_ids: Generated ids, the stop id included when one ended the decode.
        text: Decoded text without special tokens (None when no tokenizer was given).
        prompt_tokens: Length of the prompt.
        cached_tokens: Prompt tokens taken from ``past`` instead of prefilled.
        finish_reason: ``stop`` (a stop id) or ``length`` (the budget ran out).
        ttft_ms: Time to the first generated token: suffix prefill + its argmax.
        prefill_ms: Time of the prefill forward alone.
        decode_ms: Time of every later forward together.
        prompt_cache: Cache covering exactly the prompt (to publish its prefix blocks).
    """

    token_ids: tuple[int, ...]
    text: str | None
    prompt_tokens: int
    cached_tokens: int
    finish_reason: Literal["stop", "length"]
    ttft_ms: float
    prefill_ms: float
    decode_ms: float
    prompt_cache: KvCache

    @property
    def decode_ms_per_token(self) -> float:
        """Mean time of one decode step (0 when only one token was generated)."""
        steps = len(self.token_ids) - 1
        return self.decode_ms / steps if steps > 0 else 0.0


def greedy(
    decoder: Decoder,
    prompt_ids: Sequence[int],
    max_new_tokens: int | None = None,
    stop_ids: Collection[int] | None = None,
    past: KvCache | None = None,
    *,
    tokenizer: Detokenizer | None = None,
) -> Completion:
    """Decode greedily after ``prompt_ids``, with the manifest's budget and stop ids.

    Args:
        decoder: The decoder.
        prompt_ids: The whole prompt, chat template applied.
        max_new_tokens: Budget; the manifest's ``max_new_tokens`` when None.
        stop_ids: Ids that end the decode; the manifest's ``eos_token_ids`` when None.
        past: As :func:`decode_greedy`'s.
        tokenizer: Decodes the text of the completion when given.

    Raises:
        LlmError: An empty prompt, a non-positive budget, or a cache longer than the prompt.
    """
    manifest = decoder.manifest
    return decode_greedy(
        decoder,
        prompt_ids,
        manifest.max_new_tokens if max_new_tokens is None else max_new_tokens,
        manifest.eos_token_ids if stop_ids is None else stop_ids,
        past,
        tokenizer=tokenizer,
    )


def decode_greedy(
    decoder: Forward,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    stop_ids: Collection[int],
    past: KvCache | None = None,
    *,
    tokenizer: Detokenizer | None = None,
    on_first_token: Callable[[KvCache], None] | None = None,
) -> Completion:
    """Decode greedily (argmax, first index on ties) after ``prompt_ids``.

    Args:
        decoder: The decoder.
        prompt_ids: The whole prompt, chat template applied.
        max_new_tokens: Most tokens generated, the stop id included.
        stop_ids: Ids that end the decode (kept as its last token).
        past: A cache covering the first ``past.seq_len`` prompt tokens. The caller
            vouches that it was made from these very tokens by this model version.
            If it covers the whole prompt, its last token is recomputed (a forward
            needs one new token to yield logits).
        tokenizer: Decodes the text of the completion when given.
        on_first_token: Called with the prompt's cache once the first token is
            known, before the decode steps (prefix reuse publishes its blocks there,
            so the publish is in neither TTFT nor ``decode_ms``).

    Raises:
        LlmError: An empty prompt, a non-positive budget, or a cache longer than the prompt.
    """
    stops = frozenset(int(i) for i in stop_ids)
    if not prompt_ids:
        raise LlmError("the prompt has no tokens")
    if max_new_tokens < 1:
        raise LlmError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    cached = 0 if past is None else past.seq_len
    if cached > len(prompt_ids):
        raise LlmError(
            f"the cache covers {cached} tokens, more than the {len(prompt_ids)}-token prompt"
        )
    if past is not None and cached == len(prompt_ids):
        cached -= 1
        past = past.slice(0, cached)

    started = time.perf_counter()
    logits, cache = decoder.forward(list(prompt_ids[cached:]), past)
    prefill_ms = (time.perf_counter() - started) * 1000.0
    prompt_cache = cache
    token = int(np.argmax(logits))
    ttft_ms = (time.perf_counter() - started) * 1000.0
    if on_first_token is not None:
        on_first_token(prompt_cache)
    generated = [token]
    decode_started = time.perf_counter()
    while token not in stops and len(generated) < max_new_tokens:
        logits, cache = decoder.forward([token], cache)
        token = int(np.argmax(logits))
        generated.append(token)
    decode_ms = (time.perf_counter() - decode_started) * 1000.0 if len(generated) > 1 else 0.0
    return Completion(
        token_ids=tuple(generated),
        text=None if tokenizer is None else tokenizer.decode(generated),
        prompt_tokens=len(prompt_ids),
        cached_tokens=cached,
        finish_reason="stop" if token in stops else "length",
        ttft_ms=ttft_ms,
        prefill_ms=prefill_ms,
        decode_ms=decode_ms,
        prompt_cache=prompt_cache,
    )
