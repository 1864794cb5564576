"""SQL function for validating raw feature events ``{"id": ..., "features": [...]}``.

CREATE TEMPORARY FUNCTION parse_feature_event AS 'feature_events.parse_feature_event' LANGUAGE PYTHON;

Returns ROW<id STRING, features ARRAY<FLOAT>, error_reason STRING, error_detail STRING,
payload_base64 STRING>: the event, or NULLs, the reason for the dead-letter topic and
the exact payload in base64.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import Invalid, payload_base64
from flinkai.functions.feature_events import FeatureEvent
from flinkai.functions.feature_events import parse_feature_event as _parse
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["parse_feature_event"]

# payload_base64 for invalid events only; see CLICK_ROW in events.py
FEATURE_EVENT_ROW = dead_letter_row(
    DataTypes.FIELD("id", DataTypes.STRING()),
    DataTypes.FIELD("features", DataTypes.ARRAY(DataTypes.FLOAT())),
)


def _row(payload: bytes | None) -> tuple[object, ...]:
    result = _parse(payload)
    if isinstance(result, FeatureEvent):
        return (result.id, result.features, None, None, None)
    assert isinstance(result, Invalid)
    return (None, None, result.reason.value, result.detail, payload_base64(payload))


class _ParseFeatureEvent(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._guard = row_guard(function_context, config, "parse_feature_event")

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = self._guard.rows(list(payloads), _row, lambda p, e: internal_error_row(2, e, p))
        return pd.DataFrame(rows, columns=[f.name for f in FEATURE_EVENT_ROW.fields])


parse_feature_event = udf(_ParseFeatureEvent(), result_type=FEATURE_EVENT_ROW, func_type="pandas")
