"""Prefix reuse: restore the longest cached prefix of a prompt, prefill only the rest.

The prompt's token ids are cut into fixed blocks (64 tokens by default). Block ``i``
is named by a chained hash, sha256 over the hash of block ``i - 1`` and the ids of
block ``i`` (as vLLM's prefix cache does), so one hash names the whole prefix up to
the end of its block, and two prompts share a block hash only if they share every
token before it.

Each block's K/V is stored per layer as one snapshot,
``SnapshotKey(model_id, layer_idx, block_hash)``, holding a ``float32`` tensor
``[2, n_kv_heads, block_tokens, head_dim]`` (keys then values). A snapshot holds one
block, not the whole prefix: a prompt that shares only the first ``k`` blocks of
another still finds them, the bytes stored grow linearly with the prefix (a
whole-prefix snapshot at every block boundary grows quadratically), and a restore
joins blocks in order (``docs/llm.md`` has the measurement).

A lookup asks the store for every block of the prompt that could be reused (all
layers, one ``get_many``) and restores the longest run of blocks from the start
whose every layer came back. The store verifies each snapshot (checksum, model
version, dtype, shape) and counts what it refuses; a refused or missing block ends
the run there, and the decoder recomputes from that point. A wrong cache therefore
never reaches the decoder. After the prefill the new full blocks are published in
one ``put_many`` (one Kafka transaction).

A prompt always leaves at least one token to prefill: the decoder needs a forward
pass to produce the first token's logits.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from flinkai.llm.cache import TOKEN_AXIS, KvCache, ModelShape
from flinkai.llm.generate import decode_greedy
from flinkai.state import Snapshot, SnapshotKey, SnapshotStore, StateError, StoreUnavailableError

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "Decoder",
    "PrefixCache",
    "PrefixCompletion",
    "PrefixStats",
    "Restored",
    "block_hashes",
]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_TOKENS = 64
#: Hex digits kept of each block hash (128 bits, as ``flinkai.state.prefix_hash``).
_HASH_HEX = 32


class Decoder(Protocol):
    """What prefix reuse needs of a decoder (``flinkai.llm.decoder.OnnxDecoder`` has it)."""

    @property
    def model_id(self) -> str: ...

    @property
    def model_version(self) -> str: ...

    @property
    def shape(self) -> ModelShape: ...

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]: ...


def block_hashes(
    token_ids: Sequence[int] | np.ndarray, block_tokens: int, namespace: str = ""
) -> list[str]:
    """Chained hashes of the full blocks of ``token_ids``; a partial last block has none.

    Args:
        token_ids: The prompt's ids.
        block_tokens: Tokens per block.
        namespace: Seeds the chain: KV made under a LoRA adapter (``name@version``)
            differs from the base model's for the same tokens. Empty: the base model.

    Returns:
        One lowercase hex hash per full block; hash ``i`` covers tokens
        ``[0, (i + 1) * block_tokens)``.
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    ids = np.asarray(token_ids, dtype="<i8")
    parent = hashlib.sha256(namespace.encode()).digest()[:8] if namespace else b""
    out: list[str] = []
    for start in range(0, len(ids) - block_tokens + 1, block_tokens):
        digest = hashlib.sha256(parent + ids[start : start + block_tokens].tobytes()).hexdigest()
        out.append(digest[:_HASH_HEX])
        parent = bytes.fromhex(out[-1])
    return out


@dataclass
class PrefixStats:
    """Counters of one :class:`PrefixCache`; read them, do not write them.

    Attributes:
        lookups: Prompts looked up.
        hits: Lookups that restored at least one block.
        restored_tokens: Tokens restored instead of recomputed, over all lookups.
        published_blocks: Blocks written to the store.
        rejected: Reason -> snapshots the store refused during lookups (``checksum``,
            ``model_version``, ``shape``...); each one made the decoder recompute.
        store_errors: Reason -> store calls that failed (the prompt was then
            recomputed, or its blocks left unpublished): ``store_unavailable`` when
            the store cannot be reached or is not open, else the exception's name.
    """

    lookups: int = 0
    hits: int = 0
    restored_tokens: int = 0
    published_blocks: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    store_errors: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Restored:
    """What a lookup found.

    Attributes:
        past: The restored cache of the first ``cached_tokens`` tokens, or ``None``.
        cached_tokens: Tokens restored (a multiple of the block size).
        restore_ms: Time the lookup and the restore took.
    """

    past: KvCache | None
    cached_tokens: int
    restore_ms: float


@dataclass(frozen=True)
class PrefixCompletion:
    """A greedy completion and where its time went.

    Attributes:
        token_ids: Generated ids, the stop id included when one ended it (the loop
            is ``flinkai.llm.generate.decode_greedy``).
        prompt_tokens: Prompt length in tokens.
        cached_tokens: Prompt tokens restored from the store.
        ttft_ms: From the call to the first generated token: lookup, restore, prefill.
        restore_ms: Lookup and restore.
        prefill_ms: The decoder's forward over the uncached suffix and its argmax.
        publish_ms: Writing the new blocks (after the first token, so not in TTFT).
        total_ms: The whole call.
        stopped: A stop token ended it (else ``max_new_tokens`` did).
    """

    token_ids: list[int]
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: float
    restore_ms: float
    prefill_ms: float
    publish_ms: float
    total_ms: float
    stopped: bool


class PrefixCache:
    """Finds, restores and publishes prompt prefixes in a :class:`SnapshotStore`.

    With ``store=None`` it never finds nor publishes anything (the no-cache path
    runs the same code). An :class:`~flinkai.state.InMemorySnapshotStore` makes it
    an in-process prefix cache; a :class:`~flinkai.state.KafkaSnapshotStore` shares
    it between workers and keeps it across restarts.

    Args:
        store: Where block snapshots live; ``None`` for no reuse.
        model_id: Names the model in snapshot keys.
        model_version: Snapshots of any other version are refused.
        shape: The decoder's cache shape; snapshots of any other shape are refused.
        block_tokens: Tokens per block.
        publish: Write new blocks after a prefill (a read-only worker turns it off).
    """

    def __init__(
        self,
        store: SnapshotStore | None,
        *,
        model_id: str,
        model_version: str,
        shape: ModelShape,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        publish: bool = True,
    ) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.store = store
        self.model_id = model_id
        self.model_version = model_version
        self.shape = shape
        self.block_tokens = block_tokens
        self.publish_enabled = publish
        self.stats = PrefixStats()
        # A store that is down fails every call: warn when the reason changes, not per prompt.
        self._last_error: str | None = None
        self._block_shape = (2, shape.n_kv_heads, block_tokens, shape.head_dim)

    @classmethod
    def for_decoder(
        cls,
        decoder: Decoder,
        store: SnapshotStore | None,
        *,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        publish: bool = True,
    ) -> PrefixCache:
        """A cache keyed by ``decoder``'s model id, version and shape."""
        return cls(
            store,
            model_id=decoder.model_id,
            model_version=decoder.model_version,
            shape=decoder.shape,
            block_tokens=block_tokens,
            publish=publish,
        )

    def _keys(self, block_hash: str) -> list[SnapshotKey]:
        return [
            SnapshotKey(self.model_id, layer, block_hash) for layer in range(self.shape.n_layers)
        ]

    def lookup(self, token_ids: Sequence[int], namespace: str = "") -> Restored:
        """Restore the longest cached run of blocks from the start of ``token_ids``.

        ``namespace``: the adapter tag the KV must have been made under (see
        :func:`block_hashes`). Never raises for the store's sake: a store error counts
        and means a miss.
        """
        started = time.perf_counter()
        self.stats.lookups += 1
        usable = max(0, len(token_ids) - 1) // self.block_tokens
        if self.store is None or usable == 0:
            return Restored(None, 0, _ms_since(started))
        hashes = block_hashes(token_ids[: usable * self.block_tokens], self.block_tokens, namespace)
        keys = [k for h in hashes for k in self._keys(h)]
        before = Counter(self.store.stats.rejected)
        try:
            snapshots = self.store.get_many(
                keys,
                model_version=self.model_version,
                dtype=self.shape.dtype,
                shape=self._block_shape,
            )
        except StateError as e:
            self._store_error("prefix lookup failed, recomputing", e)
            return Restored(None, 0, _ms_since(started))
        finally:
            self.stats.rejected.update(self.store.stats.rejected - before)
        self._last_error = None
        layers = self.shape.n_layers
        blocks: list[list[Snapshot]] = []
        for b in range(len(hashes)):
            row = snapshots[b * layers : (b + 1) * layers]
            if any(s is None for s in row):
                break
            blocks.append([s for s in row if s is not None])
        if not blocks:
            return Restored(None, 0, _ms_since(started))
        past = KvCache(
            keys=tuple(
                np.concatenate([blk[layer].tensor[0][None] for blk in blocks], axis=TOKEN_AXIS)
                for layer in range(layers)
            ),
            values=tuple(
                np.concatenate([blk[layer].tensor[1][None] for blk in blocks], axis=TOKEN_AXIS)
                for layer in range(layers)
            ),
        )
        self.stats.hits += 1
        self.stats.restored_tokens += past.seq_len
        return Restored(past, past.seq_len, _ms_since(started))

    def publish(
        self, token_ids: Sequence[int], cache: KvCache, first_block: int = 0, namespace: str = ""
    ) -> int:
        """Write the full blocks of ``token_ids`` from ``first_block`` on, from ``cache``.

        Args:
            token_ids: The prompt (``cache`` covers at least its full blocks).
            cache: The decoder's cache after the prefill.
            first_block: Blocks before it are already stored (they were restored).
            namespace: The adapter tag the KV was made under (see :func:`block_hashes`).

        Returns:
            Blocks written; 0 on a store error (counted, not raised).
        """
        if self.store is None or not self.publish_enabled:
            return 0
        full = min(len(token_ids), cache.seq_len) // self.block_tokens
        if full <= first_block:
            return 0
        hashes = block_hashes(token_ids[: full * self.block_tokens], self.block_tokens, namespace)
        items: list[tuple[SnapshotKey, np.ndarray]] = []
        for b in range(first_block, full):
            start, stop = b * self.block_tokens, (b + 1) * self.block_tokens
            for layer, key in enumerate(self._keys(hashes[b])):
                tensor = np.stack(
                    [
                        cache.keys[layer][0, :, start:stop, :],
                        cache.values[layer][0, :, start:stop, :],
                    ]
                ).astype(self.shape.dtype, copy=False)
                items.append((key, tensor))
        try:
            self.store.put_many(items, model_version=self.model_version)
        except StateError as e:
            self._store_error(f"publishing {full - first_block} prefix blocks failed", e)
            return 0
        self._last_error = None
        self.stats.published_blocks += full - first_block
        return full - first_block

    def _store_error(self, what: str, e: StateError) -> None:
        """Count a failed store call by reason; log it once per run of the same reason."""
        reason = "store_unavailable" if isinstance(e, StoreUnavailableError) else type(e).__name__
        self.stats.store_errors[reason] += 1
        if reason != self._last_error:
            log.warning("%s (%s): %s", what, reason, e)
        else:
            log.debug("%s (%s): %s", what, reason, e)
        self._last_error = reason

    def complete(
        self,
        decoder: Decoder,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int,
        stop_ids: Sequence[int] = (),
    ) -> PrefixCompletion:
        """Greedy completion of ``prompt_ids``, reusing and then publishing its prefix.

        Args:
            decoder: Must be the model this cache is keyed by.
            prompt_ids: The prompt, at least one token.
            max_new_tokens: Most tokens generated (at least one).
            stop_ids: Tokens that end the completion (kept as its last token).

        Raises:
            ValueError: An empty prompt, ``max_new_tokens < 1`` or another decoder's model.
        """
        if not prompt_ids:
            raise ValueError("the prompt has no tokens")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if (decoder.model_id, decoder.model_version) != (self.model_id, self.model_version):
            raise ValueError(
                f"decoder {decoder.model_id}@{decoder.model_version} is not the model this "
                f"prefix cache holds ({self.model_id}@{self.model_version})"
            )
        started = time.perf_counter()
        ids = [int(t) for t in prompt_ids]
        restored = self.lookup(ids)
        first: dict[str, float] = {}

        def publish_prompt(cache: KvCache) -> None:
            # After the first token: the publish is not in TTFT.
            first["ttft_ms"] = _ms_since(started)
            publish_start = time.perf_counter()
            self.publish(ids, cache, restored.cached_tokens // self.block_tokens)
            first["publish_ms"] = _ms_since(publish_start)

        done = decode_greedy(
            decoder,
            ids,
            max_new_tokens,
            stop_ids,
            restored.past,
            on_first_token=publish_prompt,
        )
        return PrefixCompletion(
            token_ids=list(done.token_ids),
            prompt_tokens=len(ids),
            cached_tokens=restored.cached_tokens,
            ttft_ms=first["ttft_ms"],
            restore_ms=restored.restore_ms,
            prefill_ms=done.ttft_ms,
            publish_ms=first["publish_ms"],
            total_ms=_ms_since(started),
            stopped=done.finish_reason == "stop",
        )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
