"""Floor operators for ``flinkai bench agents --floor``: the decision job with work removed.

Each factory has the signature of :func:`flinkai.operators.agents.decide` and the same
options, output columns and wiring (:func:`~flinkai.operators.agents.keyed_decisions`),
so ``jobs/risk_decisions.sql`` runs unchanged with one of them named instead:

* :func:`fixed`: parses and validates the payload (the production parser), then emits a
  fixed decision: no keyed state, no graph, no models;
* :func:`state_only`: :func:`fixed` plus the account's ``ValueState`` read and write
  (the same descriptor and snapshot layout as the real operator);
* :func:`fixed_python_key`: :func:`fixed` keyed by PyFlink's ``key_by`` (a Python key
  selector, an extra Python operator in front of the exchange), the wiring the real
  operator had before it keyed on the JVM side;
* :func:`decide_python_key`: the real operator's function with that previous wiring;
* :func:`decide_langgraph`: the real operator with ``'runtime' = 'langgraph'``: the
  graph run by LangGraph's compiled ``invoke`` (its Pregel loop) instead of the default
  plan runtime (:class:`~flinkai.agents.plan.GraphPlan`), to measure what that loop
  costs inside the job;
* :func:`decide_per_event`: the real operator without ``buckets``: keyed by account,
  each event decided as it comes (a ``ValueState`` per account), the job's operator
  before it batched by bucket.

:func:`fixed` keeps the script's ``buckets`` (the same keying as the job; it holds no
state and emits per event); the other stand-ins drop it and key by account, as
they measure per-event keyed state.

The real operator (default runtime) is the last step. Bench code only: the stand-ins
decide nothing, and :func:`decide_langgraph` is the production operator with one option.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from flinkai.agents.transactions import InvalidTransaction, parse_transaction
from flinkai.agents.window import SpendWindow
from flinkai.errors import ConfigError
from flinkai.functions.events import payload_base64
from flinkai.operators.agents import decide, decision_type_info, keyed_decisions, parse_options

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = [
    "decide_langgraph",
    "decide_per_event",
    "decide_python_key",
    "fixed",
    "fixed_python_key",
    "floor_row",
    "state_only",
]

FLOOR_CODE = "floor"


def floor_row(value: Any, spend: float = 0.0) -> tuple[tuple[Any, ...], Any]:
    """The fixed decision for ``Row(key, payload, partition, offset)`` (or a dead letter).

    Returns:
        The output row and the parsed transaction (``None`` for a dead letter).
    """
    raw = value[1]
    payload = None if raw is None else bytes(raw)
    carried = (value[2], value[3], payload_base64(payload))
    tx = parse_transaction(payload)
    if isinstance(tx, InvalidTransaction):
        return (*(None,) * 15, tx.reason, tx.detail, *carried), None
    out = (tx.tx_id, tx.account_id, tx.ts_ms, tx.amount, True, [FLOOR_CODE], 0.0,
           "not_checked", None, spend, None, [FLOOR_CODE], FLOOR_CODE, FLOOR_CODE, FLOOR_CODE,
           None, None, *carried)  # fmt: skip
    return out, tx


def _function(with_state: bool) -> Any:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    class _Floor(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self._state = runtime_context.get_state(
                ValueStateDescriptor("flinkai-risk-spend", Types.PICKLED_BYTE_ARRAY())
            )

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            if not with_state:
                yield Row(*floor_row(value)[0])
                return
            window = SpendWindow.from_snapshot(self._state.value())
            out, tx = floor_row(value)
            if tx is not None:
                spend = window.spend(tx.ts_ms)
                out = (*out[:9], spend, *out[10:])
                self._state.update(window.add(tx.ts_ms, tx.amount).snapshot())
            yield Row(*out)

    return _Floor()


def decide_langgraph(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """The real operator with ``'runtime' = 'langgraph'`` (LangGraph's Pregel invoke)."""
    return decide(t_env, table, {**options, "runtime": "langgraph"})


def decide_per_event(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """The real operator keyed by account, per event (no ``buckets``)."""
    return decide(t_env, table, _per_account(options))


def _per_account(options: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in options.items() if k not in ("buckets", "flush_ms")}


def fixed(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """Step (a): parse, then a fixed decision; no state, no graph."""
    return keyed_decisions(t_env, table, parse_options(options), _function(False))


def state_only(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """Step (b): :func:`fixed` plus the keyed ``ValueState`` read and write."""
    return keyed_decisions(t_env, table, parse_options(_per_account(options)), _function(True))


def fixed_python_key(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """:func:`fixed` keyed by PyFlink's ``key_by`` with a Python key selector."""
    return _python_keyed(t_env, table, options, _function(False))


def decide_python_key(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """The real operator's function, keyed by PyFlink's ``key_by`` (its previous wiring)."""
    from flinkai.operators.agents import _make_process_function
    from flinkai.operators.context import udf_errors

    opts = parse_options(_per_account(options))
    return _python_keyed(t_env, table, options, _make_process_function(opts, udf_errors(t_env)))


def _python_keyed(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str], function: Any
) -> Table:
    from pyflink.common import Types
    from pyflink.table.expressions import col

    opts = parse_options(options)
    if not (opts.partition and opts.offset):
        raise ConfigError("fixed_python_key needs the 'partition' and 'offset' options")
    rows = t_env.to_data_stream(
        table.select(col(opts.key), col(opts.payload), col(opts.partition), col(opts.offset))
    )
    out = rows.key_by(lambda r: str(r[0]), key_type=Types.STRING()).process(
        function, output_type=decision_type_info()
    )
    return t_env.from_data_stream(out)
