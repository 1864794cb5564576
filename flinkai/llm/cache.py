"""An immutable per-layer KV cache: the state a decoder carries between forwards.

A :class:`KvCache` holds one key and one value tensor per layer, each
``[1, n_kv_heads, seq_len, head_dim]`` (batch 1: the stream decodes one prompt at a
time). Token ranges are sliced and concatenated on axis 2, so a cached prefix can be
cut into blocks, stored, restored and joined again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.llm.errors import CacheShapeError

__all__ = ["CACHE_FIELDS", "TOKEN_AXIS", "KvCache", "ModelShape"]

#: The axis of a cache tensor that counts tokens.
TOKEN_AXIS = 2


#: The fields a cache depends on; ``manifest.json`` stores these and no others.
CACHE_FIELDS = ("n_layers", "n_kv_heads", "head_dim", "dtype", "vocab_size")


@dataclass(frozen=True)
class ModelShape:
    """A decoder's attention shape: what its KV cache looks like, and what plans size.

    The decoder runtime needs the first five fields; ``flinkai.plan`` also needs the
    model width and its query heads (0 when not known), to show what the
    ``hidden``-based sizing formula gets wrong under grouped-query attention.

    Attributes:
        n_layers: Decoder layers.
        n_kv_heads: Key/value heads (fewer than ``n_heads`` under GQA).
        head_dim: Size of one head.
        dtype: Element type of the cache.
        vocab_size: Vocabulary size (0 when not known).
        name: A display name (plans print it).
        hidden: Model width (0 when not known).
        n_heads: Query heads (0 when not known).
    """

    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype: str = "float32"
    vocab_size: int = 0
    name: str = ""
    hidden: int = 0
    n_heads: int = 0

    def __post_init__(self) -> None:
        if min(self.n_layers, self.n_kv_heads, self.head_dim) <= 0:
            raise CacheShapeError(f"model shape needs positive sizes, got {self}")
        if min(self.vocab_size, self.hidden, self.n_heads) < 0:
            raise CacheShapeError(f"model shape sizes cannot be negative, got {self}")
        np.dtype(self.dtype)  # fails early on an unknown dtype name

    def cache_fields(self) -> dict[str, int | str]:
        """The fields the cache depends on (:data:`CACHE_FIELDS`), as ``manifest.json`` holds them."""
        return {name: getattr(self, name) for name in CACHE_FIELDS}

    @property
    def kv_width(self) -> int:
        """Cached elements per token per layer, for K (and again for V)."""
        return self.n_kv_heads * self.head_dim

    @property
    def formula_overstatement(self) -> float:
        """How many times the ``hidden``-based formula overstates the true cache.

        Raises:
            CacheShapeError: ``hidden`` is not known.
        """
        if self.hidden <= 0:
            raise CacheShapeError(f"{self.name or 'this model'}: hidden size not known")
        return self.hidden / self.kv_width

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token adds to the cache (keys and values of every layer)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * np.dtype(self.dtype).itemsize

    def empty_cache(self) -> KvCache:
        """A cache of zero tokens with this shape."""
        return KvCache.empty(self.n_layers, self.n_kv_heads, self.head_dim, np.dtype(self.dtype))


@dataclass(frozen=True)
class KvCache:
    """Keys and values per layer, each ``[1, n_kv_heads, seq_len, head_dim]``.

    Construction checks that every tensor has the same shape and dtype, so a cache
    that exists is consistent; callers must not mutate the arrays in place.
    """

    keys: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if not self.keys or len(self.keys) != len(self.values):
            raise CacheShapeError(
                f"a cache needs the same non-zero number of key and value tensors, "
                f"got {len(self.keys)} keys and {len(self.values)} values"
            )
        first = self.keys[0]
        if first.ndim != 4 or first.shape[0] != 1:
            raise CacheShapeError(
                f"cache tensors must be [1, n_kv_heads, seq_len, head_dim], got {first.shape}"
            )
        for kind, tensors in (("key", self.keys), ("value", self.values)):
            for layer, tensor in enumerate(tensors):
                if tensor.shape != first.shape or tensor.dtype != first.dtype:
                    raise CacheShapeError(
                        f"layer {layer} {kind} is {tensor.dtype}{list(tensor.shape)}, "
                        f"layer 0 key is {first.dtype}{list(first.shape)}"
                    )

    @property
    def seq_len(self) -> int:
        """Number of tokens the cache covers."""
        return int(self.keys[0].shape[TOKEN_AXIS])

    @property
    def n_layers(self) -> int:
        """Number of decoder layers."""
        return len(self.keys)

    @property
    def n_kv_heads(self) -> int:
        """Number of key/value heads (fewer than query heads under grouped-query attention)."""
        return int(self.keys[0].shape[1])

    @property
    def head_dim(self) -> int:
        """Size of one head's key or value vector."""
        return int(self.keys[0].shape[3])

    @property
    def dtype(self) -> np.dtype:
        """Element type of every tensor."""
        return self.keys[0].dtype

    @property
    def nbytes(self) -> int:
        """Bytes held by all key and value tensors."""
        return sum(t.nbytes for t in self.keys) + sum(t.nbytes for t in self.values)

    def matches(self, shape: ModelShape) -> bool:
        """Whether this cache has ``shape``'s layers, heads, head size and dtype."""
        return (
            self.n_layers == shape.n_layers
            and self.n_kv_heads == shape.n_kv_heads
            and self.head_dim == shape.head_dim
            and self.dtype == np.dtype(shape.dtype)
        )

    def slice(self, start: int, stop: int) -> KvCache:
        """The cache of tokens ``[start, stop)`` (copies, so the parent can be freed)."""
        if not 0 <= start <= stop <= self.seq_len:
            raise CacheShapeError(
                f"slice [{start}, {stop}) is outside a cache of {self.seq_len} tokens"
            )
        return KvCache(
            keys=tuple(np.ascontiguousarray(k[:, :, start:stop, :]) for k in self.keys),
            values=tuple(np.ascontiguousarray(v[:, :, start:stop, :]) for v in self.values),
        )

    @staticmethod
    def concat(parts: Sequence[KvCache]) -> KvCache:
        """Join caches along the token axis, in order."""
        if not parts:
            raise CacheShapeError("concat needs at least one cache")
        if len(parts) == 1:
            return parts[0]
        n_layers = parts[0].n_layers
        if any(p.n_layers != n_layers for p in parts):
            raise CacheShapeError(f"cannot concat caches of {[p.n_layers for p in parts]} layers")
        head = parts[0].keys[0].shape
        for p in parts:
            other = p.keys[0].shape
            if (other[1], other[3]) != (head[1], head[3]) or p.dtype != parts[0].dtype:
                raise CacheShapeError(
                    f"cannot concat a {p.dtype}{list(other)} cache onto "
                    f"a {parts[0].dtype}{list(head)} one"
                )
        return KvCache(
            keys=tuple(
                np.concatenate([p.keys[i] for p in parts], axis=TOKEN_AXIS) for i in range(n_layers)
            ),
            values=tuple(
                np.concatenate([p.values[i] for p in parts], axis=TOKEN_AXIS)
                for i in range(n_layers)
            ),
        )

    @staticmethod
    def empty(
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: np.dtype | type[np.generic] | str = np.float32,
    ) -> KvCache:
        """A cache of zero tokens (the decoder's ``past`` for a fresh prompt)."""
        if min(n_layers, n_kv_heads, head_dim) <= 0:
            raise CacheShapeError(
                f"empty cache needs positive sizes, got {n_layers=} {n_kv_heads=} {head_dim=}"
            )
        zero = np.zeros((1, n_kv_heads, 0, head_dim), dtype=dtype)
        return KvCache(keys=(zero,) * n_layers, values=(zero,) * n_layers)
