"""Risk decisions, keyed by (a bucket of) account: the LangGraph graph inside a Flink job.

The table is converted to a DataStream, keyed by (a bucket of) the account column, and
run through a ``KeyedProcessFunction``. Per account, the whole state is one value
holding :meth:`~flinkai.agents.window.SpendWindow.snapshot`: plain data
(a version tag and the ``[ts_ms, amount]`` pairs of approved spend in the last 24 h
of event time). It is part of every checkpoint and rebuilt on every read, so a
restored job decides each replayed event exactly as the first attempt did. The
models (ONNX Runtime) and the account table are loaded once per worker in ``open()``.

Batches through state, since PyFlink 2.2 gives a ``KeyedProcessFunction`` no hook at the
end of a bundle: ``FunctionOperation.process`` (``pyflink/fn_execution/beam/beam_operations_*``)
calls ``process_element`` once per element, with the element's key already set in the
state backend, and writes that call's outputs before the next element. PyFlink has no
``CheckpointedFunction`` either, so rows held back in Python memory would be lost when a
checkpoint closes the bundle (Flink's checkpoint counts them as done). So with
``buckets`` (the job's setting) the stream is keyed by ``MOD(ABS(HASH_CODE(key)),
buckets)``, computed on the JVM side: all rows of one account share a bucket, in
arrival order. ``process_element`` only appends the row to the bucket's ``ListState``
and, when the buffer was empty, registers a processing-time timer ``flush_ms`` ahead;
``on_timer`` decides the whole buffer with :func:`process_bundle` (one ONNX call per
model; each account's state, an entry of a ``MapState`` in the bucket, read once and
written once), emits the decisions and clears the buffer, in one call, so emitted
decisions and the state without their rows belong to the same checkpoint. After a
restore a bucket's buffer is decided when the bucket is next seen: a row, or a restore
tick (:mod:`flinkai.operators.keyed`; restored timers do not fire here). A bounded
input drains at its final watermark (an event-time timer at the end of time), since
processing-time timers do not fire after it. :func:`process_bundle` decides as
:func:`process_transaction` per event (``tests/unit/test_agents_bundle.py``, the whole
fraud file, also batched by bucket as the timers find it). Without ``buckets`` the
operator is keyed by account and decides each event as it comes (a ``ValueState`` per
account), the earlier wiring, kept for comparison.

Used from a SQL script (the runner's ``APPLY OPERATOR`` statement)::

    CREATE TEMPORARY VIEW decisions AS
      APPLY OPERATOR 'flinkai.operators.agents.decide' TO transactions
      WITH ('key' = 'account_id', 'payload' = 'payload', 'buckets' = '1');

Options:
    key: The account column (events are keyed by it).
    payload: The event's raw bytes (BYTES), or them as base64 (STRING); the operator
        validates them (:mod:`flinkai.agents.transactions`) and dead-letters what fails.
    partition, offset: Optional origin columns, carried to the output as
        ``source_partition``/``source_offset``.
    models: The risk model folder (default ``$FLINKAI_HOME/models/risk``).
    accounts: The account table, a CSV in ``credit_default.csv``'s layout (default
        ``<datasets>/risk/credit_default.csv``).
    buckets: Key by this many buckets of ``key`` and decide each bucket's rows in
        batches (above); without it, per event, keyed by ``key``.
    flush_ms: With ``buckets``: how long a bucket's first buffered row waits for
        others before the batch is decided (default 5).
    runtime: How the graph runs: ``plan`` (default) walks LangGraph's nodes and
        routers directly (:class:`~flinkai.agents.plan.GraphPlan`, without the Pregel
        loop's per-invoke cost); ``langgraph`` runs the compiled graph's ``invoke``.
        Both decide the same.

Output columns (:data:`DECISION_FIELDS`): the decision
(:class:`~flinkai.agents.graph.Decision`; ``reasons`` and ``path`` as arrays of
codes, ``ARRAY<STRING>`` in SQL), then ``error_reason, error_detail`` and the carried columns. An account
missing from the table is a decision (reason ``unknown_account``), not an error. A
row with ``error_reason`` set is a dead letter: ``internal_error`` (an unexpected
exception on this row; with ``runtime.udf_errors: fail`` it fails the task), or
the parser's code when the payload is not a valid transaction.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flinkai.agents.data import Account
from flinkai.agents.graph import RUNTIMES, Decision, RiskGraph, Runtime
from flinkai.agents.transactions import InvalidTransaction, Transaction, parse_transaction
from flinkai.agents.window import SpendWindow
from flinkai.errors import ConfigError
from flinkai.functions.events import payload_base64
from flinkai.functions.guard import ErrorPolicy, RowGuard, internal_error_detail
from flinkai.operators.keyed import positive_option, resolve_options

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = [
    "DECISION_FIELDS",
    "DecideOptions",
    "decide",
    "decision_type_info",
    "keyed_decisions",
    "parse_options",
    "process_bundle",
    "process_transaction",
]

#: Columns of :func:`decide`'s output, in order.
DECISION_FIELDS = (
    "tx_id", "account_id", "ts_ms", "amount", "approved", "reasons", "fraud_score",
    "credit_status", "credit_score", "spend_24h", "credit_limit", "path",
    "graph_version", "fraud_model_version", "credit_model_version",
    "error_reason", "error_detail", "source_partition", "source_offset", "payload_base64",
)  # fmt: skip
_REQUIRED = ("key", "payload")
_BUCKET_COLUMN = "flinkai_risk_bucket"
_OPTIONAL = ("partition", "offset", "models", "accounts", "runtime", "buckets", "flush_ms")
#: A bucket's buffer is decided at once when it holds this many rows, without waiting for
#: its timer (bounds the rows one ONNX call and one state read take).
_MAX_BUFFERED = 1000
#: An event-time timer here fires only at the end of a bounded input (the final
#: watermark): processing-time timers do not fire after it, so the operator drains
#: there (as :mod:`flinkai.operators.llm` does).
_END_OF_INPUT = 2**63 - 2


@dataclass(frozen=True)
class DecideOptions:
    """Resolved options of one ``APPLY OPERATOR`` statement."""

    key: str
    payload: str
    partition: str | None = None
    offset: str | None = None
    models: str | None = None
    accounts: str | None = None
    runtime: Runtime = "plan"
    buckets: int | None = None
    flush_ms: int = 5


def parse_options(options: Mapping[str, str]) -> DecideOptions:
    """Resolve an operator statement's options (see the module docstring).

    Raises:
        ConfigError: A required option is missing, an option is unknown, ``runtime``
            is not one of :data:`~flinkai.agents.graph.RUNTIMES`, or ``buckets`` or
            ``flush_ms`` is not a positive integer.
    """
    given = resolve_options(options, _REQUIRED, _OPTIONAL)
    runtime = given.pop("runtime") or "plan"
    if runtime not in RUNTIMES:
        raise ConfigError(f"option 'runtime' is {runtime!r}; expected one of {list(RUNTIMES)}")
    buckets, flush_ms = given.pop("buckets"), given.pop("flush_ms")
    return DecideOptions(
        **given,  # type: ignore[arg-type]
        runtime=runtime,
        buckets=None if buckets is None else positive_option("buckets", buckets),
        flush_ms=5 if flush_ms is None else positive_option("flush_ms", flush_ms),
    )


def _decode(row: tuple[Any, ...]) -> tuple[Transaction | InvalidTransaction, tuple[Any, ...]]:
    """The parsed payload of ``(key, payload, partition, offset)`` and the carried columns."""
    _key, raw, partition, offset = row
    if isinstance(raw, bytes | bytearray) or raw is None:
        payload = None if raw is None else bytes(raw)
        return parse_transaction(payload), (partition, offset, payload_base64(payload))
    carried = (partition, offset, raw)
    try:
        payload = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as e:
        return InvalidTransaction("invalid_field", f"payload is not base64: {e}"), carried
    return parse_transaction(payload), carried


def _decision_row(d: Decision, carried: tuple[Any, ...]) -> tuple[Any, ...]:
    return (
        d.tx_id, d.account_id, d.ts_ms, d.amount, d.approved, list(d.reasons),
        d.fraud_score, d.credit_status, d.credit_score, d.spend_24h, d.credit_limit,
        list(d.path), d.graph_version, d.fraud_model_version, d.credit_model_version,
        None, None, *carried,
    )  # fmt: skip


def process_transaction(
    stored: Mapping[str, Any] | None,
    row: tuple[Any, ...],
    graph: RiskGraph,
    accounts: Mapping[str, Account],
) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """One event through the graph with its account's state, free of Flink.

    Args:
        stored: The account's :meth:`SpendWindow.snapshot`, or ``None``.
        row: ``(account_id, payload, partition, offset)``; the payload as raw bytes
            or as base64 text.
        graph: The compiled graph with its models.
        accounts: The account table.

    Returns:
        The output row (:data:`DECISION_FIELDS`) and the snapshot to store, or ``None``
        when the state is unchanged (a declined event, a dead letter).
    """
    tx, carried = _decode(row)
    if isinstance(tx, InvalidTransaction):
        return _dead(tx.reason, tx.detail, carried), None
    window = SpendWindow.from_snapshot(stored)
    spend = window.spend(tx.ts_ms)
    d = graph.decide(tx.tx_id, tx.account_id, tx.ts_ms, tx.amount, tx.features,
                     accounts.get(tx.account_id), spend)  # fmt: skip
    return _decision_row(d, carried), (
        window.add(tx.ts_ms, tx.amount).snapshot() if d.approved else None
    )


def process_bundle(
    rows: Sequence[tuple[Any, ...]],
    read: Callable[[str], Mapping[str, Any] | None],
    write: Callable[[str, dict[str, Any]], None],
    graph: RiskGraph,
    accounts: Mapping[str, Account],
    account_keys: bool = False,
) -> list[tuple[Any, ...]]:
    """A bundle of events through the graph in one pass, free of Flink.

    The same decisions as :func:`process_transaction` called on each row in order, with
    the state each call leaves behind (``tests/unit/test_agents_bundle.py`` checks it on
    the whole fraud file), done as vectorised as the graph allows:

    * every valid row's fraud score in one ONNX call, and the credit score of every
      distinct known account in the bundle in one more (the scores depend on the row
      and the account table only, never on state);
    * the rows grouped by key (the account), in arrival order within each key; per key
      the state is read once, the 24 h spend and the graph's walk (LangGraph's nodes
      and routers, the scores passed in) run row by row, since the spend counts only
      the account's earlier *approved* rows, and the state is written once, only if
      an approval changed it.

    Args:
        rows: ``(key, payload, partition, offset)`` as :func:`process_transaction` takes.
        read: The stored snapshot of a key (``None``: none).
        write: Store a key's new snapshot.
        account_keys: Key the state by each valid row's parsed ``account_id`` instead of
            the row's first field (which is then a bucket of accounts, or anything).

    Returns:
        The output rows (:data:`DECISION_FIELDS`), in the order of ``rows``.
    """
    import numpy as np

    out: list[tuple[Any, ...] | None] = [None] * len(rows)
    valid: list[tuple[int, Transaction, tuple[Any, ...]]] = []
    for i, row in enumerate(rows):
        tx, carried = _decode(row)
        if isinstance(tx, InvalidTransaction):
            out[i] = _dead(tx.reason, tx.detail, carried)
        else:
            valid.append((i, tx, carried))
    if not valid:
        return [r for r in out if r is not None]
    fraud = graph.fraud_scores(np.asarray([[*tx.features, tx.amount] for _, tx, _ in valid],
                                          dtype=np.float32))  # fmt: skip
    known = list(dict.fromkeys(tx.account_id for _, tx, _ in valid if tx.account_id in accounts))
    credit: dict[str, float] = {}
    if known:
        x = np.asarray([accounts[a].features for a in known], dtype=np.float32)
        credit = dict(zip(known, graph.credit_scores(x).tolist(), strict=True))
    by_key: dict[str, list[int]] = {}
    for j, (i, _, _) in enumerate(valid):
        tx = valid[j][1]
        by_key.setdefault(tx.account_id if account_keys else rows[i][0], []).append(j)
    for key, members in by_key.items():
        window = SpendWindow.from_snapshot(read(key))
        changed = False
        for j in members:
            i, tx, carried = valid[j]
            d = graph.decide(tx.tx_id, tx.account_id, tx.ts_ms, tx.amount, tx.features,
                             accounts.get(tx.account_id), window.spend(tx.ts_ms),
                             fraud_score=float(fraud[j]),
                             credit_score=credit.get(tx.account_id))  # fmt: skip
            if d.approved:
                window, changed = window.add(tx.ts_ms, tx.amount), True
            out[i] = _decision_row(d, carried)
        if changed:
            write(key, window.snapshot())
    return [r for r in out if r is not None]


def _dead(reason: str, detail: str, carried: tuple[Any, ...]) -> tuple[Any, ...]:
    return (None,) * 15 + (reason, detail, *carried)


def _make_process_function(opts: DecideOptions, udf_errors: ErrorPolicy) -> Any:
    """The ``KeyedProcessFunction``; built here so this module imports without PyFlink."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    from flinkai import metrics
    from flinkai.agents.data import load_accounts
    from flinkai.agents.models import RiskModels

    class _Process(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            # Plain data (SpendWindow.snapshot): no object of this code is pickled.
            self._state = runtime_context.get_state(
                ValueStateDescriptor("flinkai-risk-spend", Types.PICKLED_BYTE_ARRAY())
            )
            models = RiskModels(Path(opts.models).expanduser() if opts.models else None)
            self._graph = RiskGraph.from_models(models, opts.runtime)
            self._accounts = load_accounts(Path(opts.accounts) if opts.accounts else None)
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard("flinkai-risk", udf_errors, internal.inc)

        def _one(self, value: Row) -> tuple[Any, ...]:
            row = tuple(value[i] for i in range(4))
            out, snap = process_transaction(self._state.value(), row, self._graph,
                                            self._accounts)  # fmt: skip
            if snap is not None:
                self._state.update(snap)
            return out

        def _failed(self, value: Row, exc: Exception) -> tuple[Any, ...]:
            raw = value[1]
            text = payload_base64(bytes(raw)) if isinstance(raw, bytes | bytearray) else raw
            carried = (value[2], value[3], text)
            return _dead("internal_error", internal_error_detail(exc), carried)

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            out = self._guard.rows([value], self._one, self._failed)
            yield Row(*out[0])

    return _Process()


def _make_bucket_function(opts: DecideOptions, udf_errors: ErrorPolicy) -> Any:
    """The bucketed ``KeyedProcessFunction`` (``buckets`` given); see the module docstring."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor

    from flinkai import metrics
    from flinkai.agents.data import load_accounts
    from flinkai.agents.models import RiskModels

    class _Bucketed(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            # Plain data only (tuples of bytes/str/int, SpendWindow.snapshot): no object
            # of this code is pickled.
            self._buffer = runtime_context.get_list_state(
                ListStateDescriptor("flinkai-risk-buffer", Types.PICKLED_BYTE_ARRAY())
            )
            self._spend = runtime_context.get_map_state(
                MapStateDescriptor(
                    "flinkai-risk-spend-by-account", Types.STRING(), Types.PICKLED_BYTE_ARRAY()
                )
            )
            models = RiskModels(Path(opts.models).expanduser() if opts.models else None)
            self._graph = RiskGraph.from_models(models, opts.runtime)
            self._accounts = load_accounts(Path(opts.accounts) if opts.accounts else None)
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard("flinkai-risk", udf_errors, internal.inc)
            # Per bucket, in this worker's memory: rows added since its last decision (a
            # trigger only; after a restore the buffer in state may hold more), and
            # whether the end-of-input timer is set. The rows live in Flink state.
            self._held: dict[str, int] = {}
            self._drain_armed: set[str] = set()
            self._primed: set[str] = set()

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            bucket = str(value[0])
            if value[4]:  # a restore tick: decide what the buffer kept, if anything
                if not self._held.get(bucket):
                    yield from self._flush(bucket)
                return
            self._buffer.add((value[1], value[2], value[3]))
            held = self._held.get(bucket, 0) + 1
            self._held[bucket] = held
            if held == 1:
                timers = ctx.timer_service()
                if bucket not in self._drain_armed:
                    timers.register_event_time_timer(_END_OF_INPUT)
                    self._drain_armed.add(bucket)
                timers.register_processing_time_timer(
                    timers.current_processing_time() + opts.flush_ms
                )
            elif held >= _MAX_BUFFERED:
                yield from self._flush(bucket)

        def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Row]:
            key = ctx.get_current_key()
            yield from self._flush(str(key[0] if isinstance(key, Row | tuple | list) else key))

        def _flush(self, bucket: str) -> Iterator[Row]:
            """Decide the bucket's buffer, in arrival order, and empty it."""
            self._held[bucket] = 0
            rows = [(bucket, *r) for r in self._buffer.get()]
            if not rows:
                return
            self._buffer.clear()
            if bucket not in self._primed:
                self._prime()
                self._primed.add(bucket)
            for out in self._guard.batch(rows, self._decide, self._failed):
                yield Row(*out)

        def _prime(self) -> None:
            """Read the bucket's spend map once, whole, on first sight in this worker.

            PyFlink's read cache then holds every account of the bucket and knows it
            does: a later read of an account the map lacks (a first transaction, most of
            them with Zipf-like repeats) is answered in the worker, not by a round trip
            to the JVM. Writes keep the cache whole; it stays so while the bucket's map
            fits ``python.map-state.read-cache-size`` and was, when primed, at most one
            ``python.map-state.iterate-response-batch-size`` (after a restore with more,
            reads of absent accounts go to the JVM, as without priming).
            """
            for _ in self._spend.items():
                pass

        def _decide(self, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            # The new states are stored only once the whole batch is decided: if it
            # raises, the guard decides its rows again one by one from the same state.
            writes: dict[str, dict[str, Any]] = {}
            out = process_bundle(rows, self._spend.get, writes.__setitem__, self._graph,
                                 self._accounts, account_keys=True)  # fmt: skip
            for account, snap in writes.items():
                self._spend.put(account, snap)
            return out

        def _failed(self, row: tuple[Any, ...], exc: Exception) -> tuple[Any, ...]:
            raw = row[1]
            text = payload_base64(bytes(raw)) if isinstance(raw, bytes | bytearray) else raw
            return _dead("internal_error", internal_error_detail(exc), (row[2], row[3], text))

    return _Bucketed()


def decide(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """One decision (or dead letter) per transaction, keyed by account (:data:`DECISION_FIELDS`).

    Raises:
        ConfigError: Bad options or missing columns.
    """
    from flinkai.operators.context import udf_errors

    opts = parse_options(options)
    make = _make_process_function if opts.buckets is None else _make_bucket_function
    return keyed_decisions(t_env, table, opts, make(opts, udf_errors(t_env)))


def keyed_decisions(
    t_env: StreamTableEnvironment, table: Table, opts: DecideOptions, function: Any
) -> Table:
    """The job's wiring: ``table`` keyed by ``opts.key`` into ``function``.

    ``function`` is a ``KeyedProcessFunction`` that takes ``Row(key, payload, partition,
    offset)`` and yields rows of :data:`DECISION_FIELDS`. The key is set on the JVM side:
    PyFlink's ``key_by`` would add a Python operator in front of the exchange just to
    compute it, a second round trip through a Python worker for every event. The
    table is shaped as ``(key, Row(key, payload, partition, offset))``, the layout
    that operator produces, and partitioned on its first field by Flink's own
    ``KeyByKeySelector``. (``flinkai bench agents --floor`` measures both.)

    With ``opts.buckets``, the key is ``MOD(ABS(HASH_CODE(key)), buckets)``, computed on
    the JVM side too: all rows of one account share a bucket, so its order is kept.

    Raises:
        ConfigError: Missing columns.
    """
    from flinkai.operators.keyed import keyed_records

    key = opts.key
    if opts.buckets is not None:
        from pyflink.table.expressions import call_sql

        columns = table.get_resolved_schema().get_column_names()
        if key not in columns:
            raise ConfigError(f"column {key!r} not in the input; it has {columns}")
        key = _BUCKET_COLUMN
        bucket = f"MOD(ABS(HASH_CODE(CAST(`{opts.key}` AS STRING))), {opts.buckets})"
        table = table.add_columns(call_sql(bucket).alias(key))
    ticks = [str(b) for b in range(opts.buckets or 0)]
    keyed = keyed_records(
        t_env, table, key, opts.payload, opts.partition, opts.offset, tick_keys=ticks
    )
    out = keyed.process(function, output_type=decision_type_info())
    return t_env.from_data_stream(out.name("flinkai-risk-decide"))


def decision_type_info() -> Any:
    """PyFlink's type of an output row (:data:`DECISION_FIELDS`)."""
    from pyflink.common import Types

    s, d, b = Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()
    codes = Types.BASIC_ARRAY(Types.STRING())  # reasons, path
    types = [s, s, Types.LONG(), d, b, codes, d, s, d, d, d, codes, s, s, s, s, s,
             Types.INT(), Types.LONG(), s]  # fmt: skip
    return Types.ROW_NAMED(list(DECISION_FIELDS), types)
