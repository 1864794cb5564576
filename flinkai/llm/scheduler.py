"""Token-level scheduling of greedy completions: continuous batching across events.

One :class:`Scheduler` per worker owns the decoder. Each :meth:`Scheduler.step`:

1. **admits** waiting requests, highest priority first (a waiting request gains one
   level per ``aging_s`` seconds, so low priorities never starve), while the running
   set and the KV budget allow;
2. **prefills** admitted prompts in chunks, at most ``step_tokens`` tokens per step
   minus one per running row, so a long prompt stalls running decodes by at most one
   chunk; or, with ``overlap_prefill`` (the service's default), one prompt at a time on
   a thread beside the steps, so running decodes wait for no prefill and the prompt
   joins at the first step after it. A prompt first restores its longest cached prefix
   from the snapshot store (:class:`~flinkai.llm.prefix.PrefixCache`) and publishes its
   own blocks after;
3. **decodes** one token for every running sequence in one batched forward
   (:class:`~flinkai.llm.batch.KvBatch`). A sequence whose prefill ended joins at
   this step; one that stopped leaves before the next. Nothing waits for a bundle,
   a batch or the longest request (Orca's iteration-level scheduling).

Under KV pressure the lowest-priority running sequence (the newest among equals) is
preempted: its KV is published to the snapshot store, and it waits again with the
tokens it has. On resume it restores those blocks and recomputes only the tail, so
its tokens are the ones it would have produced (vLLM's swap, through the store;
recompute when there is none). A request whose KV could never fit is refused at once.

Adapters: a request naming an ``adapter`` is pinned, when its first forward runs, to
that adapter's current version (a prompt still in its prefill moves to a newer one,
recomputing its partial KV) (:class:`~flinkai.llm.adapters.AdapterSet`, hot-plugged by
a feed) and keeps it through preemption, so no completion mixes two versions. Rows
of different adapters share the decode step: the decoder takes each row's LoRA
matrices as inputs (``flinkai.llm.lora``). Prefix blocks and session KV are keyed by
the adapter's ``name@version`` too.

Sessions: a request with a ``session`` whose prompt extends the session's previous
turn (prompt + completion) starts from that turn's KV: kept resident while the budget
allows, offloaded to the store under pressure, restored by prefix lookup.

The class is free of PyFlink and threads of its own until :meth:`start`; a plain
loop of :meth:`step` calls (tests, the bench's ``raw`` row) runs the same code.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from flinkai.llm.adapters import AdapterSet
from flinkai.llm.batch import BatchForward, KvBatch
from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.latency import LatencyWindow
from flinkai.llm.lora import Adapter, AdapterError, check_adapter_name
from flinkai.llm.prefix import Decoder, PrefixCache, Restored
from flinkai.llm.store_io import PrefixIo, Write

__all__ = [
    "Finished",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerDecoder",
    "SchedulerStats",
    "StepTrace",
    "TokenDelta",
]

log = logging.getLogger(__name__)

FinishReason = Literal["stop", "length", "error"]

#: Niceness added to the prefill thread (overlap_prefill).
_PREFILL_NICE = 10


def _lower_priority() -> None:
    """Make the calling thread yield the cores to the decode steps (Linux: niceness +10).

    Prefill and decode share the cores; the decode runs a step that every running
    sequence waits for, the prefill one prompt's first token. Work is not lost either
    way: the prefill takes whatever the decode leaves.
    """
    # Not Linux, or not allowed: the two run at equal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _PREFILL_NICE)


class SchedulerDecoder(Decoder, BatchForward):
    """A decoder with batch-1 ``forward`` (prefill) and ``forward_batch`` (decode)."""


@dataclass(frozen=True)
class SchedulerConfig:
    """How the scheduler shares the decoder.

    Attributes:
        max_running: Most sequences in the decode batch (prefilling ones included).
        step_tokens: Tokens one step may process: one per running row, the rest for
            prefill chunks (at least ``min_prefill_chunk``).
        min_prefill_chunk: Prefill tokens per step even when the batch is full.
        overlap_prefill: Prefill one prompt at a time on a thread of its own (chunks of
            ``step_tokens``), beside the decode steps instead of inside them: running
            sequences then wait for no prefill, and the prompt joins at the first step
            after it. Off: the plain, deterministic loop (one chunk budget per step,
            then the decode).
        prefill_first_at: With ``overlap_prefill``, once this many prompts wait for
            their prefill (the one in flight included), each decode step first waits for
            the prefill, for at most the last decode step's duration. Under a backlog the
            prefill then has the cores about half the time, so batches fill (one read of
            the weights for more rows) while tokens keep coming at about half their
            pace; at light load the decode never waits. 0: never.
        kv_budget_bytes: Bytes of KV (padding included) the worker may hold; 0: none.
        store_thread: Make the prefix store's writes and lookups on a thread of their
            own (:mod:`flinkai.llm.store_io`), so a Kafka transaction never stalls the
            decode steps; off: inline, the deterministic loop tests step by hand.
        aging_s: A waiting request gains one priority level per this many seconds.
        max_waiting: Requests beyond this many waiting are refused (``queue_full``).
        trace_steps: Keep the composition of the last this many steps (0: off).
    """

    max_running: int = 32
    step_tokens: int = 64
    min_prefill_chunk: int = 16
    overlap_prefill: bool = False
    prefill_first_at: int = 0
    kv_budget_bytes: int = 0
    store_thread: bool = False
    aging_s: float = 10.0
    max_waiting: int = 100_000
    trace_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("max_running", "step_tokens", "min_prefill_chunk"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        negative = [
            name
            for name in ("kv_budget_bytes", "max_waiting", "trace_steps", "prefill_first_at")
            if getattr(self, name) < 0
        ]
        if negative:
            raise ValueError(f"{', '.join(negative)} must be >= 0")
        if not self.aging_s > 0:
            raise ValueError(f"aging_s must be > 0, got {self.aging_s}")


@dataclass(frozen=True)
class Request:
    """One completion to make.

    Attributes:
        key: The caller's unique handle for it.
        prompt_ids: The prompt, chat template applied (for a session's later turn: the
            previous turns' prompt and completion ids, then the new turn's).
        max_new_tokens: Most tokens generated, the stop id included.
        stop_ids: Ids that end the completion (kept as its last token).
        priority: Higher is admitted first.
        session: Resume from this session's previous turn's KV when the prompt extends it.
        adapter: Decode with this LoRA adapter's version current when the request's
            first forward runs; None: the base model.
    """

    key: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    stop_ids: frozenset[int]
    priority: int = 0
    session: str | None = None
    adapter: str | None = None


@dataclass(frozen=True)
class Finished:
    """A request's outcome.

    Attributes:
        key: The request's key.
        token_ids: Generated ids (the stop id included when one ended it).
        finish_reason: ``stop``, ``length``, or ``error`` (see ``error``).
        prompt_tokens: Prompt length.
        cached_tokens: Prompt tokens restored (prefix store or resident session) at
            first admission instead of prefilled.
        queue_ms: Submission to first admission.
        ttft_ms: Submission to first token.
        e2e_ms: Submission to the last token.
        preemptions: Times it was preempted.
        error: ``reason: detail`` when it was refused or failed.
        adapter: ``name@version`` of the adapter it decoded with; None: the base model.
    """

    key: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    prompt_tokens: int
    cached_tokens: int
    queue_ms: float
    ttft_ms: float
    e2e_ms: float
    preemptions: int = 0
    error: str | None = None
    adapter: str | None = None


@dataclass(frozen=True)
class TokenDelta:
    """Tokens one step produced for one request (token streaming)."""

    key: str
    seq: int
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: FinishReason | None


@dataclass(frozen=True)
class StepTrace:
    """Which requests one step decoded, joined and released."""

    step: int
    at_s: float
    running: tuple[str, ...]
    joined: tuple[str, ...]
    left: tuple[str, ...]
    prefill_tokens: int
    step_ms: float


@dataclass
class SchedulerStats:
    """Counters and latency windows, for metrics (vLLM's meanings)."""

    steps: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    #: Steps whose decode waited for the prefill under a backlog (prefill_first_at).
    prefill_first_steps: int = 0
    #: Time the stepping thread waited for store writes to end (KV budget, store_thread).
    store_wait_ms: float = 0.0
    #: Decode steps that ran while a prompt prefilled beside them (overlap_prefill).
    overlapped_steps: int = 0
    finished: int = 0
    refused: int = 0
    preemptions: int = 0
    session_offloads: int = 0
    peak_kv_bytes: int = 0
    running: int = 0
    waiting: int = 0
    kv_bytes: int = 0
    ttft_ms: LatencyWindow = field(default_factory=LatencyWindow)
    tpot_ms: LatencyWindow = field(default_factory=LatencyWindow)
    itl_ms: LatencyWindow = field(default_factory=LatencyWindow)
    e2e_ms: LatencyWindow = field(default_factory=LatencyWindow)
    queue_ms: LatencyWindow = field(default_factory=LatencyWindow)
    #: ``name@version`` -> wall time (``time.time()``) of the first step that used it.
    adapter_first_use: dict[str, float] = field(default_factory=dict)
    #: (``name@version``, wall time) of each adapter sequence's first forward, newest
    #: last: when a hot-plugged or rolled-back version first served a request.
    adapter_starts: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=4096))
    #: Prompts moved to a newer version mid-prefill (their partial KV recomputed).
    adapter_repins: int = 0


class _Seq:
    """A request's mutable progress."""

    __slots__ = (
        "admitted",
        "cache",
        "cached_tokens",
        "counted_cache",
        "covered",
        "first_token",
        "generated",
        "last_token",
        "lookup",
        "lora",
        "preemptions",
        "req",
        "restore_pending",
        "restored",
        "stored_tokens",
        "submitted",
    )  # fmt: skip

    def __init__(self, req: Request, submitted: float) -> None:
        self.req = req
        self.submitted = submitted
        self.generated: list[int] = []
        self.cache: KvCache | None = None  # during prefill: KV of context[:covered]
        self.covered = 0
        self.restored = 0
        self.stored_tokens = 0  # context tokens whose full blocks are in the prefix store
        self.restore_pending = False
        # The prefix store's answer, while the store thread looks it up
        self.lookup: concurrent.futures.Future[Restored] | None = None
        self.cached_tokens = 0
        self.counted_cache = False
        self.admitted: float | None = None
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.preemptions = 0
        self.lora: Adapter | None = None  # pinned at first admission, kept to the end

    @property
    def tag(self) -> str:
        """The adapter's ``name@version`` ("" for the base model): KV namespace."""
        return "" if self.lora is None else self.lora.tag

    @property
    def context(self) -> list[int]:
        """What the KV must cover before the next token: the prompt and every token so far."""
        return [*self.req.prompt_ids, *self.generated]

    def done(self) -> FinishReason | None:
        if self.generated and self.generated[-1] in self.req.stop_ids:
            return "stop"
        if len(self.generated) >= self.req.max_new_tokens:
            return "length"
        return None


class _Session(NamedTuple):
    """A finished turn's KV, resident for the session's next turn."""

    ids: tuple[int, ...]  # the token ids its KV covers
    cache: KvCache
    stored: int  # how many of those have their full blocks in the store (or queued)
    tag: str  # the adapter tag it was made under
    write: Write | None  # its clean-ahead write to the store, if queued


class Scheduler:
    """Continuous batching over one decoder (see the module docstring).

    Args:
        decoder: Batch-1 ``forward`` for prefill, ``forward_batch`` for decode.
        config: Limits and budgets.
        prefix: Prefix reuse and the preemption/session offload target; None: neither
            (a preempted sequence then recomputes its KV).
        on_delta: Called from the stepping thread with each step's new tokens.
        clock: Seconds, monotonic (tests pass a fake).
        adapters: The LoRA adapters requests may name (the decoder must take LoRA
            inputs); None: requests naming one are refused.
        wall: Wall-clock seconds, for the adapter first-use times.
    """

    def __init__(
        self,
        decoder: SchedulerDecoder,
        config: SchedulerConfig | None = None,
        *,
        prefix: PrefixCache | None = None,
        on_delta: Callable[[Sequence[TokenDelta]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        adapters: AdapterSet | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.decoder = decoder
        self.config = config or SchedulerConfig()
        self.prefix = prefix
        self._io = None if prefix is None else PrefixIo(prefix, self.config.store_thread)
        self.shape: ModelShape = decoder.shape
        self.on_delta = on_delta
        self.clock = clock
        self.wall = wall
        self.lora = getattr(decoder, "lora", None)
        if adapters is not None and self.lora is None:
            raise ValueError("adapters need a decoder with LoRA inputs (export-llm --lora-rank)")
        self.adapters = adapters
        self.stats = SchedulerStats()
        self.trace: deque[StepTrace] = deque(maxlen=self.config.trace_steps or 1)
        self._batch = KvBatch(self.shape, self.lora)
        self._lock = threading.Condition()
        self._inbox: deque[_Seq] = deque()
        self._waiting: dict[int, deque[_Seq]] = {}
        self._n_waiting = 0
        self._prefill: list[_Seq] = []
        self._running: dict[str, _Seq] = {}
        self._leaving: list[str] = []
        self._released: list[str] = []  # left at the end of the last step (for the trace)
        self._done: list[Finished] = []  # finished this step, published after its deltas
        self._trim = False  # the next batch change drops all spare padding (KV budget)
        self._joining: list[_Seq] = []
        self._first_deltas: list[TokenDelta] = []
        self._sessions: dict[str, _Session] = {}
        self._finished: dict[str, Finished] = {}
        self._known: set[str] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._step_no = 0
        # The prefill running beside the decode steps (overlap_prefill): its future,
        # the sequence (always the head of _prefill) and the ids it covers.
        self._inflight: (
            tuple[concurrent.futures.Future[tuple[np.ndarray, KvCache]], _Seq, list[int]] | None
        ) = None
        self._prefill_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._decode_s = 0.0  # the last decode step's duration: the backlog's wait slice

    # -- the caller's side (any thread) ----------------------------------------------

    def submit(self, request: Request) -> None:
        """Queue a request; a refusal comes back through :meth:`take` like a result."""
        now = self.clock()
        refusal = self.refusal(request)
        with self._lock:
            if request.key in self._known:
                raise ValueError(f"request {request.key!r} is already queued or running")
            self._known.add(request.key)
            if refusal is None and self._n_waiting + len(self._inbox) >= self.config.max_waiting:
                refusal = (
                    f"queue_full: {self.config.max_waiting} requests already wait (llm.max_waiting)"
                )
            if refusal is not None:
                self.stats.refused += 1
                self._finished[request.key] = Finished(
                    request.key, (), "error", len(request.prompt_ids), 0, 0.0, 0.0, 0.0, 0, refusal
                )
            else:
                self._inbox.append(_Seq(request, now))
            self._lock.notify_all()

    def refusal(self, req: Request) -> str | None:
        """Why ``req`` can never be served (``reason: detail``), or None."""
        if not req.prompt_ids:
            return "empty_prompt: the prompt has no tokens"
        if req.max_new_tokens < 1:
            return f"invalid_options: max_new_tokens must be >= 1, got {req.max_new_tokens}"
        vocab = self.shape.vocab_size
        if vocab and (min(req.prompt_ids) < 0 or max(req.prompt_ids) >= vocab):
            return f"invalid_field: token ids must be in [0, {vocab})"
        if req.adapter is not None:
            if self.adapters is None:
                return (
                    f"unknown_adapter: adapter {req.adapter!r}: this worker serves the base "
                    "model only (no llm.adapters_topic)"
                )
            try:
                check_adapter_name(req.adapter)
            except AdapterError as e:
                return str(e)
        need = (len(req.prompt_ids) + req.max_new_tokens) * self.shape.kv_bytes_per_token
        budget = self.config.kv_budget_bytes
        if budget and need > budget:
            return (
                f"kv_budget_exceeded: {len(req.prompt_ids)} prompt + {req.max_new_tokens} new "
                f"tokens need {need} bytes of KV; the budget is {budget} (llm.kv_budget_bytes)"
            )
        return None

    def take(self, keys: Iterable[str] | None = None) -> list[Finished]:
        """Remove and return finished results: those of ``keys``, or all when None."""
        with self._lock:
            wanted = list(self._finished) if keys is None else keys
            out = [self._finished.pop(k) for k in wanted if k in self._finished]
            for f in out:
                self._known.discard(f.key)
            return out

    def known(self, key: str) -> bool:
        """Whether ``key`` is queued, running or finished and not yet taken."""
        with self._lock:
            return key in self._known

    @property
    def pending(self) -> int:
        """Requests submitted and not yet finished."""
        with self._lock:
            return len(self._known) - len(self._finished)

    def start(self) -> None:
        """Run :meth:`step` on a daemon thread until :meth:`close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="flinkai-llm-scheduler")
            self._thread.daemon = True
            self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (the step in progress ends first)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._prefill_pool is not None:
            self._prefill_pool.shutdown(wait=False)
            self._prefill_pool = None
        if self._io is not None:
            self._io.close()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._has_work():
                    self._lock.wait(0.5)
                if self._closed:
                    return
            try:
                self.step()
            except Exception as e:  # a broken step must fail its requests, not the worker
                log.exception("scheduler step failed; failing its running requests")
                self._fail_all(f"internal_error: {type(e).__name__}: {e}")

    def _has_work(self) -> bool:
        return bool(self._inbox or self._n_waiting or self._prefill or self._running)

    # -- one iteration -------------------------------------------------------------------

    def step(self) -> bool:
        """Admit, prefill one budget of chunks, decode one token for every running row.

        Returns:
            Whether there was anything to do.
        """
        started = self.clock()
        with self._lock:
            while self._inbox:
                seq = self._inbox.popleft()
                self._waiting.setdefault(seq.req.priority, deque()).append(seq)
                self._n_waiting += 1
        if not (self._n_waiting or self._prefill or self._running):
            self._update_gauges()
            return False
        self._admit(started)
        prefill_tokens = self._prefill_chunks()
        joined = [s.req.key for s in self._joining]
        left, self._released = [*self._released, *self._leaving], []
        self._make_room()
        self._batch.change(
            self._leaving,
            [(s.req.key, self._take_cache(s)) for s in self._joining],
            self._trim,
            {s.req.key: s.lora for s in self._joining if s.lora is not None},
        )
        self._trim = False
        for s in self._joining:
            self._running[s.req.key] = s
        self._leaving, self._joining = [], []
        deltas = self._first_deltas + (self._decode() if self._running else [])
        self._first_deltas = []
        self._release()
        self._step_no += 1
        self.stats.steps += 1
        step_ms = (self.clock() - started) * 1000.0
        if self.config.trace_steps:
            self.trace.append(
                StepTrace(
                    self._step_no,
                    started,
                    tuple(self._batch.keys),
                    tuple(joined),
                    tuple(left),
                    prefill_tokens,
                    step_ms,
                )
            )
        self._update_gauges()
        if deltas and self.on_delta is not None:
            self.on_delta(deltas)
        # Results become visible to take() only after their last delta went out: a
        # caller that takes a result may drop its deltas' state at once.
        if self._done:
            with self._lock:
                for done in self._done:
                    self._finished[done.key] = done
            self._done = []
        return True

    def _release(self) -> None:
        """Drop the rows that finished this step (one row moved each) and, if the session
        KV they left made the worker exceed its budget, offload sessions at once."""
        if self._leaving:
            self._batch.change(self._leaving, [])
            self._released.extend(self._leaving)
            self._leaving = []
        budget = self.config.kv_budget_bytes
        if budget and self._sessions:
            self._offload_sessions(functools.partial(self._held_fits, budget))

    def _held_fits(self, budget: int) -> bool:
        # Without the writes in flight: offloading more would not end them sooner.
        return self._held_bytes() - self._writing_bytes() <= budget

    def _prefill_bytes(self) -> int:
        return sum(x.cache.nbytes for x in self._prefill if x.cache is not None)

    def _held_bytes(self) -> int:
        """KV the worker holds now: the batch, prompts mid-prefill, resident sessions,
        writes to the store not yet ended."""
        return (
            self._batch.nbytes
            + self._prefill_bytes()
            + self._session_bytes()
            + self._writing_bytes()
        )

    def _writing_bytes(self) -> int:
        return 0 if self._io is None else self._io.pending_bytes

    def _take_cache(self, seq: _Seq) -> KvCache:
        cache = seq.cache
        assert cache is not None
        seq.cache = None
        return cache

    def _admit(self, now: float) -> None:
        cfg = self.config
        while self._n_waiting and len(self._running) + len(self._prefill) < cfg.max_running:
            seq = self._peek(now)
            if seq is None:
                break
            if cfg.kv_budget_bytes and self._admission_bytes(seq) > cfg.kv_budget_bytes:
                self._offload_sessions(
                    functools.partial(self._admits, seq, cfg.kv_budget_bytes), seq.req.session
                )
                if self._admission_bytes(seq) > cfg.kv_budget_bytes and (
                    self._running or self._prefill
                ):
                    break  # wait for room; an empty worker admits anything that fits alone
            if (
                cfg.kv_budget_bytes
                and self._writing_bytes()
                and self._admission_bytes(seq) + self._writing_bytes() > cfg.kv_budget_bytes
            ):
                if self._running or self._prefill:
                    break  # the KV being written is freed when its write ends
                self._drain()
            self._pop(seq)
            if seq.admitted is None:
                seq.admitted = now
                self.stats.queue_ms.add((now - seq.submitted) * 1000.0)
            seq.restore_pending = True
            self._prefill.append(seq)

    def _pin(self, seq: _Seq) -> bool:
        """Give ``seq`` its adapter's current version when its first forward is about to
        run (not at admission: a prompt admitted behind others' prefill would otherwise
        start on a version replaced meanwhile); False (and an error result) if none."""
        assert self.adapters is not None and seq.req.adapter is not None
        now = self.clock()
        try:
            seq.lora = self.adapters.pin(seq.req.adapter)
            return True
        except AdapterError as e:
            self.stats.refused += 1
            waited = (now - seq.submitted) * 1000.0
            failed = Finished(seq.req.key, (), "error", len(seq.req.prompt_ids), 0, waited, 0.0,
                              waited, 0, str(e))  # fmt: skip
            self._done.append(failed)
            return False

    def _repin(self, seq: _Seq) -> None:
        """Move a prompt still in its prefill to its adapter's newest version, dropping
        the partial KV: it has produced no token yet, so nothing mixes two versions, and
        a hot-plugged version serves from the next step instead of after that prefill."""
        assert self.adapters is not None and seq.lora is not None
        latest = self.adapters.current(seq.lora.name)
        if latest is None or latest is seq.lora:
            return
        seq.lora = latest
        seq.cache, seq.covered, seq.restored, seq.stored_tokens = None, 0, 0, 0
        seq.restore_pending, seq.counted_cache, seq.lookup = True, False, None
        self.stats.adapter_repins += 1

    def _peek(self, now: float) -> _Seq | None:
        best: _Seq | None = None
        best_rank = 0.0
        for priority, queue in self._waiting.items():
            if not queue:
                continue
            head = queue[0]
            rank = priority + (now - head.submitted) / self.config.aging_s
            if best is None or rank > best_rank:
                best, best_rank = head, rank
        return best

    def _pop(self, seq: _Seq) -> None:
        self._waiting[seq.req.priority].popleft()
        self._n_waiting -= 1

    def _requeue(self, seq: _Seq) -> None:
        # A preempted sequence goes first among its priority: it has waited longest.
        self._waiting.setdefault(seq.req.priority, deque()).appendleft(seq)
        self._n_waiting += 1

    def _admits(self, seq: _Seq, budget: int) -> bool:
        return self._admission_bytes(seq) <= budget

    def _admission_bytes(self, seq: _Seq) -> int:
        # The rows after this step's leaves, with every admitted prompt and this one.
        lengths = [self._batch.length(k) for k in self._running] + [
            len(s.context) for s in (*self._prefill, *self._joining, seq)
        ]
        rows, width = len(lengths), self._batch.width_after(lengths) + 1
        own = self._sessions.get(seq.req.session or "")
        if own is not None and own.tag != seq.tag:
            own = None
        # The turn's own resident session becomes its KV in the batch: not counted twice.
        return (
            self._batch.nbytes_if(rows, width)
            + self._session_bytes()
            - (own.cache.nbytes if own is not None else 0)
        )

    def _session_bytes(self) -> int:
        return sum(x.cache.nbytes for x in self._sessions.values())

    def _restore(self, seq: _Seq) -> None:
        """Start the sequence's KV: a resident session turn, else ask the prefix store
        (the answer lands in ``seq.lookup``)."""
        session = seq.req.session
        if session is not None and session in self._sessions:
            own = self._sessions[session]
            context = seq.context
            n = len(own.ids)
            if own.tag == seq.tag and n <= len(context) and tuple(context[:n]) == own.ids:
                del self._sessions[session]
                if self._io is not None:
                    self._io.hold(own.write)  # the batch gets a copy; the write keeps this
                self._restored(seq, own.cache, own.stored)
                return
        if self._io is not None:
            seq.lookup = self._io.lookup(seq.context, seq.tag)
            return
        self._restored(seq, None, 0)

    def _restored(self, seq: _Seq, past: KvCache | None, stored: int) -> None:
        """Start from ``past`` (None: from scratch), ``stored`` of whose tokens are in
        the store."""
        context = seq.context
        covered = 0 if past is None else past.seq_len
        seq.stored_tokens = min(stored, covered)
        if past is not None and covered >= len(context):
            covered = len(context) - 1  # a forward needs one new token to give logits
            past = past.slice(0, covered)
        seq.cache, seq.covered, seq.restored = past, covered, covered
        if not seq.counted_cache:
            seq.cached_tokens, seq.counted_cache = covered, True

    def _prefill_chunks(self) -> int:
        """Prefill this step's chunks; returns the prompt tokens whose KV was added."""
        if self.config.overlap_prefill:
            return self._prefill_overlapped()
        budget = self._chunk_budget()
        used = 0
        while used < budget:
            got = self._next_chunk(budget - used)
            if got is None:
                break
            seq, chunk = got
            logits, cache = self._forward_chunk(seq, chunk)
            used += len(chunk)
            self._after_chunk(seq, chunk, logits, cache)
        self.stats.prefill_tokens += used
        return used

    def _prefill_overlapped(self) -> int:
        """Collect the prompt prefilling beside the decode if it is done (or if there is
        no decode to run meanwhile: then the decode waits for it; or, once
        ``prefill_first_at`` prompts wait, if it ends within one decode step's time),
        then start the next one.

        The thread prefills a prompt's whole remaining context, in chunks of
        ``step_tokens`` (which bound the attention's memory), without coming back to
        the stepping thread between chunks: running sequences do not wait for it, so a
        round trip per chunk would only delay the prompt's first token.
        """
        used = 0
        if self._inflight is not None:
            future, seq, ids = self._inflight
            if not future.done() and self._running:
                at = self.config.prefill_first_at
                if not at or len(self._prefill) < at:
                    return 0  # the decode goes on; the prompt is collected at a later step
                # A backlog: the decode waits, so the prefill has the cores and the batch
                # fills. For one decode step's time at most: waiting out a whole prompt
                # (up to about a second) stalled every running sequence for that long.
                self.stats.prefill_first_steps += 1
                concurrent.futures.wait([future], timeout=max(self._decode_s, 0.001))
                if not future.done():
                    return 0
            self._inflight = None
            logits, cache = future.result()
            used = len(ids)
            self._after_chunk(seq, ids, logits, cache)
        got = self._next_chunk(1 << 30)  # the whole remaining context
        if got is not None:
            seq, ids = got
            if self._prefill_pool is None:
                self._prefill_pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="flinkai-llm-prefill", initializer=_lower_priority
                )
            future = self._prefill_pool.submit(
                self._forward_chunks, seq, ids, self.config.step_tokens
            )
            self._inflight = (future, seq, ids)
        self.stats.prefill_tokens += used
        return used

    def _chunk_budget(self) -> int:
        cfg = self.config
        return max(cfg.step_tokens - len(self._running), cfg.min_prefill_chunk)

    def _next_chunk(self, budget: int) -> tuple[_Seq, list[int]] | None:
        """The head prompt's next chunk of at most ``budget`` tokens (pinning its adapter
        and restoring its prefix first); None: no prompt to prefill."""
        while self._prefill:
            seq = self._prefill[0]
            if seq.req.adapter is not None and not seq.generated:
                if seq.lora is None and not self._pin(seq):
                    self._prefill.pop(0)
                    continue
                self._repin(seq)
            if seq.restore_pending:
                # Looked up when its prefill starts, not at admission: a prompt admitted
                # beside another with the same prefix then finds the blocks it published.
                seq.restore_pending = False
                self._restore(seq)
            if seq.lookup is not None:
                if not seq.lookup.done() and self._running:
                    return None  # the decode goes on; a later step takes the answer
                past = seq.lookup.result().past  # never raises: a store error is a miss
                seq.lookup = None
                self._restored(seq, past, 0 if past is None else past.seq_len)
            if seq.lora is not None and seq.covered == seq.restored and not seq.preemptions:
                wall = self.wall()
                self.stats.adapter_first_use.setdefault(seq.lora.tag, wall)
                self.stats.adapter_starts.append((seq.lora.tag, wall))
            return seq, seq.context[seq.covered : seq.covered + budget]
        return None

    def _forward_chunk(
        self, seq: _Seq, chunk: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]:
        # Reads seq.cache and seq.lora only: nothing changes them while a prefill runs.
        past = seq.cache if past is None else past
        if seq.lora is None:
            return self.decoder.forward(chunk, past)
        return self.decoder.forward(chunk, past, lora=seq.lora)  # type: ignore[call-arg]

    def _forward_chunks(self, seq: _Seq, ids: list[int], size: int) -> tuple[np.ndarray, KvCache]:
        logits, cache = self._forward_chunk(seq, ids[:size])
        for at in range(size, len(ids), size):
            logits, cache = self._forward_chunk(seq, ids[at : at + size], cache)
        return logits, cache

    def _after_chunk(self, seq: _Seq, chunk: list[int], logits: np.ndarray, cache: KvCache) -> None:
        seq.cache, seq.covered = cache, seq.covered + len(chunk)
        context = seq.context
        if seq.covered < len(context):
            return  # the rest of this prompt in a later chunk
        self._prefill.pop(0)
        self._publish(context, cache, seq)
        self._first_deltas.append(self._emit(seq, int(np.argmax(logits))))
        if seq.done() is None:
            self._joining.append(seq)

    def _publish(self, context: Sequence[int], cache: KvCache, seq: _Seq) -> None:
        if self._io is not None:
            # From the first block the store lacks: those restored from it are there; a
            # resident session's last turn may not be.
            self._io.write(
                context, cache, seq.stored_tokens // self._io.prefix.block_tokens, seq.tag
            )
            seq.stored_tokens = len(context)

    def _decode(self) -> list[TokenDelta]:
        if self._inflight is not None:
            self.stats.overlapped_steps += 1
        keys = list(self._batch.keys)
        seqs = [self._running[k] for k in keys]
        started = time.perf_counter()
        logits = self._batch.step(self.decoder, [s.generated[-1] for s in seqs])
        self._decode_s = time.perf_counter() - started
        tokens = np.argmax(logits, axis=-1)
        deltas: list[TokenDelta] = []
        for seq, token in zip(seqs, tokens, strict=True):
            deltas.append(self._emit(seq, int(token)))
        return deltas

    def _emit(self, seq: _Seq, token: int) -> TokenDelta:
        now = self.clock()
        seq.generated.append(token)
        self.stats.generated_tokens += 1
        if seq.first_token is None:
            seq.first_token = now
            self.stats.ttft_ms.add((now - seq.submitted) * 1000.0)
        elif seq.last_token is not None:
            self.stats.itl_ms.add((now - seq.last_token) * 1000.0)
        seq.last_token = now
        reason = seq.done()
        if reason is not None:
            self._finish(seq, reason, now)
        return TokenDelta(seq.req.key, len(seq.generated) - 1, (token,), reason is not None, reason)

    def _finish(self, seq: _Seq, reason: FinishReason, now: float) -> None:
        key = seq.req.key
        if key in self._running:
            del self._running[key]
            self._leaving.append(key)
            if seq.req.session is not None:
                self._keep_session(seq, self._batch.extract(key))
        elif seq.req.session is not None and seq.cache is not None:
            self._keep_session(seq, seq.cache)
        seq.cache = None
        first = seq.first_token if seq.first_token is not None else now
        n = len(seq.generated)
        if n > 1:
            self.stats.tpot_ms.add((now - first) * 1000.0 / (n - 1))
        self.stats.e2e_ms.add((now - seq.submitted) * 1000.0)
        self.stats.finished += 1
        done = Finished(
            key=key,
            token_ids=tuple(seq.generated),
            finish_reason=reason,
            prompt_tokens=len(seq.req.prompt_ids),
            cached_tokens=seq.cached_tokens,
            queue_ms=((seq.admitted or now) - seq.submitted) * 1000.0,
            ttft_ms=(first - seq.submitted) * 1000.0,
            e2e_ms=(now - seq.submitted) * 1000.0,
            preemptions=seq.preemptions,
            adapter=seq.lora.tag if seq.lora is not None else None,
        )
        self._done.append(done)

    def _keep_session(self, seq: _Seq, cache: KvCache) -> None:
        """Keep a finished turn's KV for the session's next turn (resident; offloaded later).

        With a budget and the store's thread, its blocks are written at once, beside the
        decode steps, so offloading it later under pressure writes nothing.
        """
        session = seq.req.session
        assert session is not None
        ids = tuple(seq.context[: cache.seq_len])
        old = self._sessions.pop(session, None)
        stored, write = min(seq.stored_tokens, len(ids)), None
        if self._io is not None:
            if old is not None:
                self._io.hold(old.write)
            if self._io.threaded and self.config.kv_budget_bytes:
                bt = self._io.prefix.block_tokens
                write = self._io.write(ids, cache, stored // bt, seq.tag, held=False)
                stored = max(stored, len(ids) // bt * bt)
        self._sessions[session] = _Session(ids, cache, stored, seq.tag, write)

    def _offload_sessions(self, fits: Callable[[], bool], keep: str | None = None) -> None:
        """Move resident sessions' KV to the store (without one: recomputed later) until
        ``fits()``; never ``keep``, the session of the turn being admitted.

        The session whose next use is furthest away goes first (Belady's rule): one with
        no turn waiting, then the one whose waiting turn was submitted last (admission
        is first come, first served within a priority).
        """
        if not self._sessions or fits():
            return
        next_use: dict[str, float] = {}
        for queue in self._waiting.values():
            for waiting in queue:
                session = waiting.req.session
                if session in self._sessions and session not in next_use:
                    next_use[session] = waiting.submitted
        order = sorted(
            (s for s in self._sessions if s != keep),
            key=lambda s: (s in next_use, -next_use.get(s, 0.0)),
        )
        for session in order:
            own = self._sessions.pop(session)
            if self._io is not None:
                self._io.hold(own.write)  # written ahead: counted until its write ends
                # Only the blocks the store lacks: the turn's prompt blocks are there.
                bt = self._io.prefix.block_tokens
                self._io.write(own.ids, own.cache, own.stored // bt, own.tag)
            self.stats.session_offloads += 1
            if fits():
                return

    def _make_room(self) -> None:
        """Preempt until the next decode step fits the KV budget."""
        budget = self.config.kv_budget_bytes
        if not budget:
            return

        def need(trim: bool = False) -> int:
            staying = [k for k in self._batch.keys if k not in set(self._leaving)]
            rows = len(staying) + len(self._joining)
            width = self._batch.width_after(
                [self._batch.length(k) for k in staying] + [len(s.context) for s in self._joining],
                trim,
            )
            return (
                self._batch.nbytes_if(rows, width + 1)
                + self._prefill_bytes()
                + self._session_bytes()
            )

        if need() > budget and need(trim=True) <= budget:
            self._trim = True  # dropping the spare padding is enough
        else:
            self._offload_sessions(lambda: need(trim=True) <= budget)
            while need(trim=True) > budget and len(self._running) + len(self._joining) > 1:
                self._preempt(self._victim())
            self._trim = need() > budget
        if need(self._trim) + self._writing_bytes() > budget:
            self._drain()  # the step's KV fits once the writes of what left have ended

    def _drain(self) -> None:
        if self._io is not None:
            started = self.clock()
            self._io.drain()
            self.stats.store_wait_ms += (self.clock() - started) * 1000.0

    def _victim(self) -> _Seq:
        candidates = [*self._running.values(), *self._joining]
        return min(candidates, key=lambda s: (s.req.priority, -s.submitted))

    def _preempt(self, seq: _Seq) -> None:
        key = seq.req.key
        if key in self._running:
            cache = self._batch.extract(key)
            del self._running[key]
            self._leaving.append(key)
        else:
            self._joining.remove(seq)
            cache = self._take_cache(seq)
        if self._io is not None:
            # The blocks go to the store; resuming restores them and recomputes the tail.
            self._io.write(seq.context[: cache.seq_len], cache, namespace=seq.tag)
        seq.cache, seq.covered = None, 0
        seq.preemptions += 1
        self.stats.preemptions += 1
        self._requeue(seq)

    def _fail_all(self, error: str) -> None:
        now = self.clock()
        seqs = [*self._running.values(), *self._prefill, *self._joining]
        self._inflight = None  # its sequence fails with the rest; the result is dropped
        self._running.clear()
        self._prefill.clear()
        self._joining.clear()
        self._leaving.clear()
        self._batch = KvBatch(self.shape, self.lora)
        with self._lock:
            for done in self._done:  # finished before the step failed: not lost
                self._finished[done.key] = done
            self._done = []
            for seq in seqs:
                self._finished[seq.req.key] = Finished(
                    seq.req.key, tuple(seq.generated), "error", len(seq.req.prompt_ids),
                    seq.cached_tokens, 0.0, 0.0, (now - seq.submitted) * 1000.0,
                    seq.preemptions, error, seq.tag or None,
                )  # fmt: skip

    def _update_gauges(self) -> None:
        s = self.stats
        s.running = len(self._running) + len(self._prefill)
        s.waiting = self._n_waiting + len(self._inbox)
        s.kv_bytes = self._held_bytes()
        s.peak_kv_bytes = max(s.peak_kv_bytes, s.kv_bytes)
