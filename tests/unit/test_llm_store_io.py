"""PrefixIo: the prefix store's writes and lookups on a thread of their own.

A gated in-memory store holds each write until the test lets it go, so the order in
which the thread serves its queue is visible.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator

from flinkai.llm.generate import decode_greedy
from flinkai.llm.prefix import PrefixCache
from flinkai.llm.scheduler import Request, Scheduler, SchedulerConfig
from flinkai.llm.store_io import PrefixIo
from flinkai.state import CodecConfig, InMemorySnapshotStore
from tests.unit.llm_fake import AttentionDecoder

B = 4  # tokens per block


class GatedStore(InMemorySnapshotStore):
    """Each put_many waits for ``gate``; the order of calls is kept."""

    def __init__(self) -> None:
        super().__init__(CodecConfig(codec="none"))
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[str] = []

    def put_many(self, items, *, model_version):  # type: ignore[no-untyped-def]
        self.calls.append("put")
        assert self.gate.wait(10)
        return super().put_many(items, model_version=model_version)

    def get_many(self, keys, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append("get")
        return super().get_many(keys, **kwargs)


def _cache(decoder: AttentionDecoder, ids: list[int]):  # type: ignore[no-untyped-def]
    return decoder.forward(ids)[1]


def _wait(cond, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


@contextlib.contextmanager
def gated_io(
    seed: int, threaded: bool = True
) -> Iterator[tuple[AttentionDecoder, GatedStore, PrefixIo]]:
    decoder = AttentionDecoder(seed)
    store = GatedStore()
    io = PrefixIo(PrefixCache.for_decoder(decoder, store, block_tokens=B), threaded=threaded)
    try:
        yield decoder, store, io
    finally:
        store.gate.set()
        io.close()


def test_a_lookup_waits_for_the_writes_of_its_blocks_and_passes_the_others() -> None:
    rng = random.Random(1)
    a, b, c = ([rng.randrange(97) for _ in range(3 * B)] for _ in range(3))
    with gated_io(1) as (decoder, store, io):
        store.gate.clear()
        io.write(a, _cache(decoder, a))  # in progress, held at the gate
        assert _wait(lambda: store.calls == ["put"])
        io.write(b, _cache(decoder, b))  # queued
        mine = io.lookup([*b, 1])  # reads b's blocks: after b's write
        other = io.lookup([*c, 1])  # reads none being written: ahead of b's write
        size = 2 * _cache(decoder, a).nbytes
        assert io.pending_bytes == size  # both writes held
        time.sleep(0.05)
        assert not mine.done() and not other.done()  # one thread, busy with a's write
        store.gate.set()
        assert mine.result(10).cached_tokens == 3 * B  # it found b's blocks
        assert other.result(10).cached_tokens == 0
        assert store.calls == ["put", "get", "put", "get"]
        io.drain()
        assert io.pending_bytes == 0


def test_a_clean_ahead_write_counts_only_once_its_kv_is_dropped() -> None:
    ids = list(range(10, 10 + 2 * B))
    with gated_io(2) as (decoder, store, io):
        cache = _cache(decoder, ids)
        store.gate.clear()
        w = io.write(ids, cache, held=False)
        assert w is not None and io.pending_bytes == 0  # the caller still counts the KV
        io.hold(w)
        assert io.pending_bytes == cache.nbytes  # dropped: the write holds it now
        io.hold(w)
        assert io.pending_bytes == cache.nbytes  # once
        store.gate.set()
        io.drain()
        assert io.pending_bytes == 0 and w.done
        io.hold(w)  # written already: nothing to count
        assert io.pending_bytes == 0
        # Nothing left to write (the blocks from 2 on do not exist): no queued write.
        assert io.write(ids, cache, first_block=2) is None


def test_inline_io_writes_and_reads_on_the_callers_thread() -> None:
    ids = list(range(20, 20 + 2 * B))
    with gated_io(3, threaded=False) as (decoder, store, io):
        assert io.write(ids, _cache(decoder, ids)) is None and store.calls == ["put"]
        found = io.lookup([*ids, 1])
        assert found.done() and found.result().cached_tokens == 2 * B


def test_sessions_offloaded_under_a_budget_were_written_ahead() -> None:
    """With the store's thread and a budget, a finished turn's session KV is written
    at once; offloading it under pressure later writes nothing more, and each next
    turn's tokens are those of greedy decoding."""
    decoder = AttentionDecoder(6)
    store = InMemorySnapshotStore(CodecConfig(codec="none"))
    prefix = PrefixCache.for_decoder(decoder, store, block_tokens=B)
    per_token = decoder.shape.kv_bytes_per_token
    rng = random.Random(6)
    first = {s: tuple(rng.randrange(6, 97) for _ in range(12)) for s in "abcd"}
    # Room for two sessions' turns at a time, not four sessions resident.
    config = SchedulerConfig(max_running=2, kv_budget_bytes=per_token * 90, store_thread=True)
    scheduler = Scheduler(decoder, config, prefix=prefix)
    try:
        for s, prompt in first.items():
            scheduler.submit(Request(f"{s}1", prompt, 8, frozenset(), session=s))
        while scheduler.pending:
            scheduler.step()
        done = {f.key: f.token_ids for f in scheduler.take()}
        assert scheduler._io is not None and scheduler._io.flush(10)
        # The first turns' blocks, prompt and reply (less its last, unfed token), are in
        # the store before any session is offloaded for the second turns.
        assert store.stats.puts == sum((len(first[s]) + 8 - 1) // B for s in "abcd")
        second = {s: (*first[s], *done[f"{s}1"], 1, 2, 3) for s in "abcd"}
        for s in "abcd":
            scheduler.submit(Request(f"{s}2", second[s], 8, frozenset(), session=s))
        while scheduler.pending:
            scheduler.step()
        got = {f.key: f.token_ids for f in scheduler.take()}
        assert scheduler._io.flush(10)
    finally:
        scheduler.close()
    assert scheduler.stats.session_offloads > 0, "the budget never pressed"
    assert prefix.stats.hits > 0  # offloaded sessions came back from the store
    for s in "abcd":
        assert got[f"{s}2"] == decode_greedy(decoder, second[s], 8, ()).token_ids
    # No block was written twice: an offload found its session's blocks written ahead.
    assert store.stats.puts == len(store._data) == prefix.stats.published_blocks
    assert scheduler.stats.peak_kv_bytes <= config.kv_budget_bytes
