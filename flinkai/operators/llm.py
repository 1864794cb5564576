"""LLM completion as a keyed stream operator: prompts wait in state, decoding runs beside bundles.

Why not a UDF: a Python function decodes inside its bundle, and Flink ends every
bundle before a checkpoint barrier. A burst then holds the barrier for the whole
decode, the checkpoint expires and the job restarts (``docs/llm.md``). PyFlink's
``AsyncFunction`` waits for every element at bundle end too.

Here a prompt is written to keyed state (a ``MapState`` entry per source record) when
it arrives and handed to the worker's scheduler (:mod:`flinkai.llm.scheduler`), which
decodes every prompt in flight together on its own thread. ``process_element``
returns at once, so bundles, and the checkpoints behind them, never wait on the
decoder. A processing-time timer per key polls for finished completions every
``llm.poll_ms``; each is emitted and its entry removed in the same call, so an emitted
completion and the state without its prompt belong to the same checkpoint. After a
restore, every prompt still in state is submitted again when its bucket is first
seen; greedy decoding makes the repeat identical. The restored timers do not wake a
bucket on this PyFlink, so with ``buckets`` given each bucket also gets a restore tick
about every second (:mod:`flinkai.operators.keyed`): a job whose input has stopped
still finishes what its state holds.

Keys: ``key`` is a small bucket id (the script hashes the session, or the id, into
``LLM_BUCKETS`` buckets), so one timer serves many prompts, and a session's turns
share a bucket and run in order.

    CREATE TEMPORARY VIEW completed AS
      APPLY OPERATOR 'flinkai.operators.llm.complete' TO prompts
      WITH ('key' = 'bucket', 'payload' = 'payload', 'buckets' = '8',
            'partition' = 'source_partition', 'offset' = 'source_offset');

Output columns: :data:`~flinkai.functions.llm_service.OUTPUT_FIELDS`; a row with
``error_reason`` set is a dead letter.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkai.errors import ConfigError
from flinkai.functions.guard import ErrorPolicy, RowGuard, internal_error_detail
from flinkai.functions.llm_service import OUTPUT_FIELDS, CompletionService, Outcome, Pending
from flinkai.operators.keyed import positive_option, resolve_options

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

    from flinkai.config import Config
    from flinkai.llm.decoder import OnnxDecoder

__all__ = ["CompleteOptions", "complete", "output_type_info", "parse_options"]

_REQUIRED = ("key", "payload")
_OPTIONAL = ("partition", "offset", "buckets")
#: Refresh the metric gauges at most this often (they read scheduler windows).
_METRICS_EVERY_MS = 1000
#: An event-time timer here fires only at the end of a bounded input (the final
#: watermark): processing-time timers do not fire after it, so the operator drains
#: there, waiting for every prompt it holds.
_END_OF_INPUT = 2**63 - 2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompleteOptions:
    """Resolved options of one ``APPLY OPERATOR`` statement."""

    key: str
    payload: str
    partition: str | None = None
    offset: str | None = None
    #: How many bucket keys (``"0"`` .. ``"buckets-1"``) the script computes: each gets a
    #: restore tick (:mod:`flinkai.operators.keyed`). None: no ticks.
    buckets: int | None = None


def parse_options(options: Mapping[str, str]) -> CompleteOptions:
    """Resolve the statement's options.

    Raises:
        ConfigError: A required option is missing, an option is unknown, or
            ``buckets`` is not a positive integer.
    """
    given = resolve_options(options, _REQUIRED, _OPTIONAL)
    raw = given.pop("buckets")
    buckets = None if raw is None else positive_option("buckets", raw, at_most=4096)
    return CompleteOptions(**given, buckets=buckets)  # type: ignore[arg-type]


def complete(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """One completion or dead letter per prompt record (:data:`OUTPUT_FIELDS`).

    Raises:
        ConfigError: Bad options or missing columns.
    """
    from flinkai.operators.context import udf_errors
    from flinkai.operators.keyed import keyed_records

    opts = parse_options(options)
    ticks = [str(b) for b in range(opts.buckets or 0)]
    keyed = keyed_records(
        t_env, table, opts.key, opts.payload, opts.partition, opts.offset, tick_keys=ticks
    )
    out = keyed.process(_make_process_function(udf_errors(t_env)), output_type=output_type_info())
    return t_env.from_data_stream(out.name("flinkai-llm-complete"))


def output_type_info() -> Any:
    """PyFlink's type of an output row (:data:`OUTPUT_FIELDS`)."""
    from pyflink.common import Types

    s, i, d, b = Types.STRING(), Types.INT(), Types.DOUBLE(), Types.LONG()
    types = [s, s, s, i, i, d, d, d, s, s, s, s, s, i, b, s, s]
    return Types.ROW_NAMED(list(OUTPUT_FIELDS), types)


def _make_process_function(udf_errors: ErrorPolicy) -> Any:
    """The ``KeyedProcessFunction``; built here so this module imports without PyFlink."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor

    from flinkai import metrics
    from flinkai.functions.events import payload_base64
    from flinkai.functions.llm import build_store, load_prompt_model
    from flinkai.kafka.deltas import DeltaProducer
    from flinkai.runtime.environment import config_from_function_context

    class _Process(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            config = config_from_function_context(runtime_context)
            llm = config.llm
            # Plain data only (Pending.to_state, lists of ints): no object of this code is pickled.
            self._pending = runtime_context.get_map_state(
                MapStateDescriptor(
                    "flinkai-llm-pending", Types.STRING(), Types.PICKLED_BYTE_ARRAY()
                )
            )
            self._sessions = runtime_context.get_map_state(
                MapStateDescriptor(
                    "flinkai-llm-sessions", Types.STRING(), Types.PICKLED_BYTE_ARRAY()
                )
            )
            self._deltas = (
                DeltaProducer(config.kafka.bootstrap_servers, llm.deltas_topic,
                              config.kafka.security)
                if llm.deltas_topic else None
            )  # fmt: skip
            model = load_prompt_model(config)
            self._adapters, self._feed = _adapter_feed(config, model.decoder)
            self._service = CompletionService(
                config,
                model,
                build_store(config),
                on_deltas=self._deltas.send if self._deltas is not None else None,
                adapters=self._adapters,
            )
            self._service.start()
            self._poll_ms = llm.poll_ms
            self._entries: dict[str, set[str]] = {}  # bucket -> entries held
            self._bucket_of: dict[str, str] = {}  # entry -> its bucket
            self._stash: dict[str, list[Outcome]] = {}  # finished, by bucket, not yet emitted
            self._armed: dict[str, int] = {}  # bucket -> registered timer
            self._drain_armed: set[str] = set()
            self._seen: set[str] = set()  # buckets whose state was read since open()
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard("flinkai-llm", udf_errors, internal.inc)
            self._gauges = {spec.name: metrics.gauge(group, spec) for spec in metrics.LLM_GAUGES}
            self._metrics_at = 0
            # What is loaded now (PyFlink, Beam, the model) lives as long as the worker.
            # Frozen, the collector's full passes skip it: such a pass holds the GIL,
            # so on all the worker's objects it stalled every running sequence's next
            # token (up to 168 ms in an instrumented run).
            gc.collect()
            gc.freeze()

        def close(self) -> None:
            if self._feed is not None:
                self._feed.close()
            self._service.close()
            if self._deltas is not None:
                self._deltas.close()

        # -- arrival ---------------------------------------------------------------

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            bucket = str(value[0])
            if bucket not in self._seen:
                yield from self._restore(bucket)
            if value[4]:  # a restore tick: the bucket is awake now, nothing to accept
                self._arm(ctx, bucket)
                return
            rows = self._guard.rows([value], lambda v: self._accept(bucket, v), self._failed)
            if rows[0] is not None:
                yield Row(*rows[0])
            self._arm(ctx, bucket)

        def _accept(self, bucket: str, value: Row) -> tuple[Any, ...] | None:
            raw = value[1]
            payload = bytes(raw) if isinstance(raw, bytes | bytearray) else _from_text(raw)
            got = self._service.accept(payload, value[2], value[3])
            if isinstance(got, tuple):
                return got
            self._pending.put(got.entry, got.to_state())
            refused = self._service.hold(got)
            if refused is not None:
                self._pending.remove(got.entry)
                return refused
            self._entries.setdefault(bucket, set()).add(got.entry)
            self._bucket_of[got.entry] = bucket
            return None

        def _failed(self, value: Row, exc: Exception) -> tuple[Any, ...]:
            raw = value[1]
            text = payload_base64(bytes(raw)) if isinstance(raw, bytes | bytearray) else raw
            return (None,) * 10 + ("internal_error", internal_error_detail(exc), text,
                                   value[2], value[3], None, None)  # fmt: skip

        def _restore(self, bucket: str) -> Iterator[Row]:
            """First sight of a bucket since open(): hold what its state kept (a restore)."""
            self._seen.add(bucket)
            pendings = [Pending.from_state(v) for _, v in self._pending.items()]
            if not pendings:
                return
            histories = {k: v for k, v in self._sessions.items()}
            held = self._entries.setdefault(bucket, set())
            held.update(p.entry for p in pendings)
            self._bucket_of.update((p.entry, bucket) for p in pendings)
            for p, row in self._service.resume(pendings, histories):
                self._pending.remove(p.entry)
                held.discard(p.entry)
                yield Row(*row)

        def _arm(self, ctx: Any, bucket: str) -> None:
            if bucket in self._armed or not self._entries.get(bucket):
                return
            if bucket not in self._drain_armed:
                ctx.timer_service().register_event_time_timer(_END_OF_INPUT)
                self._drain_armed.add(bucket)
            at = ctx.timer_service().current_processing_time() + self._poll_ms
            ctx.timer_service().register_processing_time_timer(at)
            self._armed[bucket] = at

        # -- completion ------------------------------------------------------------

        def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Row]:
            key = ctx.get_current_key()
            bucket = str(key[0] if isinstance(key, Row | tuple | list) else key)
            self._armed.pop(bucket, None)
            if bucket not in self._seen:
                yield from self._restore(bucket)
            held = self._entries.get(bucket, set())
            for outcome in self._ready(bucket):
                yield Row(*self._emit(outcome, held))
            if timestamp >= _END_OF_INPUT:
                yield from self._drain(bucket, held)
            # A bucket left empty arms no further timer: report now, or the gauges
            # would keep their last throttled values while the worker sits idle.
            self._report(int(time.time() * 1000), force=not held)
            self._arm(ctx, bucket)

        def _ready(self, bucket: str) -> list[Outcome]:
            """This bucket's finished prompts; others' wait for their own bucket's timer.

            One pass over what finished, not over what is held: a backlog of 100,000
            prompts costs nothing per timer.
            """
            for outcome in self._service.finished():
                owner = self._bucket_of.get(outcome.pending.entry, bucket)
                self._stash.setdefault(owner, []).append(outcome)
            return self._stash.pop(bucket, [])

        def _drain(self, bucket: str, held: set[str]) -> Iterator[Row]:
            """End of a bounded input: wait for and emit every prompt this bucket holds."""
            while held:
                time.sleep(self._poll_ms / 1000)
                for outcome in self._ready(bucket):
                    yield Row(*self._emit(outcome, held))

        def _emit(self, outcome: Outcome, held: set[str]) -> tuple[Any, ...]:
            entry = outcome.pending.entry
            self._pending.remove(entry)
            held.discard(entry)
            self._bucket_of.pop(entry, None)
            if outcome.history is not None and outcome.pending.session is not None:
                self._sessions.put(outcome.pending.session, list(outcome.history))
            return outcome.row

        def _report(self, now_ms: int, *, force: bool = False) -> None:
            if not force and now_ms - self._metrics_at < _METRICS_EVERY_MS:
                return
            self._metrics_at = now_ms
            for name, value in self._service.gauges().items():
                self._gauges[name](value)  # the setter rounds

    return _Process()


def _adapter_feed(config: Config, decoder: OnnxDecoder) -> tuple[Any, Any]:
    """The worker's adapter set and its running feed, or (None, None) without a topic.

    Waits up to ``llm.adapters_wait_s`` for the versions committed before start, so a
    restarted worker serves the same versions as the others from its first prompt.

    Raises:
        ConfigError: ``llm.adapters_topic`` is set but the decoder takes no adapters.
    """
    llm = config.llm
    if not llm.adapters_topic:
        return None, None
    from flinkai.kafka.adapter_feed import AdapterFeed
    from flinkai.llm.adapters import AdapterSet

    if decoder.lora is None:
        raise ConfigError(
            f"llm.adapters_topic is set but the decoder {llm.model} has no LoRA inputs: "
            "export one with `flinkai model export-llm --lora-rank 8` and set "
            f"llm.model: {llm.model}-lora-r8"
        )
    adapters = AdapterSet(decoder.lora, decoder.model_version, keep_versions=llm.adapter_versions)
    feed = AdapterFeed(
        config.kafka.bootstrap_servers, llm.adapters_topic, adapters,
        security=config.kafka.security,
    ).start()  # fmt: skip
    if not feed.wait_ready(llm.adapters_wait_s):
        log.warning(
            "adapters topic %s not read to its end within %.0f s; serving what is loaded (%s)",
            llm.adapters_topic, llm.adapters_wait_s, adapters.names(),
        )  # fmt: skip
    return adapters, feed


def _from_text(raw: object) -> bytes | None:
    import base64
    import binascii

    if raw is None:
        return None
    try:
        return base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        return str(raw).encode("utf-8", "surrogatepass")
