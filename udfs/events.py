"""SQL functions for validating raw Kafka events.

CREATE TEMPORARY FUNCTION parse_click AS 'events.parse_click' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION to_base64_bytes AS 'events.to_base64_bytes' LANGUAGE PYTHON;

parse_click returns ROW<user_id, click_text, event_time, error_reason, error_detail,
payload_base64>: the event, or NULLs, the dead-letter reason and the exact payload.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import ClickEvent, parse_clicks, payload_base64
from flinkai.runtime.environment import config_from_function_context

__all__ = ["parse_click", "to_base64_bytes"]

CLICK_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("user_id", DataTypes.STRING()),
        DataTypes.FIELD("click_text", DataTypes.STRING()),
        DataTypes.FIELD("event_time", DataTypes.STRING()),
        DataTypes.FIELD("error_reason", DataTypes.STRING()),
        DataTypes.FIELD("error_detail", DataTypes.STRING()),
        # Set for invalid events only: their payload may not even be UTF-8, and SQL
        # cannot base64 raw bytes. Valid payloads are UTF-8, so a job dead-lettering one
        # later (the model failed) encodes it with TO_BASE64(CAST(payload AS STRING)).
        DataTypes.FIELD("payload_base64", DataTypes.STRING()),
    ]
)


class _ParseClick(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        self._max_text_bytes = config_from_function_context(
            function_context
        ).embedding.max_text_bytes

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = []
        for payload, r in zip(payloads, parse_clicks(payloads, self._max_text_bytes), strict=True):
            if isinstance(r, ClickEvent):
                rows.append((r.user_id, r.click_text, r.event_time, None, None, None))
            else:
                rows.append((None, None, None, r.reason.value, r.detail, payload_base64(payload)))
        return pd.DataFrame(rows, columns=[f.name for f in CLICK_ROW.fields])


parse_click = udf(_ParseClick(), result_type=CLICK_ROW, func_type="pandas")


@udf(result_type=DataTypes.STRING(), func_type="pandas")
def to_base64_bytes(payloads: pd.Series) -> pd.Series:
    """Raw bytes as base64, so a dead-letter record keeps the exact payload (even non-UTF-8)."""
    return pd.Series([payload_base64(p) for p in payloads], dtype=object)
