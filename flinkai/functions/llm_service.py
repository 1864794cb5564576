"""The scheduled ``llm_complete``, without PyFlink: prompts in, completion rows out, any order.

The stream operator (:mod:`flinkai.operators.llm`) keeps every accepted prompt in
keyed state as a :class:`Pending` (plain data) until its completion is emitted, and
hands it to a :class:`CompletionService`. The service renders it, checks it, and
submits it to the worker's :class:`~flinkai.llm.scheduler.Scheduler`, which decodes it
with every other prompt in flight, outside any bundle. The operator collects what
finished with :meth:`CompletionService.finished` from its timers.

A prompt is never lost: what is in state when a job restores is submitted again
(:meth:`CompletionService.resume`). Greedy decoding is deterministic, so a completion
whose Kafka transaction was aborted comes out the same the second time.

Sessions: prompts with the same ``session`` are turns of one conversation. A turn is
submitted when the previous one has finished; its prompt is the conversation's token
ids so far (every earlier prompt and completion, which the operator keeps in keyed
state) followed by the new user message, so the scheduler resumes from the previous
turn's KV (resident, or restored from the snapshot store).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from flinkai import metrics
from flinkai.config import Config
from flinkai.functions.events import Reason, payload_base64
from flinkai.functions.llm import LlmReason, Prompt, PromptModel, Rejected, parse_prompt
from flinkai.llm.adapters import AdapterSet
from flinkai.llm.prefix import PrefixCache
from flinkai.llm.scheduler import (
    Finished,
    Request,
    Scheduler,
    SchedulerConfig,
    SchedulerDecoder,
    TokenDelta,
)
from flinkai.state import SnapshotStore

__all__ = [
    "OUTPUT_FIELDS",
    "CompletionService",
    "Outcome",
    "Pending",
    "TurnModel",
    "delta_record",
]

log = logging.getLogger(__name__)

#: Columns of the operator's output rows: a completion, or a dead letter.
OUTPUT_FIELDS = (
    "id", "completion", "model_version", "prompt_tokens", "cached_tokens", "ttft_ms",
    "queue_ms", "e2e_ms", "finish_reason", "session",
    "error_reason", "error_detail", "payload_base64", "source_partition", "source_offset",
    "meta", "adapter",
)  # fmt: skip


class TurnModel(PromptModel, Protocol):
    """A :class:`PromptModel` that can also render a later turn of a conversation."""

    def turn_ids(self, prompt: str, *, ended: bool) -> list[int]: ...


@dataclass(frozen=True)
class Pending:
    """One accepted prompt, as keyed state holds it until its completion is emitted.

    Attributes:
        entry: Unique per source record (``partition:offset``): the state's map key.
        id, prompt, priority, session, max_new_tokens: From the event.
        partition, offset: Where it came from.
        arrived_ms: Wall-clock arrival; orders a session's turns after a restore.
        meta: The event's ``meta`` (JSON text), passed through to the output.
        adapter: The LoRA adapter the event asked for (None: the base model).
    """

    entry: str
    id: str
    prompt: str
    priority: int
    session: str | None
    max_new_tokens: int
    partition: int | None
    offset: int | None
    arrived_ms: int
    meta: str | None = None
    adapter: str | None = None

    def to_state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> Pending:
        return cls(**data)

    @property
    def nbytes(self) -> int:
        """What the prompt costs in state (its text; the rest is small)."""
        meta = len(self.meta.encode("utf-8", "surrogatepass")) if self.meta else 0
        return len(self.prompt.encode("utf-8", "surrogatepass")) + meta + 64


@dataclass(frozen=True)
class Outcome:
    """A finished prompt: its output row, and the conversation after it (sessions)."""

    pending: Pending
    row: tuple[Any, ...]
    history: tuple[int, ...] | None


def _dead(
    reason: str,
    detail: str,
    carried: tuple[Any, ...],
    pid: str | None = None,
    meta: str | None = None,
) -> tuple[Any, ...]:
    return (pid, *([None] * 8), None, reason, detail, *carried, meta, None)


def delta_record(pid: str, delta: TokenDelta, text: str) -> dict[str, Any]:
    """A token-delta record as the deltas topic carries it (keyed by ``id``)."""
    return {
        "id": pid,
        "seq": delta.seq,
        "delta_text": text,
        "token_ids": list(delta.token_ids),
        "finished": delta.finished,
        "finish_reason": delta.finish_reason,
    }


class CompletionService:
    """Accepts prompts, schedules them, and turns finished ones into output rows.

    Args:
        config: The ``llm`` section is used.
        model: Decoder (batched), tokenizer and stop ids.
        store: The prefix/offload store (``None``: no reuse, preemption recomputes).
        on_deltas: Called from the scheduler thread with token-delta records.
        clock: Wall-clock milliseconds (arrival stamps).
        adapters: The LoRA adapters events may name (hot-plugged by a feed); None:
            an event naming one is dead-lettered (``unknown_adapter``).
    """

    def __init__(
        self,
        config: Config,
        model: TurnModel,
        store: SnapshotStore | None = None,
        *,
        on_deltas: Callable[[list[dict[str, Any]]], None] | None = None,
        clock: Callable[[], float] = time.time,
        adapters: AdapterSet | None = None,
    ) -> None:
        llm = config.llm
        self.config = config
        self.model = model
        self.store = store
        decoder: SchedulerDecoder = model.decoder  # type: ignore[assignment]
        prefix = PrefixCache.for_decoder(
            decoder, store, block_tokens=llm.block_tokens, publish=llm.publish
        ) if store is not None else None  # fmt: skip
        self.scheduler = Scheduler(
            decoder,
            SchedulerConfig(
                max_running=llm.max_running,
                step_tokens=llm.step_tokens,
                overlap_prefill=llm.overlap_prefill,
                prefill_first_at=llm.prefill_first_at,
                kv_budget_bytes=llm.kv_budget_bytes,
                store_thread=llm.store_thread,
                aging_s=llm.priority_aging_s,
                max_waiting=llm.max_waiting,
            ),
            prefix=prefix,
            on_delta=self._deltas if on_deltas is not None else None,
            adapters=adapters,
        )
        self._on_deltas = on_deltas
        self._clock = clock
        self._stops = frozenset(int(i) for i in model.stop_ids)
        self._held: dict[str, Pending] = {}
        self._held_bytes = 0
        self._submitted: dict[str, tuple[int, ...]] = {}
        self._histories: dict[str, tuple[int, ...]] = {}
        self._turns: dict[str, deque[Pending]] = {}
        self._busy_sessions: set[str] = set()
        self._delta_tokens: dict[str, list[int]] = {}
        self.queue_full = 0

    @property
    def model_version(self) -> str:
        return self.model.decoder.model_version

    @property
    def held(self) -> int:
        """Prompts accepted and not yet finished (what keyed state holds)."""
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def gauges(self) -> dict[str, float]:
        """Every metric the LLM operator exports, by name, as of now.

        The keys are the names of :data:`flinkai.metrics.LLM_GAUGES`, which the
        operator registers; one table here keeps the two from drifting apart.
        """
        s = self.scheduler.stats
        values: dict[str, float] = {
            metrics.LLM_RUNNING.name: s.running,
            metrics.LLM_WAITING.name: s.waiting,
            metrics.LLM_HELD_PROMPTS.name: self.held,
            metrics.LLM_HELD_BYTES.name: self._held_bytes,
            metrics.LLM_KV_BYTES.name: s.kv_bytes,
            metrics.LLM_KV_BUDGET_BYTES.name: self.scheduler.config.kv_budget_bytes,
            metrics.LLM_PREEMPTIONS.name: s.preemptions,
            metrics.LLM_GENERATED_TOKENS.name: s.generated_tokens,
            metrics.LLM_QUEUE_FULL.name: self.queue_full,
            metrics.LLM_SESSION_OFFLOADS.name: s.session_offloads,
            metrics.LLM_STORE_WAIT_MS.name: s.store_wait_ms,
            metrics.LLM_PREFILL_FIRST_STEPS.name: s.prefill_first_steps,
        }
        windows = {"ttft": s.ttft_ms, "tpot": s.tpot_ms, "itl": s.itl_ms,
                   "e2e": s.e2e_ms, "queue": s.queue_ms}  # fmt: skip
        for spec in metrics.LLM_LATENCIES:  # llm_<what>_ms_p<q>
            what, q = spec.name.removeprefix("llm_").split("_ms_p")
            values[spec.name] = windows[what].percentile(float(q))
        return values

    def start(self) -> None:
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.close()
        if self.store is not None:
            self.store.close()
            self.store = None

    # -- arrival ---------------------------------------------------------------------

    def accept(
        self, payload: bytes | None, partition: int | None, offset: int | None
    ) -> Pending | tuple[Any, ...]:
        """Parse and check a raw record: a :class:`Pending` to hold, or a dead-letter row."""
        llm = self.config.llm
        carried = (payload_base64(payload), partition, offset)
        parsed = parse_prompt(payload, llm.max_prompt_bytes)
        if isinstance(parsed, Rejected):
            return _dead(parsed.reason, parsed.detail, carried)
        refusal = self._precheck(parsed)
        if refusal is not None:
            return _dead(refusal.reason, refusal.detail, carried, parsed.id, parsed.meta)
        return Pending(
            entry=f"{partition}:{offset}",
            id=parsed.id,
            prompt=parsed.prompt,
            priority=parsed.priority,
            session=parsed.session,
            max_new_tokens=parsed.max_new_tokens or llm.max_new_tokens,
            partition=partition,
            offset=offset,
            arrived_ms=int(self._clock() * 1000),
            meta=parsed.meta,
            adapter=parsed.adapter,
        )

    def _precheck(self, prompt: Prompt) -> Rejected | None:
        llm = self.config.llm
        if prompt.adapter is not None and self.scheduler.adapters is None:
            return Rejected(
                LlmReason.UNKNOWN_ADAPTER.value,
                f"adapter {prompt.adapter!r}: this worker serves the base model only "
                "(set llm.adapters_topic and a decoder exported with --lora-rank)",
            )
        if len(self._held) >= llm.max_waiting or self._held_bytes >= llm.max_waiting_bytes:
            self.queue_full += 1
            return Rejected(
                LlmReason.QUEUE_FULL.value,
                f"{len(self._held)} prompts ({self._held_bytes} bytes) already wait in this "
                f"worker; limits llm.max_waiting={llm.max_waiting}, "
                f"llm.max_waiting_bytes={llm.max_waiting_bytes}",
            )
        return None

    def hold(self, pending: Pending) -> tuple[Any, ...] | None:
        """Submit an accepted prompt (or queue it behind its session's running turn).

        Returns:
            A dead-letter row when it is refused now (too many tokens, a KV budget it
            can never fit), else None: its row comes later from :meth:`finished`.
        """
        if pending.entry in self._held:
            return None  # already held (a replayed record after a restore)
        self._held[pending.entry] = pending
        self._held_bytes += pending.nbytes
        session = pending.session
        if session is not None and session in self._busy_sessions:
            self._turns.setdefault(session, deque()).append(pending)
            return None
        return self._submit(pending)

    def resume(
        self, pendings: Iterable[Pending], histories: Mapping[str, Sequence[int]]
    ) -> list[tuple[Pending, tuple[Any, ...]]]:
        """Hold again what state kept across a restore (in arrival order per session).

        Returns:
            (pending, dead-letter row) for those refused now; the operator emits them.
        """
        for session, ids in histories.items():
            self._histories.setdefault(session, tuple(int(i) for i in ids))
        refused = []
        for p in sorted(pendings, key=lambda p: (p.arrived_ms, p.partition or 0, p.offset or 0)):
            row = self.hold(p)
            if row is not None:
                refused.append((p, row))
        return refused

    def _submit(self, pending: Pending) -> tuple[Any, ...] | None:
        llm = self.config.llm
        session = pending.session
        history = self._histories.get(session) if session is not None else None
        if history:
            ended = history[-1] in self._stops
            ids = [*history, *self.model.turn_ids(pending.prompt, ended=ended)]
        else:
            ids = self.model.prompt_ids(pending.prompt)
        if len(ids) > llm.max_prompt_tokens:
            what = "with the session's earlier turns " if history else ""
            return self._refuse(
                pending,
                LlmReason.PROMPT_TOO_LONG.value,
                f"prompt is {len(ids)} tokens {what}after the chat template; limit "
                f"{llm.max_prompt_tokens} (llm.max_prompt_tokens)",
            )
        request = Request(
            key=pending.entry,
            prompt_ids=tuple(ids),
            max_new_tokens=pending.max_new_tokens,
            stop_ids=self._stops,
            priority=pending.priority,
            session=session,
            adapter=pending.adapter,
        )
        refusal = self.scheduler.refusal(request)
        if refusal is not None:
            reason, _, detail = refusal.partition(": ")
            return self._refuse(pending, reason, detail)
        if session is not None:
            self._busy_sessions.add(session)
        self._submitted[pending.entry] = request.prompt_ids
        self.scheduler.submit(request)
        return None

    def _refuse(self, pending: Pending, reason: str, detail: str) -> tuple[Any, ...]:
        self._release(pending)
        return self._dead_row(pending, reason, detail)

    def _dead_row(self, pending: Pending, reason: str, detail: str) -> tuple[Any, ...]:
        # The record as accepted (state keeps the prompt, not the original bytes).
        payload = {"id": pending.id, "prompt": pending.prompt}
        if pending.session is not None:
            payload["session"] = pending.session
        raw = json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")
        carried = (payload_base64(raw), pending.partition, pending.offset)
        return _dead(reason, detail, carried, pending.id, pending.meta)

    def _release(self, pending: Pending) -> None:
        if self._held.pop(pending.entry, None) is not None:
            self._held_bytes -= pending.nbytes

    # -- completion --------------------------------------------------------------------

    def finished(self, entries: Iterable[str] | None = None) -> list[Outcome]:
        """Rows of the prompts that finished (of ``entries``, or all), next turns submitted.

        A session turn that finishes submits the session's next waiting turn; a next
        turn refused on submission comes back here as a dead-letter outcome too.
        """
        out: list[Outcome] = []
        for done in self.scheduler.take(entries):
            pending = self._held.get(done.key)
            if pending is None:
                continue  # cancelled
            out.extend(self._outcomes(pending, done))
        return out

    def _outcomes(self, pending: Pending, done: Finished) -> list[Outcome]:
        self._release(pending)
        prompt_ids = self._submitted.pop(pending.entry, ())
        carried = (None, pending.partition, pending.offset)
        history: tuple[int, ...] | None = None
        if done.error is not None:
            reason, _, detail = done.error.partition(": ")
            row = self._dead_row(pending, reason or Reason.INTERNAL_ERROR.value, detail)
        else:
            row = (
                pending.id,
                self.model.decode(done.token_ids),
                self.model_version,
                done.prompt_tokens,
                done.cached_tokens,
                round(done.ttft_ms, 3),
                round(done.queue_ms, 3),
                round(done.e2e_ms, 3),
                done.finish_reason,
                pending.session,
                None,
                None,
                *carried,
                pending.meta,
                done.adapter,
            )
            if pending.session is not None:
                history = (*prompt_ids, *done.token_ids)
                self._histories[pending.session] = history
        out = [Outcome(pending, row, history)]
        session = pending.session
        if session is not None:
            self._busy_sessions.discard(session)
            out.extend(self._next_turn(session))
        return out

    def _next_turn(self, session: str) -> list[Outcome]:
        queue = self._turns.get(session)
        out: list[Outcome] = []
        while queue:
            nxt = queue.popleft()
            refused = self._submit(nxt)
            if refused is None:
                break
            out.append(Outcome(nxt, refused, None))
        if queue is not None and not queue:
            self._turns.pop(session, None)
        return out

    def forget_session(self, session: str) -> None:
        self._histories.pop(session, None)

    # -- token streaming -------------------------------------------------------------

    def _deltas(self, deltas: Sequence[TokenDelta]) -> None:
        records = []
        for d in deltas:
            pending = self._held.get(d.key)
            if pending is None:
                continue
            tokens = self._delta_tokens.setdefault(d.key, [])
            before = self.model.decode(tokens) if tokens else ""
            tokens.extend(d.token_ids)
            text = self.model.decode(tokens)
            records.append(delta_record(pending.id, d, text[len(before) :]))
            if d.finished:
                self._delta_tokens.pop(d.key, None)
        if records and self._on_deltas is not None:
            try:
                self._on_deltas(records)
            except Exception as e:  # at-least-once side channel: never fail decoding for it
                log.warning("token deltas not sent: %s", e)
