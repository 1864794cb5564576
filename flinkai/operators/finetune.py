"""Streaming LoRA fine-tuning as a keyed operator: examples in state, one step per timer.

Examples (``{"id", "instruction", "target"}`` JSON, optional ``"adapter"``) arrive keyed
by the adapter they train, in offset order (one partition). Each valid example is put
into the key's state when it arrives; a bad one is a dead-letter row at once
(:mod:`flinkai.finetune.examples` names the reasons). Training runs from a
processing-time timer, **one optimizer step of ``batch_size`` examples per firing**:
a checkpoint barrier waits for the bundle in progress, so it never waits for more
than one step, however long the backlog.

**One unit of state per adapter**, written in the same timer call that trains:

* ``examples``: a ``MapState`` from arrival number to the example (plain strings);
  a step reads and removes exactly the ``batch_size`` oldest. A ``MapState`` rather
  than a ``ListState``: a ``ListState`` can only be rewritten whole, so every step
  would copy the whole backlog;
* ``trainer``: :meth:`~flinkai.finetune.trainer.LoraTrainer.state_bytes`, the adapter
  weights, AdamW's state, the step count, torch's RNG state and the examples
  consumed, as one blob;
* ``progress``: examples received and consumed (so a timer knows whether a batch is
  ready without reading the blob).

Every ``publish_every`` examples the same call emits the adapter as a new version
(``version = examples consumed / publish_every``): key the adapter's name, value the
``.onnx_adapter`` bytes. The job writes it through the exactly-once Kafka sink, so a
version is visible to ``read_committed`` readers only once the checkpoint holding the
state that produced it completes; a version written by an attempt that failed is
aborted with its transaction and never seen. After a restore, once the key is seen (an
example, or for the default adapter a restore tick, :mod:`flinkai.operators.keyed`:
restored timers do not fire here), the trainer is loaded from the restored blob and the same
examples are trained again in the same order, and training is deterministic, so the
replayed versions are byte for byte the versions the failed attempt wrote.

The worker holds one trainer (one copy of the base model); when a timer fires for
another adapter than the one loaded, it loads that adapter's blob from state.

    CREATE TEMPORARY VIEW trained AS
      APPLY OPERATOR 'flinkai.operators.finetune.train_lora' TO examples
      WITH ('key' = 'adapter', 'payload' = 'payload',
            'partition' = 'source_partition', 'offset' = 'source_offset',
            'publish_every' = '100');

Options: ``key``, ``payload``, ``partition``, ``offset`` as for the other keyed
operators; ``model`` (the serving export folder, with LoRA inputs of the trainer's rank;
default ``export-llm --lora-rank R``'s);
``adapter`` (the name an example without ``"adapter"`` trains; default ``default``);
``publish_every`` (examples per version, a multiple of ``batch_size``; default 100);
``batch_size``, ``learning_rate``, ``rank``, ``alpha``, ``seed``, ``threads``,
``max_tokens`` (:class:`~flinkai.finetune.trainer.TrainerConfig`); ``step_ms`` (delay
of the next step's timer, default 1).

Output columns: :data:`OUTPUT_FIELDS`; a row with ``error_reason`` set is a dead
letter, any other row an adapter version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flinkai.errors import ConfigError
from flinkai.finetune.trainer import TrainerConfig
from flinkai.functions.guard import ErrorPolicy, RowGuard, internal_error_detail
from flinkai.operators.keyed import positive_option, resolve_options

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = ["OUTPUT_FIELDS", "TrainOptions", "output_type_info", "parse_options", "train_lora"]

#: Columns of :func:`train_lora`'s output, in order.
OUTPUT_FIELDS = (
    "adapter", "version", "adapter_bytes", "sha256", "examples", "step", "loss", "base_model",
    "error_reason", "error_detail", "payload_base64", "source_partition", "source_offset",
)  # fmt: skip
_REQUIRED = ("key", "payload")
_OPTIONAL = (
    "partition", "offset", "model", "adapter", "publish_every", "batch_size",
    "learning_rate", "rank", "alpha", "seed", "threads", "max_tokens", "step_ms",
)  # fmt: skip
#: An event-time timer here fires only at the end of a bounded input (the final
#: watermark): processing-time timers do not fire after it, so the operator trains
#: every full batch still held there.
_END_OF_INPUT = 2**63 - 2


@dataclass(frozen=True)
class TrainOptions:
    """Resolved options of one ``APPLY OPERATOR`` statement (see the module docstring)."""

    key: str
    payload: str
    partition: str | None = None
    offset: str | None = None
    model: str | None = None
    adapter: str = "default"
    publish_every: int = 100
    step_ms: int = 1
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


def _number(name: str, text: str | None, default: Any, kind: type[int] | type[float]) -> Any:
    return default if text is None else positive_option(name, text, kind)


def parse_options(options: Mapping[str, str]) -> TrainOptions:
    """Resolve the statement's options.

    Raises:
        ConfigError: A required option is missing, an option is unknown or not a
            positive number, or ``publish_every`` is not a multiple of ``batch_size``.
    """
    given = resolve_options(options, _REQUIRED, _OPTIONAL)
    d = TrainerConfig()
    try:
        trainer = TrainerConfig(
            rank=_number("rank", given["rank"], d.rank, int),
            alpha=_number("alpha", given["alpha"], d.alpha, float),
            learning_rate=_number("learning_rate", given["learning_rate"], d.learning_rate, float),
            batch_size=_number("batch_size", given["batch_size"], d.batch_size, int),
            seed=int(given["seed"]) if given["seed"] is not None else d.seed,
            threads=_number("threads", given["threads"], d.threads, int),
            max_tokens=_number("max_tokens", given["max_tokens"], d.max_tokens, int),
        )
    except ValueError as e:  # the seed, or TrainerConfig's own checks
        raise ConfigError(f"bad trainer options: {e}") from e
    publish_every = _number("publish_every", given["publish_every"], 100, int)
    if publish_every % trainer.batch_size:
        raise ConfigError(
            f"option 'publish_every' is {publish_every}; it must be a multiple of "
            f"batch_size {trainer.batch_size} (a version follows a whole step)"
        )
    return TrainOptions(
        key=str(given["key"]),
        payload=str(given["payload"]),
        partition=given["partition"],
        offset=given["offset"],
        model=given["model"],
        adapter=given["adapter"] or "default",
        publish_every=publish_every,
        step_ms=_number("step_ms", given["step_ms"], 1, int),
        trainer=trainer,
    )


def train_lora(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """Adapter versions and dead letters from a stream of examples (:data:`OUTPUT_FIELDS`).

    Raises:
        ConfigError: Bad options or missing columns.
    """
    from flinkai.operators.context import udf_errors
    from flinkai.operators.keyed import keyed_records

    opts = parse_options(options)
    # The default adapter's key gets restore ticks (flinkai.operators.keyed); other
    # adapters' keys wake on their next example.
    keyed = keyed_records(t_env, table, opts.key, opts.payload, opts.partition, opts.offset,
                          tick_keys=[opts.adapter])  # fmt: skip
    out = keyed.process(_make_process_function(opts, udf_errors(t_env)),
                        output_type=output_type_info())  # fmt: skip
    return t_env.from_data_stream(out.name("flinkai-finetune-lora"))


def output_type_info() -> Any:
    """PyFlink's type of an output row (:data:`OUTPUT_FIELDS`)."""
    from pyflink.common import Types

    s, i, b, d = Types.STRING(), Types.INT(), Types.LONG(), Types.DOUBLE()
    raw = Types.PRIMITIVE_ARRAY(Types.BYTE())
    types = [s, i, raw, s, b, b, d, s, s, s, s, i, b]
    return Types.ROW_NAMED(list(OUTPUT_FIELDS), types)


def _dead(reason: str, detail: str, payload: str | None, partition: Any, offset: Any) -> tuple:
    return (None,) * 8 + (reason, detail, payload, partition, offset)


def _make_process_function(opts: TrainOptions, udf_errors: ErrorPolicy) -> Any:
    """The ``KeyedProcessFunction``; built here so this module imports without PyFlink."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

    from flinkai import metrics
    from flinkai.finetune.base import load_base
    from flinkai.finetune.examples import (
        BadExample,
        EncodedExample,
        Example,
        encode_example,
        parse_example,
    )
    from flinkai.finetune.trainer import LoraTrainer
    from flinkai.functions.events import payload_base64

    batch = opts.trainer.batch_size

    class _Train(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            # Plain data only (strings, ints, bytes): no object of this code is pickled.
            self._examples = runtime_context.get_map_state(
                MapStateDescriptor(
                    "flinkai-finetune-examples", Types.LONG(), Types.PICKLED_BYTE_ARRAY()
                )
            )
            self._progress = runtime_context.get_state(
                ValueStateDescriptor("flinkai-finetune-progress", Types.PICKLED_BYTE_ARRAY())
            )
            self._blob = runtime_context.get_state(
                ValueStateDescriptor("flinkai-finetune-trainer", Types.PICKLED_BYTE_ARRAY())
            )
            self._base = load_base(opts.model, opts.trainer.rank, opts.trainer.modules)
            self._trainer = LoraTrainer(self._base.model, self._base.model_version, opts.trainer)
            # The untrained state: what an adapter without a blob starts from.
            self._initial = self._trainer.state_bytes()
            self._loaded: str | None = None  # the adapter whose state the trainer holds
            self._armed: set[str] = set()
            self._drain_armed: set[str] = set()
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard("flinkai-finetune", udf_errors, internal.inc)

        # -- arrival ---------------------------------------------------------------

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            key = str(value[0])
            if value[4]:  # a restore tick: train on what the state kept, if a batch is due
                if self._ready(key):
                    self._arm(ctx, key)
                return
            rows = self._guard.rows([value], lambda v: self._accept(key, v), self._failed)
            if rows[0] is not None:
                yield Row(*rows[0])
            if self._ready(key):
                self._arm(ctx, key)

        def _accept(self, key: str, value: Row) -> tuple[Any, ...] | None:
            payload = _payload(value[1])
            text = payload_base64(payload)
            got = parse_example(payload, opts.adapter)
            if isinstance(got, Example) and got.adapter != key:
                got = BadExample("invalid_adapter",
                                 f"adapter {got.adapter!r} is not the record's key {key!r}")  # fmt: skip
            if isinstance(got, Example):
                encoded = encode_example(self._base.tokenizer, got, self._base.stop_id,
                                         opts.trainer.max_tokens)  # fmt: skip
                if isinstance(encoded, BadExample):
                    got = encoded
            if isinstance(got, BadExample):
                return _dead(got.reason, got.detail, text, value[2], value[3])
            progress = self._progress.value() or {"received": 0, "consumed": 0}
            self._examples.put(progress["received"], got.to_state())
            progress["received"] += 1
            self._progress.update(progress)
            return None

        def _failed(self, value: Row, exc: Exception) -> tuple[Any, ...]:
            return _dead("internal_error", internal_error_detail(exc),
                         payload_base64(_payload(value[1])), value[2], value[3])  # fmt: skip

        def _arm(self, ctx: Any, key: str) -> None:
            timers = ctx.timer_service()
            if key not in self._drain_armed:
                timers.register_event_time_timer(_END_OF_INPUT)
                self._drain_armed.add(key)
            if key not in self._armed:
                timers.register_processing_time_timer(
                    timers.current_processing_time() + opts.step_ms
                )
                self._armed.add(key)

        # -- training --------------------------------------------------------------

        def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Row]:
            key = ctx.get_current_key()
            key = str(key[0] if isinstance(key, Row | tuple | list) else key)
            if timestamp >= _END_OF_INPUT:
                # End of a bounded input: train every full batch still held.
                while self._ready(key):
                    yield from self._step(key)
                return
            self._armed.discard(key)
            if self._ready(key):
                yield from self._step(key)
            if self._ready(key):
                self._arm(ctx, key)

        def _ready(self, key: str) -> bool:
            """Whether the key holds a full batch of examples not yet trained."""
            progress = self._progress.value() or {}
            return int(progress.get("received", 0)) - int(progress.get("consumed", 0)) >= batch

        def _step(self, key: str) -> Iterator[Row]:
            """One optimizer step on the key's oldest batch; yields a version when one is due."""
            progress = self._progress.value()
            consumed = int(progress["consumed"])
            trainer = self._trainer_for(key, consumed)
            seqs = range(consumed, consumed + batch)
            examples = [Example.from_state(self._examples.get(s)) for s in seqs]
            encoded = [encode_example(self._base.tokenizer, e, self._base.stop_id,
                                      opts.trainer.max_tokens) for e in examples]  # fmt: skip
            ready = [e for e in encoded if isinstance(e, EncodedExample)]
            if len(ready) != batch:  # checked on arrival with the same tokenizer and limit
                raise RuntimeError(f"examples {list(seqs)} of {key!r} no longer encode")
            loss = trainer.train_step(ready)
            # Examples out, trainer and progress in, version out: all in this one call,
            # so one checkpoint holds all of it or none.
            for s in seqs:
                self._examples.remove(s)
            self._blob.update(trainer.state_bytes())
            progress["consumed"] = trainer.consumed
            self._progress.update(progress)
            if trainer.consumed % opts.publish_every:
                return
            version = trainer.consumed // opts.publish_every
            data = trainer.adapter(key, version).encode()
            yield Row(key, version, data, hashlib.sha256(data).hexdigest(), trainer.consumed,
                      trainer.step, loss, trainer.base_model, None, None, None, None, None)  # fmt: skip

        def _trainer_for(self, key: str, consumed: int) -> LoraTrainer:
            """The trainer holding ``key``'s state (loaded from Flink state if it does not)."""
            trainer = self._trainer
            if self._loaded == key and trainer.consumed == consumed:
                return trainer
            blob = self._blob.value()
            trainer.load_state_bytes(self._initial if blob is None else bytes(blob))
            self._loaded = key
            if trainer.consumed != consumed:
                raise RuntimeError(
                    f"the trainer state of {key!r} consumed {trainer.consumed} examples, "
                    f"its progress says {consumed}"
                )
            return trainer

    return _Train()


def _payload(raw: object) -> bytes | None:
    """The record's bytes: BYTES as is, STRING as base64 (or its UTF-8 if it is not)."""
    import base64
    import binascii

    if raw is None or isinstance(raw, bytes | bytearray):
        return None if raw is None else bytes(raw)
    try:
        return base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        return str(raw).encode("utf-8", "surrogatepass")
