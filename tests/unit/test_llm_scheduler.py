"""The scheduler on a small attention decoder: tokens equal single-sequence greedy, always.

Random arrival schedules, lengths, priorities, KV budgets (with preemption through an
in-memory store) and sessions; plus the scheduling rules themselves: joins and leaves
at any step, chunked prefill within the step budget, priority with aging, refusals.
tests/integration/test_llm_scheduler_real.py runs the identity on the real decoder.
"""

from __future__ import annotations

import dataclasses
import random
import time

import numpy as np
import pytest

from flinkai.llm.batch import KvBatch
from flinkai.llm.generate import decode_greedy
from flinkai.llm.prefix import PrefixCache
from flinkai.llm.scheduler import Request, Scheduler, SchedulerConfig, TokenDelta
from flinkai.state import CodecConfig, InMemorySnapshotStore
from tests.unit.llm_fake import AttentionDecoder

STOP = frozenset({5})


def _prompts(rng: random.Random, n: int, longest: int = 40) -> list[list[int]]:
    return [[rng.randrange(97) for _ in range(rng.randint(1, longest))] for _ in range(n)]


def _run(
    scheduler: Scheduler, requests: list[Request], rng: random.Random, p_arrive: float = 0.4
) -> dict[str, tuple[int, ...]]:
    """Submit ``requests`` at random steps; step until all finish."""
    i = 0
    for _ in range(100_000):
        if i == len(requests) and not scheduler.pending:
            break
        while i < len(requests) and rng.random() < p_arrive:
            scheduler.submit(requests[i])
            i += 1
        scheduler.step()
    else:
        raise AssertionError("the scheduler did not finish")
    out = {}
    for f in scheduler.take():
        assert f.error is None, f
        out[f.key] = f.token_ids
    return out


@pytest.mark.parametrize("overlap", [False, True], ids=["in-step", "overlapped"])
@pytest.mark.parametrize("seed", range(6))
def test_tokens_equal_single_sequence_greedy_for_any_schedule(seed: int, overlap: bool) -> None:
    """Random arrivals, lengths, budgets and priorities; prefill in the step or on its
    own thread beside the decode (``overlap_prefill``, the service's default)."""
    rng = random.Random(seed)
    decoder = AttentionDecoder(seed)
    prompts = _prompts(rng, 24)
    budgets = [rng.randint(1, 16) for _ in prompts]
    want = {
        str(k): decode_greedy(decoder, p, n, STOP).token_ids
        for k, (p, n) in enumerate(zip(prompts, budgets, strict=True))
    }
    config = SchedulerConfig(
        max_running=rng.choice([2, 4, 32]),
        step_tokens=rng.choice([8, 16, 64]),
        min_prefill_chunk=rng.choice([1, 4]),
        overlap_prefill=overlap,
        trace_steps=10_000,
    )
    scheduler = Scheduler(decoder, config)
    requests = [
        Request(str(k), tuple(p), n, STOP, priority=rng.randint(-2, 2))
        for k, (p, n) in enumerate(zip(prompts, budgets, strict=True))
    ]
    assert _run(scheduler, requests, rng) == want
    if overlap:
        # Decode steps ran while a prompt prefilled beside them. (When a prompt joins
        # depends on the threads' timing here, so the trace is not checked.)
        assert scheduler.stats.overlapped_steps > 0
        return
    assert scheduler.stats.overlapped_steps == 0
    # Sequences joined a batch that was already decoding, and left while others ran on.
    assert any(t.joined and set(t.running) - set(t.joined) for t in scheduler.trace)
    assert any(t.left and t.running for t in scheduler.trace)


@pytest.mark.parametrize("first_at", [0, 3], ids=["beside", "prefill-first"])
def test_under_a_backlog_the_decode_waits_for_the_prefill(first_at: int) -> None:
    """``prefill_first_at``: with that many prompts waiting for their prefill, a decode
    step waits for the prefill in flight, for about one decode step's time at a go (off,
    it never does); tokens are unchanged."""
    rng = random.Random(7)

    class SlowPrefill(AttentionDecoder):  # a prefill still in flight when the step checks
        def forward(self, ids, past=None):  # type: ignore[no-untyped-def]
            time.sleep(0.05)  # many decode steps long: one wait must not cover it
            return super().forward(ids, past)

    decoder = SlowPrefill(7)
    prompts = _prompts(rng, 10)
    want = {str(k): decode_greedy(AttentionDecoder(7), p, 8, STOP).token_ids
            for k, p in enumerate(prompts)}  # fmt: skip
    config = SchedulerConfig(overlap_prefill=True, prefill_first_at=first_at)
    scheduler = Scheduler(decoder, config)
    requests = [Request(str(k), tuple(p), 8, STOP) for k, p in enumerate(prompts)]
    assert _run(scheduler, requests, rng, p_arrive=1.0) == want  # all at once: a backlog
    if first_at:
        # Sliced: several waiting steps per prompt. Waiting out each prefill whole, a
        # step would collect one prompt per wait, at most one wait per prompt.
        assert scheduler.stats.prefill_first_steps > len(prompts)
    else:
        assert scheduler.stats.prefill_first_steps == 0
        assert scheduler.stats.overlapped_steps > 0


def test_a_wrong_padding_mask_is_caught() -> None:
    """The identity check can fail: a batch that attends to its padding gives other tokens."""
    rng = random.Random(0)
    decoder = AttentionDecoder(0)
    prompts = _prompts(rng, 12)
    want = {str(k): decode_greedy(decoder, p, 12, STOP).token_ids for k, p in enumerate(prompts)}

    class Unmasked(KvBatch):
        def step(self, decoder, tokens):  # type: ignore[no-untyped-def]
            self._mask = np.ones_like(self._mask)
            return super().step(decoder, tokens)

    scheduler = Scheduler(decoder, SchedulerConfig())
    scheduler._batch = Unmasked(decoder.shape)
    got = _run(scheduler, [Request(str(k), tuple(p), 12, STOP) for k, p in enumerate(prompts)], rng)
    assert got != want


def test_joins_and_leaves_touch_one_row_and_spare_padding_is_trimmed() -> None:
    """A leave moves the last row into the gap and a join writes only its own row; the
    batch is copied whole only to widen or to drop padding that no row needs."""
    decoder = AttentionDecoder(4)
    rng = random.Random(4)
    prompts = {f"r{i}": [rng.randrange(97) for _ in range(n)] for i, n in enumerate((40, 6, 7, 8))}
    caches = {k: decoder.forward(p)[1] for k, p in prompts.items()}
    batch = KvBatch(decoder.shape)
    batch.change([], [("r0", caches["r0"])])
    assert (batch.rebuilds, batch.width) == (1, 40)
    batch.change([], [(k, caches[k]) for k in ("r1", "r2", "r3")])
    assert batch.rebuilds == 1, "a join narrower than the batch copied the batch"
    batch.change(["r1"], [])
    assert batch.rebuilds == 1 and batch.keys == ["r0", "r3", "r2"]
    for k in batch.keys:  # every row still holds its own KV, unpadded
        got = batch.extract(k)
        assert np.array_equal(got.keys[0], caches[k].keys[0])
        assert np.array_equal(got.values[0], caches[k].values[0])
    batch.change(["r0"], [])  # 32 of 40 columns are now padding in every row
    assert (batch.rebuilds, batch.width) == (2, 8)
    assert np.array_equal(batch.extract("r2").keys[0], caches["r2"].keys[0])


def test_a_long_prompt_is_prefilled_in_chunks_within_the_step_budget() -> None:
    decoder = AttentionDecoder(1)
    scheduler = Scheduler(
        decoder, SchedulerConfig(step_tokens=12, min_prefill_chunk=4, trace_steps=1000)
    )
    rng = random.Random(1)
    short = [Request(f"s{i}", (3, 4, i + 6), 30, frozenset()) for i in range(4)]
    for r in short:
        scheduler.submit(r)
    for _ in range(3):
        scheduler.step()
    long_prompt = tuple(rng.randrange(97) for _ in range(100))
    scheduler.submit(Request("long", long_prompt, 4, frozenset()))
    while scheduler.pending:
        scheduler.step()
    steps = list(scheduler.trace)
    # Each step prefilled at most the budget less the rows already decoding (>= 4 tokens).
    for t in steps:
        assert t.prefill_tokens <= max(12 - (len(t.running) - len(t.joined)), 4)
    long_steps = [t for t in steps if t.prefill_tokens and len(t.running) == 4]
    assert len(long_steps) >= 100 // 8, "the long prompt was not spread over steps"
    got = {f.key: f.token_ids for f in scheduler.take()}
    assert got["long"] == decode_greedy(decoder, long_prompt, 4, ()).token_ids


def test_priority_orders_admission_and_aging_prevents_starvation() -> None:
    decoder = AttentionDecoder(2)
    now = [0.0]
    scheduler = Scheduler(
        decoder, SchedulerConfig(max_running=1, aging_s=5.0), clock=lambda: now[0]
    )
    scheduler.submit(Request("low", (1, 2, 3), 2, frozenset(), priority=0))
    now[0] = 1.0
    scheduler.submit(Request("high", (1, 2, 4), 2, frozenset(), priority=3))
    order = []
    while scheduler.pending:
        scheduler.step()
        order += [f.key for f in scheduler.take()]
    assert order == ["high", "low"]

    # A low priority that waited long enough goes before a fresh high one.
    scheduler = Scheduler(
        decoder, SchedulerConfig(max_running=1, aging_s=5.0), clock=lambda: now[0]
    )
    now[0] = 0.0
    scheduler.submit(Request("old-low", (1, 2, 3), 2, frozenset(), priority=0))
    now[0] = 20.0  # 4 levels of aging
    scheduler.submit(Request("new-high", (1, 2, 4), 2, frozenset(), priority=3))
    order = []
    while scheduler.pending:
        scheduler.step()
        order += [f.key for f in scheduler.take()]
    assert order == ["old-low", "new-high"]


@pytest.mark.parametrize("seed", range(4))
def test_kv_budget_preempts_to_the_store_and_output_is_unchanged(seed: int) -> None:
    rng = random.Random(100 + seed)
    decoder = AttentionDecoder(seed)
    prompts = _prompts(rng, 16, longest=30)
    want = {str(k): decode_greedy(decoder, p, 16, ()).token_ids for k, p in enumerate(prompts)}
    per_token = decoder.shape.kv_bytes_per_token
    budget = per_token * 4 * 48  # room for about four sequences of 48 tokens
    store = InMemorySnapshotStore(CodecConfig(codec="none"))
    prefix = PrefixCache.for_decoder(decoder, store, block_tokens=4)
    scheduler = Scheduler(decoder, SchedulerConfig(kv_budget_bytes=budget), prefix=prefix)
    requests = [
        Request(str(k), tuple(p), 16, frozenset(), priority=rng.randint(0, 3))
        for k, p in enumerate(prompts)
    ]
    assert _run(scheduler, requests, rng, p_arrive=0.8) == want
    assert scheduler.stats.preemptions > 0, "the budget never pressed: the test proves nothing"
    assert scheduler.stats.peak_kv_bytes <= budget
    assert prefix.stats.hits > 0  # resumed sequences restored their blocks


@pytest.mark.parametrize("threaded", [True, False], ids=["store-thread", "inline"])
def test_a_slow_store_runs_beside_the_decode_steps(threaded: bool) -> None:
    """``store_thread``: the writes of preempted sequences' KV and the lookups that
    resume them run on the store's thread, so decode steps go on during a slow store
    call (inline, none can); a lookup still sees every earlier write, so resumed
    sequences restore their blocks, and the tokens are unchanged."""
    rng = random.Random(11)
    decoder = AttentionDecoder(11)
    prompts = _prompts(rng, 16, longest=30)
    want = {str(k): decode_greedy(decoder, p, 16, ()).token_ids for k, p in enumerate(prompts)}
    steps_during: list[int] = []

    class SlowStore(InMemorySnapshotStore):  # a Kafka transaction's pace
        def put_many(self, items, *, model_version):  # type: ignore[no-untyped-def]
            before = scheduler.stats.steps
            time.sleep(0.03)
            steps_during.append(scheduler.stats.steps - before)
            return super().put_many(items, model_version=model_version)

        def get_many(self, keys, **kwargs):  # type: ignore[no-untyped-def]
            time.sleep(0.01)
            return super().get_many(keys, **kwargs)

    prefix = PrefixCache.for_decoder(decoder, SlowStore(CodecConfig(codec="none")), block_tokens=4)
    budget = decoder.shape.kv_bytes_per_token * 4 * 48
    config = SchedulerConfig(kv_budget_bytes=budget, store_thread=threaded)
    scheduler = Scheduler(decoder, config, prefix=prefix)
    requests = [Request(str(k), tuple(p), 16, frozenset()) for k, p in enumerate(prompts)]
    try:
        assert _run(scheduler, requests, rng, p_arrive=0.8) == want
    finally:
        scheduler.close()
    assert scheduler.stats.preemptions > 0, "the budget never pressed: nothing was written"
    assert prefix.stats.hits > 0  # resumed sequences found blocks written on the thread
    # KV still being written counts as held: the budget holds with the writes in flight.
    assert scheduler.stats.peak_kv_bytes <= budget
    if threaded:
        assert max(steps_during) > 0
    else:
        assert steps_during and max(steps_during) == 0


def test_preemption_without_a_store_recomputes_and_output_is_unchanged() -> None:
    rng = random.Random(7)
    decoder = AttentionDecoder(7)
    prompts = _prompts(rng, 10, longest=30)
    want = {str(k): decode_greedy(decoder, p, 16, ()).token_ids for k, p in enumerate(prompts)}
    budget = decoder.shape.kv_bytes_per_token * 3 * 48
    scheduler = Scheduler(decoder, SchedulerConfig(kv_budget_bytes=budget))
    requests = [Request(str(k), tuple(p), 16, frozenset()) for k, p in enumerate(prompts)]
    assert _run(scheduler, requests, rng, p_arrive=1.0) == want
    assert scheduler.stats.preemptions > 0


def test_a_prompt_that_can_never_fit_is_refused_at_once() -> None:
    decoder = AttentionDecoder(3)
    budget = decoder.shape.kv_bytes_per_token * 20
    scheduler = Scheduler(decoder, SchedulerConfig(kv_budget_bytes=budget))
    scheduler.submit(Request("big", tuple(range(1, 16)), 10, frozenset()))
    scheduler.submit(Request("ok", (1, 2, 3), 4, frozenset()))
    while scheduler.pending:
        scheduler.step()
    got = {f.key: f for f in scheduler.take()}
    assert got["big"].finish_reason == "error"
    assert got["big"].error is not None and got["big"].error.startswith("kv_budget_exceeded:")
    assert got["ok"].error is None and len(got["ok"].token_ids) == 4


def test_requests_beyond_max_waiting_are_refused_not_dropped() -> None:
    decoder = AttentionDecoder(3)
    scheduler = Scheduler(decoder, SchedulerConfig(max_waiting=2))
    for k in range(4):
        scheduler.submit(Request(str(k), (1, 2, 3), 2, frozenset()))
    refused = scheduler.take()
    assert sorted(f.key for f in refused) == ["2", "3"]
    assert all(f.error and f.error.startswith("queue_full:") for f in refused)
    while scheduler.pending:
        scheduler.step()
    assert sorted(f.key for f in scheduler.take()) == ["0", "1"]


def test_a_session_turn_resumes_from_the_previous_turn_kv() -> None:
    decoder = AttentionDecoder(4)
    scheduler = Scheduler(decoder, SchedulerConfig())
    first = (1, 2, 3, 4, 6, 7)
    scheduler.submit(Request("t1", first, 6, frozenset(), session="s"))
    while scheduler.pending:
        scheduler.step()
    (t1,) = scheduler.take()
    second = (*first, *t1.token_ids, 8, 9, 10)
    scheduler.submit(Request("t2", second, 6, frozenset(), session="s"))
    while scheduler.pending:
        scheduler.step()
    (t2,) = scheduler.take()
    assert t2.token_ids == decode_greedy(decoder, second, 6, ()).token_ids
    # The first turn's prompt and completion (less its last, unfed token) were resident.
    assert t2.cached_tokens == len(first) + len(t1.token_ids) - 1


def test_sessions_are_offloaded_only_as_needed_furthest_next_use_first() -> None:
    """Under the budget, only as many resident sessions go to the store as the admission
    needs: first one with no turn waiting (Belady's rule), and only the blocks the store
    lacks; every turn's tokens stay those of greedy decoding."""
    decoder = AttentionDecoder(6)
    store = InMemorySnapshotStore(CodecConfig(codec="none"))
    prefix = PrefixCache.for_decoder(decoder, store, block_tokens=4)
    scheduler = Scheduler(decoder, SchedulerConfig(max_running=1), prefix=prefix)
    rng = random.Random(6)
    first = {s: tuple(rng.randrange(6, 97) for _ in range(12)) for s in "abc"}
    for s, prompt in first.items():
        scheduler.submit(Request(f"{s}1", prompt, 8, frozenset(), session=s))
    while scheduler.pending:
        scheduler.step()
    done = {f.key: f.token_ids for f in scheduler.take()}
    assert set(scheduler._sessions) == {"a", "b", "c"}  # all three resident
    published = prefix.stats.published_blocks
    second = {s: (*first[s], *done[f"{s}1"], 1, 2, 3) for s in "ba"}
    per_token = decoder.shape.kv_bytes_per_token
    session_tokens = 12 + 8 - 1
    # Room for b's turn beside one resident session, not two.
    budget = per_token * (len(second["b"]) + 1 + session_tokens + 4)
    scheduler.config = dataclasses.replace(scheduler.config, kv_budget_bytes=budget)
    scheduler.submit(Request("b2", second["b"], 8, frozenset(), session="b"))
    scheduler.submit(Request("a2", second["a"], 8, frozenset(), session="a"))
    scheduler.step()
    # c (no turn waiting) went to the store, though a was used longer ago: a's turn waits.
    # b's KV became b2's.
    assert scheduler.stats.session_offloads == 1
    assert set(scheduler._sessions) == {"a"}
    # c's prompt blocks were in the store since its prefill: only the rest were written;
    # b2's prefill wrote its blocks from the first one the store lacked (b1's reply on).
    c_blocks, stored = session_tokens // 4, len(first["c"]) // 4
    written = (c_blocks - stored) + (len(second["b"]) // 4 - stored)
    assert prefix.stats.published_blocks - published == written
    assert prefix.lookup((*first["c"], *done["c1"])).cached_tokens == c_blocks * 4
    while scheduler.pending:
        scheduler.step()
    got = {f.key: f.token_ids for f in scheduler.take()}
    for s in "ba":
        assert got[f"{s}2"] == decode_greedy(decoder, second[s], 8, ()).token_ids


def test_a_result_is_taken_only_after_its_last_delta_went_out() -> None:
    """A caller that takes a result may drop that request's delta state at once (the
    service does); so every finished delta must reach ``on_delta`` first."""
    decoder = AttentionDecoder(9)
    early: list[str] = []
    scheduler: Scheduler

    def on_delta(deltas: list[TokenDelta]) -> None:
        for d in deltas:
            if d.finished and scheduler.take([d.key]):
                early.append(d.key)

    scheduler = Scheduler(decoder, SchedulerConfig(), on_delta=on_delta)
    rng = random.Random(9)
    for k, p in enumerate(_prompts(rng, 12)):
        scheduler.submit(Request(str(k), tuple(p), rng.randint(1, 6), STOP))
    taken: set[str] = set()
    while scheduler.pending:
        scheduler.step()
        taken |= {f.key for f in scheduler.take()}
    assert not early, f"results taken before their last delta: {early}"
    assert taken == {str(k) for k in range(12)}


def test_a_failing_step_fails_its_requests_instead_of_the_thread() -> None:
    decoder = AttentionDecoder(5)

    def broken(*_args: object) -> object:
        raise RuntimeError("device lost")

    decoder.forward_batch = broken  # type: ignore[method-assign]
    scheduler = Scheduler(decoder, SchedulerConfig())
    scheduler.start()
    try:
        scheduler.submit(Request("a", (1, 2, 3), 5, frozenset()))
        for _ in range(200):
            got = scheduler.take()
            if got:
                break
            import time

            time.sleep(0.01)
        assert got and got[0].error is not None and "device lost" in got[0].error
        # The thread is still alive and serves the next request (one token: no batched step).
        scheduler.submit(Request("b", (1, 2, 3), 1, frozenset()))
        for _ in range(200):
            got = scheduler.take()
            if got:
                break
            time.sleep(0.01)
        assert got and got[0].error is None
    finally:
        scheduler.close()


def test_first_divergence_names_the_token_and_greedy_margin() -> None:
    from flinkai.llm.compare import NEAR_TIE, first_divergence, greedy_with_margins

    decoder = AttentionDecoder(6)
    prompt = [1, 2, 3, 4, 7, 9]
    want = decode_greedy(decoder, prompt, 10, ()).token_ids
    tokens, smallest = greedy_with_margins(decoder, prompt, 10, ())
    assert tokens == want and smallest > 0
    assert first_divergence(decoder, prompt, want, want) is None
    other = (want[3] + 1) % 97
    got = (*want[:3], other, *want[4:])
    d = first_divergence(decoder, prompt, want, got)
    assert d is not None and (d.position, d.want, d.got) == (3, want[3], other)
    assert d.margin > NEAR_TIE and not d.near_tie  # greedy clearly preferred its own token
