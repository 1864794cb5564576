"""KvCache: shape checks, slicing, concatenation and byte counts."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.errors import CacheShapeError

SHAPE = ModelShape(n_layers=3, n_kv_heads=2, head_dim=4, dtype="float32", vocab_size=10)


def random_cache(seq_len: int, seed: int = 0, shape: ModelShape = SHAPE) -> KvCache:
    rng = np.random.default_rng(seed)
    dims = (1, shape.n_kv_heads, seq_len, shape.head_dim)
    return KvCache(
        keys=tuple(rng.standard_normal(dims, dtype=np.float32) for _ in range(shape.n_layers)),
        values=tuple(rng.standard_normal(dims, dtype=np.float32) for _ in range(shape.n_layers)),
    )


def assert_same(a: KvCache, b: KvCache) -> None:
    assert a.n_layers == b.n_layers
    for x, y in zip(a.keys + a.values, b.keys + b.values, strict=True):
        np.testing.assert_array_equal(x, y)


def test_properties() -> None:
    cache = random_cache(7)
    assert cache.seq_len == 7
    assert cache.n_layers == 3
    assert cache.n_kv_heads == 2
    assert cache.head_dim == 4
    assert cache.nbytes == 2 * 3 * 2 * 7 * 4 * 4
    assert cache.nbytes == 7 * SHAPE.kv_bytes_per_token
    assert cache.matches(SHAPE)
    assert not cache.matches(ModelShape(n_layers=3, n_kv_heads=2, head_dim=8))


def test_empty() -> None:
    empty = KvCache.empty(3, 2, 4)
    assert empty.seq_len == 0
    assert empty.nbytes == 0
    assert empty.dtype == np.float32
    assert empty.matches(SHAPE)
    assert SHAPE.empty_cache().seq_len == 0
    with pytest.raises(CacheShapeError):
        KvCache.empty(0, 2, 4)


def test_slice_concat_round_trip() -> None:
    cache = random_cache(10)
    parts = [cache.slice(0, 4), cache.slice(4, 4), cache.slice(4, 9), cache.slice(9, 10)]
    assert [p.seq_len for p in parts] == [4, 0, 5, 1]
    assert_same(KvCache.concat(parts), cache)
    # The slice holds exactly the asked tokens.
    np.testing.assert_array_equal(parts[2].keys[1], cache.keys[1][:, :, 4:9, :])
    assert_same(KvCache.concat([KvCache.empty(3, 2, 4), cache]), cache)


def test_slice_copies() -> None:
    cache = random_cache(5)
    part = cache.slice(1, 3)
    assert not np.shares_memory(part.keys[0], cache.keys[0])
    assert part.keys[0].flags["C_CONTIGUOUS"]


@pytest.mark.parametrize(("start", "stop"), [(-1, 2), (3, 2), (0, 6)])
def test_slice_out_of_range(start: int, stop: int) -> None:
    with pytest.raises(CacheShapeError, match="outside a cache of 5 tokens"):
        random_cache(5).slice(start, stop)


def test_concat_rejects_mismatches() -> None:
    with pytest.raises(CacheShapeError):
        KvCache.concat([])
    other_heads = random_cache(2, shape=ModelShape(n_layers=3, n_kv_heads=1, head_dim=4))
    with pytest.raises(CacheShapeError, match="cannot concat"):
        KvCache.concat([random_cache(2), other_heads])
    fewer_layers = random_cache(2, shape=ModelShape(n_layers=2, n_kv_heads=2, head_dim=4))
    with pytest.raises(CacheShapeError, match="layers"):
        KvCache.concat([random_cache(2), fewer_layers])
    half = KvCache.empty(3, 2, 4, np.float16)
    with pytest.raises(CacheShapeError, match="cannot concat"):
        KvCache.concat([random_cache(2), half])


def test_construction_checks() -> None:
    good = random_cache(3)
    with pytest.raises(CacheShapeError, match="same non-zero number"):
        KvCache(keys=good.keys, values=good.values[:2])
    with pytest.raises(CacheShapeError, match="same non-zero number"):
        KvCache(keys=(), values=())
    with pytest.raises(CacheShapeError, match=r"\[1, n_kv_heads"):
        KvCache(keys=(np.zeros((2, 3)),), values=(np.zeros((2, 3)),))
    with pytest.raises(CacheShapeError, match="layer 1 value"):
        KvCache(keys=good.keys, values=(good.values[0], good.values[1][:, :, :2], good.values[2]))
    with pytest.raises(CacheShapeError):
        ModelShape(n_layers=0, n_kv_heads=1, head_dim=1)


def test_one_model_shape_for_the_runtime_and_the_planner() -> None:
    from flinkai.plan.kvcache import SMOLLM2_135M

    # The planner's shape is the runtime's class: it builds a cache of its own shape.
    cache = SMOLLM2_135M.empty_cache()
    assert cache.matches(SMOLLM2_135M)
    assert SMOLLM2_135M.kv_width == 3 * 64
    assert SMOLLM2_135M.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4
    # manifest.json keeps only what the cache depends on.
    assert SMOLLM2_135M.cache_fields() == {
        "n_layers": 30,
        "n_kv_heads": 3,
        "head_dim": 64,
        "dtype": "float32",
        "vocab_size": 49152,
    }
    with pytest.raises(CacheShapeError, match="hidden size not known"):
        _ = SHAPE.formula_overstatement
    with pytest.raises(CacheShapeError, match="negative"):
        ModelShape(n_layers=1, n_kv_heads=1, head_dim=1, hidden=-1)
