"""Serving LoRA adapters on a real exported decoder (the tiny random model, rank 4).

- With no adapter, the LoRA graph gives the plain graph's logits bit for bit: the
  plain export is the base, and the LoRA export with zero matrices equals it.
- A batch mixing adapters (and the base model) gives every row the tokens it gets
  decoding alone with its adapter.
- A version published mid-flight reaches the requests admitted after it; a running
  sequence keeps the version it started with; each result names its version.
"""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.llm.adapters import AdapterSet
from flinkai.llm.decoder import OnnxDecoder
from flinkai.llm.generate import decode_greedy
from flinkai.llm.lora import Adapter
from flinkai.llm.prefix import PrefixCache
from flinkai.llm.scheduler import Request, Scheduler, SchedulerConfig
from flinkai.state import CodecConfig, InMemorySnapshotStore

pytestmark = [pytest.mark.integration]

RANK = 4
NEW = 10


@pytest.fixture(scope="module")
def decoders() -> tuple[OnnxDecoder, OnnxDecoder]:
    from flinkai.models.llm_export import export_tiny_llm

    return OnnxDecoder(export_tiny_llm()), OnnxDecoder(export_tiny_llm(lora_rank=RANK))


def make_adapter(decoder: OnnxDecoder, name: str, version: int, seed: int) -> Adapter:
    assert decoder.lora is not None
    rng = np.random.default_rng(seed)
    params = {
        n: (0.3 * rng.standard_normal(decoder.lora.shape_of(n))).astype(np.float32)
        for n in decoder.lora.names()
    }
    return Adapter(name, version, decoder.model_version, RANK, params)


def test_the_lora_graph_without_an_adapter_is_the_plain_graph(
    decoders: tuple[OnnxDecoder, OnnxDecoder],
) -> None:
    plain, lora = decoders
    assert plain.lora is None and lora.lora is not None and lora.lora.rank == RANK
    ids = list(range(300, 340))
    want, want_cache = plain.forward(ids)
    got, got_cache = lora.forward(ids)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_cache.keys[0], want_cache.keys[0])
    adapted, _ = lora.forward(ids, lora=make_adapter(lora, "a", 1, 0))
    assert np.abs(adapted - want).max() > 1e-2  # the adapter does change the output


def test_a_batch_mixing_adapters_equals_each_row_alone(
    decoders: tuple[OnnxDecoder, OnnxDecoder],
) -> None:
    _, decoder = decoders
    assert decoder.lora is not None
    adapters = AdapterSet(decoder.lora, decoder.model_version)
    made = {n: make_adapter(decoder, n, 1, seed) for seed, n in enumerate(("a", "b", "c"))}
    for a in made.values():
        adapters.publish(a.encode())
    rng = np.random.default_rng(7)
    stops = frozenset(decoder.manifest.eos_token_ids)
    prefix = PrefixCache.for_decoder(
        decoder, InMemorySnapshotStore(CodecConfig(codec="none")), block_tokens=8
    )
    scheduler = Scheduler(
        decoder,  # type: ignore[arg-type]
        SchedulerConfig(max_running=6, step_tokens=24, min_prefill_chunk=8),
        prefix=prefix,
        adapters=adapters,
    )
    shared = [int(i) for i in rng.integers(10, 4000, 16)]  # a prefix every prompt shares
    requests = []
    for i in range(12):
        name = [None, "a", "b", "c"][i % 4]
        ids = (*shared, *(int(t) for t in rng.integers(10, 4000, int(rng.integers(3, 30)))))
        requests.append(Request(f"r{i}", ids, NEW, stops, adapter=name))
    want = {
        r.key: decode_greedy(
            decoder.with_adapter(None if r.adapter is None else made[r.adapter]),
            r.prompt_ids,
            NEW,
            stops,
        ).token_ids
        for r in requests
    }
    for r in requests[:6]:
        scheduler.submit(r)
    steps = 0
    while scheduler.pending and steps < 500:
        scheduler.step()
        steps += 1
        if steps == 3:
            for r in requests[6:]:
                scheduler.submit(r)
    done = {f.key: f for f in scheduler.take()}
    assert len(done) == 12 and all(f.error is None for f in done.values()), done
    for r in requests:
        assert done[r.key].token_ids == want[r.key], r.key
        assert done[r.key].adapter == (None if r.adapter is None else f"{r.adapter}@1")
    # the shared prefix was stored under four namespaces and reused within each
    assert prefix.stats.hits >= 4
    assert set(scheduler.stats.adapter_first_use) == {"a@1", "b@1", "c@1"}


def test_a_running_sequence_keeps_its_version_and_later_ones_get_the_new(
    decoders: tuple[OnnxDecoder, OnnxDecoder],
) -> None:
    _, decoder = decoders
    assert decoder.lora is not None
    adapters = AdapterSet(decoder.lora, decoder.model_version)
    v1, v2 = make_adapter(decoder, "t", 1, 1), make_adapter(decoder, "t", 2, 2)
    adapters.publish(v1)
    stops: frozenset[int] = frozenset()  # run to the length limit
    scheduler = Scheduler(decoder, SchedulerConfig(max_running=4), adapters=adapters)  # type: ignore[arg-type]
    prompt = tuple(range(500, 520))
    scheduler.submit(Request("early", prompt, 2 * NEW, stops, adapter="t"))
    scheduler.submit(Request("missing", prompt, NEW, stops, adapter="nope"))
    scheduler.submit(Request("bad", prompt, NEW, stops, adapter="bad name!"))
    for _ in range(3):
        scheduler.step()
    adapters.publish(v2)  # hot-plug while "early" runs
    scheduler.submit(Request("late", prompt, NEW, stops, adapter="t"))
    while scheduler.pending:
        scheduler.step()
    done = {f.key: f for f in scheduler.take()}
    assert done["early"].adapter == "t@1" and done["late"].adapter == "t@2"
    assert (
        done["early"].token_ids
        == decode_greedy(decoder.with_adapter(v1), prompt, 2 * NEW, stops).token_ids
    )
    assert (
        done["late"].token_ids
        == decode_greedy(decoder.with_adapter(v2), prompt, NEW, stops).token_ids
    )
    assert done["early"].token_ids[:NEW] != done["late"].token_ids
    assert done["missing"].error is not None and done["missing"].error.startswith("unknown_adapter")
    assert done["bad"].error is not None and done["bad"].error.startswith("invalid_name")
    assert scheduler.stats.adapter_first_use["t@2"] >= scheduler.stats.adapter_first_use["t@1"]


def test_a_prompt_still_in_prefill_moves_to_the_new_version(
    decoders: tuple[OnnxDecoder, OnnxDecoder],
) -> None:
    _, decoder = decoders
    assert decoder.lora is not None
    adapters = AdapterSet(decoder.lora, decoder.model_version)
    v1, v2 = make_adapter(decoder, "t", 1, 1), make_adapter(decoder, "t", 2, 2)
    adapters.publish(v1)
    config = SchedulerConfig(max_running=4, step_tokens=8, min_prefill_chunk=8)
    scheduler = Scheduler(decoder, config, adapters=adapters)  # type: ignore[arg-type]
    prompt = tuple(range(600, 640))  # 5 chunks of 8
    scheduler.submit(Request("slow", prompt, NEW, frozenset(), adapter="t"))
    scheduler.step()
    scheduler.step()
    assert scheduler.stats.adapter_starts[-1][0] == "t@1"
    adapters.publish(v2)
    while scheduler.pending:
        scheduler.step()
    (done,) = scheduler.take()
    assert scheduler.stats.adapter_repins == 1
    assert done.adapter == "t@2"
    assert (
        done.token_ids
        == decode_greedy(decoder.with_adapter(v2), prompt, NEW, frozenset()).token_ids
    )
    assert [t for t, _ in scheduler.stats.adapter_starts] == ["t@1", "t@2"]
