"""The scheduler on the real SmolLM2 decoder: every sequence equals single-sequence greedy.

AG News texts of varied lengths, random arrival schedules with fixed seeds, a small
step budget (so long prompts are prefilled in chunks) and a KV budget tight enough to
preempt. A token that differs is reported with its logit margin
(:func:`flinkai.llm.compare.first_divergence`); only a near-tie (margin below 1e-4)
may differ.
"""

from __future__ import annotations

import random

import pytest

from flinkai.config import load_config
from flinkai.datasets import load_ag_news
from flinkai.functions.llm import load_prompt_model
from flinkai.llm.compare import first_divergence
from flinkai.llm.generate import decode_greedy
from flinkai.llm.prefix import PrefixCache
from flinkai.llm.scheduler import Request, Scheduler, SchedulerConfig
from flinkai.state import CodecConfig, InMemorySnapshotStore

from .llm import require_decoder

pytestmark = [pytest.mark.integration]

NEW_TOKENS = 12


# Seed 1 prefills on the thread beside the decode (overlap_prefill, the service's default).
@pytest.mark.parametrize(("seed", "overlap"), [(0, False), (1, True)])
def test_any_schedule_equals_single_sequence_greedy_on_the_real_decoder(
    seed: int, overlap: bool
) -> None:
    require_decoder()
    model = load_prompt_model(load_config(env={}))
    decoder = model.decoder
    rng = random.Random(seed)
    news = [text for _, text in load_ag_news(limit=200)]
    texts = [rng.choice(news)[: rng.choice([40, 120, 400])] for _ in range(8)]
    prompts = {f"q{i}": tuple(model.prompt_ids(t)) for i, t in enumerate(texts)}
    want = {
        k: decode_greedy(decoder, ids, NEW_TOKENS, model.stop_ids).token_ids
        for k, ids in prompts.items()
    }
    longest = max(len(ids) for ids in prompts.values())
    budget = decoder.shape.kv_bytes_per_token * (longest + NEW_TOKENS) * 3
    prefix = PrefixCache.for_decoder(
        decoder, InMemorySnapshotStore(CodecConfig(codec="none")), block_tokens=16
    )
    scheduler = Scheduler(
        decoder,
        SchedulerConfig(
            step_tokens=24, min_prefill_chunk=8, kv_budget_bytes=budget, overlap_prefill=overlap
        ),
        prefix=prefix,
    )
    order = list(prompts)
    rng.shuffle(order)
    while order or scheduler.pending:
        if order and rng.random() < 0.5:
            key = order.pop()
            scheduler.submit(Request(key, prompts[key], NEW_TOKENS, frozenset(model.stop_ids),
                                     priority=rng.randint(0, 2)))  # fmt: skip
        scheduler.step()
    got = {f.key: f.token_ids for f in scheduler.take()}
    assert set(got) == set(want)
    flips = [
        (k, first_divergence(decoder, prompts[k], want[k], got[k]))
        for k in want
        if got[k] != want[k]
    ]
    for key, d in flips:
        print(f"{key}: near-tie flip at token {d.position}, margin {d.margin:.2e}")  # type: ignore[union-attr]
    assert all(d is not None and d.near_tie for _, d in flips), flips
    print(
        f"{len(want) - len(flips)} of {len(want)} identical; {scheduler.stats.preemptions} preemptions"
    )
