"""SQL functions for validating raw Kafka events.

CREATE TEMPORARY FUNCTION parse_click AS 'events.parse_click' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION to_base64_bytes AS 'events.to_base64_bytes' LANGUAGE PYTHON;
"""

import base64

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import ClickEvent, parse_clicks
from flinkai.runtime.environment import config_from_function_context

__all__ = ["parse_click", "to_base64_bytes"]

CLICK_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("user_id", DataTypes.STRING()),
        DataTypes.FIELD("click_text", DataTypes.STRING()),
        DataTypes.FIELD("event_time", DataTypes.STRING()),
        DataTypes.FIELD("error_reason", DataTypes.STRING()),
        DataTypes.FIELD("error_detail", DataTypes.STRING()),
    ]
)


class _ParseClick(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        self._max_text_bytes = config_from_function_context(
            function_context
        ).embedding.max_text_bytes

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = []
        for r in parse_clicks(payloads, self._max_text_bytes):
            if isinstance(r, ClickEvent):
                rows.append((r.user_id, r.click_text, r.event_time, None, None))
            else:
                rows.append((None, None, None, r.reason.value, r.detail))
        return pd.DataFrame(rows, columns=[f.name for f in CLICK_ROW.fields])


parse_click = udf(_ParseClick(), result_type=CLICK_ROW, func_type="pandas")


@udf(result_type=DataTypes.STRING())
def to_base64_bytes(payload: bytes | None) -> str | None:
    """Raw bytes as base64, so a dead-letter record keeps the exact payload (even non-UTF-8)."""
    return None if payload is None else base64.b64encode(payload).decode("ascii")
