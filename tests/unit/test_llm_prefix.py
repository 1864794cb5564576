"""Prefix reuse against the in-memory store, with a tiny deterministic fake decoder."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.llm.prefix import PrefixCache, block_hashes
from flinkai.state import CodecConfig, InMemorySnapshotStore, SnapshotKey, StoreUnavailableError
from flinkai.state.memory import _Stored
from tests.unit.llm_fake import FakeDecoder

B = 8  # tokens per block: small blocks keep the fake fast and the arithmetic visible
RNG = np.random.default_rng(5)


def prompt(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, 90, n)]


def reference(decoder: FakeDecoder, ids: list[int], new: int = 6) -> list[int]:
    return (
        PrefixCache.for_decoder(decoder, None, block_tokens=B)
        .complete(decoder, ids, max_new_tokens=new)
        .token_ids
    )


def test_block_hashes_chain_and_skip_the_partial_last_block() -> None:
    ids = prompt(3 * B + 5)
    hashes = block_hashes(ids, B)
    assert len(hashes) == 3 and len(set(hashes)) == 3
    assert block_hashes(ids[: 3 * B], B) == hashes  # the partial tail changes nothing
    assert block_hashes(ids[:B], B) == hashes[:1]
    # Chained: the same second block after another first block has another hash.
    other = [ids[0] + 1, *ids[1:]]
    changed = block_hashes(other, B)
    assert changed[0] != hashes[0] and changed[1] != hashes[1] and changed[2] != hashes[2]
    assert block_hashes(ids[: B - 1], B) == []
    assert all(len(h) == 32 and int(h, 16) >= 0 for h in hashes)
    with pytest.raises(ValueError):
        block_hashes(ids, 0)


def test_a_second_prompt_restores_the_shared_blocks_and_prefills_only_the_rest() -> None:
    decoder = FakeDecoder()
    store = InMemorySnapshotStore()
    cache = PrefixCache.for_decoder(decoder, store, block_tokens=B)
    shared = prompt(3 * B + 3, seed=1)
    first = cache.complete(decoder, shared + prompt(5, seed=2), max_new_tokens=6)
    assert first.cached_tokens == 0 and cache.stats.published_blocks == 4
    # 3 full shared blocks, then a block that mixes shared and first-only tokens.
    second_ids = shared + prompt(2 * B, seed=3)
    decoder.prefilled.clear()
    second = cache.complete(decoder, second_ids, max_new_tokens=6)
    assert second.cached_tokens == 3 * B
    assert decoder.prefilled[0] == len(second_ids) - 3 * B
    assert second.token_ids == reference(FakeDecoder(), second_ids)
    assert cache.stats.hits == 1 and cache.stats.restored_tokens == 3 * B
    # The second prompt published its own blocks 3.. (not the restored ones again).
    assert cache.stats.published_blocks == 4 + (len(second_ids) // B - 3)


def test_a_prompt_of_whole_blocks_still_prefills_its_last_token() -> None:
    decoder = FakeDecoder()
    cache = PrefixCache.for_decoder(decoder, InMemorySnapshotStore(), block_tokens=B)
    ids = prompt(2 * B, seed=4)
    cache.complete(decoder, ids, max_new_tokens=3)
    decoder.prefilled.clear()
    again = cache.complete(decoder, ids, max_new_tokens=3)
    # Block 1 ends at the last token, so only block 0 can be reused.
    assert again.cached_tokens == B and decoder.prefilled[0] == B
    assert again.token_ids == reference(FakeDecoder(), ids, 3)


def test_the_longest_prefix_stops_at_the_first_missing_block() -> None:
    decoder = FakeDecoder()
    store = InMemorySnapshotStore()
    cache = PrefixCache.for_decoder(decoder, store, block_tokens=B)
    ids = prompt(4 * B + 1, seed=6)
    cache.complete(decoder, ids, max_new_tokens=2)
    hashes = block_hashes(ids, B)
    # One layer of block 1 is lost: blocks 2 and 3 are stored but not reachable.
    assert store.delete(SnapshotKey(decoder.model_id, 1, hashes[1])) == 1
    restored = cache.lookup(ids)
    assert restored.cached_tokens == B
    assert restored.past is not None and restored.past.seq_len == B


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_corrupt_block_is_refused_counted_and_recomputed(codec: str) -> None:
    decoder = FakeDecoder()
    store = InMemorySnapshotStore(CodecConfig(codec=codec))  # type: ignore[arg-type]
    cache = PrefixCache.for_decoder(decoder, store, block_tokens=B)
    ids = prompt(3 * B + 2, seed=7)
    expected = cache.complete(decoder, ids, max_new_tokens=6).token_ids
    key = SnapshotKey(decoder.model_id, 2, block_hashes(ids, B)[1])
    (version,) = store.versions(key)
    stored = store._data[key][version]
    broken = bytearray(stored.payload)
    broken[len(broken) // 2] ^= 0x01
    store._data[key][version] = _Stored(stored.meta, bytes(broken))

    decoder.prefilled.clear()
    again = cache.complete(decoder, ids, max_new_tokens=6)
    assert sum(cache.stats.rejected.values()) == 1  # evidence the fault was seen
    assert set(cache.stats.rejected) <= {"checksum", "decode", "size"}
    assert again.cached_tokens == B and decoder.prefilled[0] == len(ids) - B
    assert again.token_ids == expected


def test_snapshots_of_another_model_version_or_shape_are_refused() -> None:
    store = InMemorySnapshotStore()
    old = FakeDecoder(model_version="f0")
    ids = prompt(3 * B + 1, seed=8)
    PrefixCache.for_decoder(old, store, block_tokens=B).complete(old, ids, max_new_tokens=2)

    new = FakeDecoder(model_version="f1")
    cache = PrefixCache.for_decoder(new, store, block_tokens=B)
    got = cache.complete(new, ids, max_new_tokens=6)
    assert got.cached_tokens == 0 and cache.stats.rejected["model_version"] == 3 * 3
    assert got.token_ids == reference(FakeDecoder(), ids)

    # The same model id and version but fewer tokens per block: another shape.
    small = PrefixCache.for_decoder(new, store, block_tokens=B)
    small.block_tokens, small._block_shape = B, (2, 2, B // 2, 4)
    assert small.lookup(ids).cached_tokens == 0
    assert small.stats.rejected["shape"] > 0


def test_a_failing_store_means_recompute_never_an_error() -> None:
    class DownStore(InMemorySnapshotStore):
        def get_many(self, *a, **k):  # type: ignore[no-untyped-def]
            raise StoreUnavailableError("broker down")

        def put_many(self, *a, **k):  # type: ignore[no-untyped-def]
            raise StoreUnavailableError("broker down")

    decoder = FakeDecoder()
    cache = PrefixCache.for_decoder(decoder, DownStore(), block_tokens=B)
    ids = prompt(3 * B, seed=9)
    got = cache.complete(decoder, ids, max_new_tokens=4)
    assert got.cached_tokens == 0
    assert cache.stats.store_errors == {"store_unavailable": 2}
    assert got.token_ids == reference(FakeDecoder(), ids, 4)


def test_no_store_and_read_only_publish_nothing() -> None:
    decoder = FakeDecoder()
    store = InMemorySnapshotStore()
    reader = PrefixCache.for_decoder(decoder, store, block_tokens=B, publish=False)
    reader.complete(decoder, prompt(3 * B, seed=10), max_new_tokens=2)
    assert store.stats.puts == 0 and reader.stats.published_blocks == 0
    none = PrefixCache.for_decoder(decoder, None, block_tokens=B)
    assert none.lookup(prompt(3 * B)).cached_tokens == 0


def test_stop_tokens_end_the_completion_and_bad_calls_raise() -> None:
    decoder = FakeDecoder()
    cache = PrefixCache.for_decoder(decoder, None, block_tokens=B)
    ids = prompt(B + 3, seed=11)
    free = cache.complete(decoder, ids, max_new_tokens=5).token_ids
    cut = cache.complete(decoder, ids, max_new_tokens=5, stop_ids=[free[2]])
    assert cut.stopped and cut.token_ids == free[: free.index(free[2]) + 1]
    with pytest.raises(ValueError, match="no tokens"):
        cache.complete(decoder, [], max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        cache.complete(decoder, ids, max_new_tokens=0)
    with pytest.raises(ValueError, match="not the model"):
        cache.complete(FakeDecoder(model_version="other"), ids, max_new_tokens=2)


def test_the_fake_decoder_notices_a_wrong_cache() -> None:
    """Negative control: the equality checks above could fail."""
    decoder = FakeDecoder()
    ids = prompt(2 * B + 3, seed=12)
    _, right = decoder.forward(ids[: 2 * B])
    _, wrong = decoder.forward(prompt(2 * B, seed=13))
    logits_right, _ = decoder.forward(ids[2 * B :], right)
    logits_wrong, _ = decoder.forward(ids[2 * B :], wrong)
    assert int(np.argmax(logits_right)) != int(np.argmax(logits_wrong))
