"""CompletionService: what the LLM operator does with each record, without PyFlink.

Accepting (dead letters with reasons, state limits), completing through the scheduler
thread, session turns in order, and resuming what state held after a restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from flinkai import metrics
from flinkai.config import Config
from flinkai.functions.llm_service import CompletionService, Outcome, Pending
from flinkai.kafka.deltas import DeltaAssembler
from flinkai.llm.generate import decode_greedy
from tests.unit.llm_fake import AttentionDecoder

STOP = 5


class FakeModel:
    """Characters as token ids; a later turn starts with 11."""

    def __init__(self, seed: int = 0) -> None:
        self.decoder = AttentionDecoder(seed)
        self.stop_ids = (STOP,)

    def prompt_ids(self, prompt: str) -> list[int]:
        return [1, *(6 + ord(c) % 90 for c in prompt)]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(i) for i in ids)

    def turn_ids(self, prompt: str, *, ended: bool) -> list[int]:
        return [11 if ended else 12, *self.prompt_ids(prompt)[1:]]


def config(**llm: object) -> Config:
    return Config().with_overrides(llm={"max_new_tokens": 6, "store": "none", **llm})


def record(pid: str, prompt: str, **fields: object) -> bytes:
    return json.dumps({"id": pid, "prompt": prompt, **fields}).encode()


def wait_for(service: CompletionService, n: int, timeout_s: float = 10.0) -> list[Outcome]:
    got: list[Outcome] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += service.finished()
        time.sleep(0.005)
    assert len(got) == n, f"{len(got)} of {n} finished"
    return got


def test_bad_records_come_back_as_dead_letter_rows_with_reasons() -> None:
    service = CompletionService(config(), FakeModel())
    cases = {
        b"{not json": "not_json",
        record("a", "hi", priority=1000): "invalid_field",
        record("a", "hi", priority="high"): "invalid_field",
        record("a", "hi", session=""): "invalid_field",
        record("a", "hi", max_new_tokens=0): "invalid_field",
        record("a", "hi", adapter="support-v2"): "unknown_adapter",
    }
    for offset, (payload, reason) in enumerate(cases.items()):
        row = service.accept(payload, 0, offset)
        assert isinstance(row, tuple), payload
        assert row[10] == reason, (payload, row)
        assert row[11] and row[12] is not None and row[14] == offset


def test_prompts_complete_with_greedy_tokens_in_any_order() -> None:
    model = FakeModel()
    service = CompletionService(config(), model)
    service.start()
    try:
        prompts = {f"p{i}": "x" * (i + 1) + "question" for i in range(8)}
        for offset, (pid, text) in enumerate(prompts.items()):
            pending = service.accept(record(pid, text, priority=offset % 3), 0, offset)
            assert isinstance(pending, Pending)
            assert service.hold(pending) is None
        assert service.held == 8
        rows = {o.row[0]: o.row for o in wait_for(service, 8)}
    finally:
        service.close()
    for pid, text in prompts.items():
        want = decode_greedy(model.decoder, model.prompt_ids(text), 6, [STOP]).token_ids
        assert rows[pid][1] == model.decode(want)
        assert rows[pid][10] is None  # not a dead letter
    assert service.held == 0 and service.held_bytes == 0


def test_gauges_name_every_exported_metric_and_count_the_work() -> None:
    model = FakeModel()
    service = CompletionService(config(kv_budget_bytes=10**6), model)
    assert set(service.gauges()) == {spec.name for spec in metrics.LLM_GAUGES}
    service.start()
    try:
        for offset in range(3):
            pending = service.accept(record(f"p{offset}", "abc" * (offset + 1)), 0, offset)
            assert isinstance(pending, Pending)
            service.hold(pending)
        assert service.gauges()["llm_held_prompts"] == 3
        rows = [o.row for o in wait_for(service, 3)]
    finally:
        service.close()
    g = service.gauges()
    generated = sum(len(r[1].split()) for r in rows)  # FakeModel decodes one word per id
    assert generated > 0 and g["llm_generated_tokens"] == generated
    assert g["llm_kv_budget_bytes"] == 10**6 and g["llm_held_prompts"] == 0
    assert g["llm_ttft_ms_p50"] > 0 and g["llm_e2e_ms_p99"] >= g["llm_ttft_ms_p50"]


def test_state_limits_dead_letter_as_queue_full() -> None:
    service = CompletionService(config(max_waiting=2), FakeModel())
    for offset in range(2):
        pending = service.accept(record(f"p{offset}", "hello"), 0, offset)
        assert isinstance(pending, Pending)
        service.hold(pending)
    row = service.accept(record("p2", "hello"), 0, 2)
    assert isinstance(row, tuple) and row[10] == "queue_full"
    assert service.queue_full == 1


def test_a_prompt_over_the_kv_budget_is_dead_lettered_at_once() -> None:
    model = FakeModel()
    budget = model.decoder.shape.kv_bytes_per_token * 10
    service = CompletionService(config(kv_budget_bytes=budget), model)
    pending = service.accept(record("big", "a long prompt here"), 0, 0)
    assert isinstance(pending, Pending)
    row = service.hold(pending)
    assert row is not None and row[10] == "kv_budget_exceeded"
    assert service.held == 0


def test_session_turns_run_in_order_on_the_conversation_so_far() -> None:
    model = FakeModel()
    service = CompletionService(config(), model)
    service.start()
    try:
        turns = ["hello there", "and then?", "why?"]
        for offset, text in enumerate(turns):
            pending = service.accept(record(f"t{offset}", text, session="s1"), 0, offset)
            assert isinstance(pending, Pending)
            assert service.hold(pending) is None
        outcomes = wait_for(service, 3)
    finally:
        service.close()
    assert [o.row[0] for o in outcomes] == ["t0", "t1", "t2"]
    history = model.prompt_ids(turns[0])
    for o, text in zip(outcomes, turns, strict=True):
        if o is not outcomes[0]:
            history = [*history, *model.turn_ids(text, ended=history[-1] == STOP)]
        want = decode_greedy(model.decoder, history, 6, [STOP]).token_ids
        assert o.row[1] == model.decode(want)
        history = [*history, *want]
        assert o.history == tuple(history)


def test_resume_after_a_restart_completes_what_state_held_identically() -> None:
    model = FakeModel()
    first = CompletionService(config(), model)
    held = []
    for offset in range(4):
        pending = first.accept(record(f"p{offset}", f"prompt {offset}"), 0, offset)
        assert isinstance(pending, Pending)
        first.hold(pending)
        held.append(Pending.from_state(pending.to_state()))  # what keyed state keeps
    first.close()  # the worker dies before anything finished

    again = CompletionService(config(), model)
    again.start()
    try:
        assert again.resume(held, {}) == []
        rows = {o.row[0]: o.row[1] for o in wait_for(again, 4)}
    finally:
        again.close()
    for offset in range(4):
        ids = model.prompt_ids(f"prompt {offset}")
        want = decode_greedy(model.decoder, ids, 6, [STOP]).token_ids
        assert rows[f"p{offset}"] == model.decode(want)


def test_token_deltas_assemble_to_the_completion_despite_duplicates() -> None:
    model = FakeModel()
    sent: list[dict[str, object]] = []
    service = CompletionService(config(), model, on_deltas=sent.extend)
    service.start()
    try:
        pending = service.accept(record("d", "stream me"), 0, 0)
        assert isinstance(pending, Pending)
        service.hold(pending)
        (outcome,) = wait_for(service, 1)
    finally:
        service.close()
    assembler = DeltaAssembler()
    for r in [*sent, *sent[:3]]:  # a replay sends the first deltas again
        assembler.add(r)
    done = assembler.completions["d"]
    assert done.finished and done.duplicates == 3
    assert model.decode(done.token_ids) == outcome.row[1]
    assert [r["seq"] for r in sent] == list(range(len(sent)))


def test_the_assembler_refuses_malformed_deltas_and_waits_for_gaps() -> None:
    assembler = DeltaAssembler()
    for bad in ({"seq": 0}, {"id": "x", "seq": -1}, {"id": "x", "seq": True}):
        try:
            assembler.add(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    assembler.add({"id": "x", "seq": 1, "delta_text": "b", "finished": True})
    assert not assembler.completions["x"].finished  # seq 0 has not arrived
    assembler.add({"id": "x", "seq": 0, "delta_text": "a", "finished": False})
    assert assembler.completions["x"].finished and assembler.completions["x"].text == "ab"
