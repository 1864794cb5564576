"""SQL function for validating raw transaction events (the risk decision job).

CREATE TEMPORARY FUNCTION parse_transaction AS 'risk_transactions.parse_transaction'
  LANGUAGE PYTHON;

Returns ROW<tx_id STRING, account_id STRING, ts_ms BIGINT, amount DOUBLE,
error_reason STRING, error_detail STRING, payload_base64 STRING>: the event's keys,
or NULLs and the dead-letter reason (:mod:`flinkai.agents.transactions`); the exact
payload as base64 in both cases (the operator reads the features from it).
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.agents.transactions import Transaction
from flinkai.agents.transactions import parse_transaction as _parse
from flinkai.functions.events import payload_base64
from flinkai.functions.guard import RowGuard
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["parse_transaction", "parse_transactions"]

TRANSACTION_ROW = dead_letter_row(
    DataTypes.FIELD("tx_id", DataTypes.STRING()),
    DataTypes.FIELD("account_id", DataTypes.STRING()),
    DataTypes.FIELD("ts_ms", DataTypes.BIGINT()),
    DataTypes.FIELD("amount", DataTypes.DOUBLE()),
)


def _one(payload: bytes | None) -> tuple[object, ...]:
    r = _parse(payload)
    if isinstance(r, Transaction):
        return (r.tx_id, r.account_id, r.ts_ms, r.amount, None, None, payload_base64(payload))
    return (None, None, None, None, r.reason, r.detail, payload_base64(payload))


def parse_transactions(payloads: list[bytes | None], guard: RowGuard | None = None) -> pd.DataFrame:
    """Validate a batch of raw transactions (one Arrow batch); one row per payload."""
    guard = guard or RowGuard("parse_transaction")
    rows = guard.rows(payloads, _one, lambda p, e: internal_error_row(4, e, p))
    frame = pd.DataFrame(rows, columns=[f.name for f in TRANSACTION_ROW.fields])
    # Python ints and None (object dtype): a float column would lose precision.
    frame["ts_ms"] = pd.Series([r[2] for r in rows], dtype=object)
    return frame


class _ParseTransaction(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._guard = row_guard(function_context, config, "parse_transaction")

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        return parse_transactions(list(payloads), self._guard)


parse_transaction = udf(_ParseTransaction(), result_type=TRANSACTION_ROW, func_type="pandas")
