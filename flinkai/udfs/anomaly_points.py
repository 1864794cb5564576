"""SQL function for validating raw time-series points ``{series, ts, value}``.

CREATE TEMPORARY FUNCTION parse_point AS 'anomaly_points.parse_point' LANGUAGE PYTHON;

Returns ROW<series STRING, ts_ms BIGINT, `value` DOUBLE, error_reason STRING,
error_detail STRING, payload_base64 STRING>: the point, or NULLs and the dead-letter
reason (:mod:`flinkai.anomaly.points`); the exact payload as base64 in both cases.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.anomaly.points import Point
from flinkai.anomaly.points import parse_point as _parse_point
from flinkai.functions.events import payload_base64
from flinkai.functions.guard import RowGuard
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["parse_point", "parse_points"]

POINT_ROW = dead_letter_row(
    DataTypes.FIELD("series", DataTypes.STRING()),
    DataTypes.FIELD("ts_ms", DataTypes.BIGINT()),
    DataTypes.FIELD("value", DataTypes.DOUBLE()),
)


def _one(payload: bytes | None) -> tuple[object, ...]:
    r = _parse_point(payload)
    if isinstance(r, Point):
        # The payload travels with valid points too: the operator may still reject
        # one (out of order) and its dead letter must carry the exact bytes.
        return (r.series, r.ts_ms, r.value, None, None, payload_base64(payload))
    return (None, None, None, r.reason, r.detail, payload_base64(payload))


def parse_points(payloads: list[bytes | None], guard: RowGuard | None = None) -> pd.DataFrame:
    """Validate a batch of raw points (one Arrow batch).

    Args:
        payloads: Raw Kafka record values.
        guard: Turns a row's unexpected exception into an ``internal_error`` row.

    Returns:
        One row per payload with the columns of ``POINT_ROW``.
    """
    guard = guard or RowGuard("parse_point")
    rows = guard.rows(payloads, _one, lambda p, e: internal_error_row(3, e, p))
    frame = pd.DataFrame(rows, columns=[f.name for f in POINT_ROW.fields])
    # Python ints and None (object dtype): a float column would lose precision and
    # pandas' nullable Int64 is rejected by PyFlink's Arrow conversion.
    frame["ts_ms"] = pd.Series([r[1] for r in rows], dtype=object)
    return frame


class _ParsePoint(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._guard = row_guard(function_context, config, "parse_point")

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        return parse_points(list(payloads), self._guard)


parse_point = udf(_ParsePoint(), result_type=POINT_ROW, func_type="pandas")
