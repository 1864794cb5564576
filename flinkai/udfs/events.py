"""SQL functions for validating raw Kafka events.

CREATE TEMPORARY FUNCTION parse_click AS 'events.parse_click' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION to_base64_bytes AS 'events.to_base64_bytes' LANGUAGE PYTHON;

parse_click returns ROW<user_id, click_text, event_time, error_reason, error_detail,
payload_base64>: the event, or NULLs, the dead-letter reason and the exact payload.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import ClickEvent, payload_base64
from flinkai.functions.events import parse_click as _parse_click
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["parse_click", "to_base64_bytes"]

# payload_base64 is set for invalid events only: their payload may not even be UTF-8,
# and SQL cannot base64 raw bytes. Valid payloads are UTF-8, so a job dead-lettering one
# later (the model failed) encodes it with TO_BASE64(CAST(payload AS STRING)).
CLICK_ROW = dead_letter_row(
    DataTypes.FIELD("user_id", DataTypes.STRING()),
    DataTypes.FIELD("click_text", DataTypes.STRING()),
    DataTypes.FIELD("event_time", DataTypes.STRING()),
)


class _ParseClick(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._max_text_bytes = config.embedding.max_text_bytes
        self._guard = row_guard(function_context, config, "parse_click")

    def _row(self, payload: bytes | None) -> tuple[object, ...]:
        r = _parse_click(payload, self._max_text_bytes)
        if isinstance(r, ClickEvent):
            return (r.user_id, r.click_text, r.event_time, None, None, None)
        return (None, None, None, r.reason.value, r.detail, payload_base64(payload))

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = self._guard.rows(list(payloads), self._row, lambda p, e: internal_error_row(3, e, p))
        return pd.DataFrame(rows, columns=[f.name for f in CLICK_ROW.fields])


parse_click = udf(_ParseClick(), result_type=CLICK_ROW, func_type="pandas")


@udf(result_type=DataTypes.STRING(), func_type="pandas")
def to_base64_bytes(payloads: pd.Series) -> pd.Series:
    """Raw bytes as base64, so a dead-letter record keeps the exact payload (even non-UTF-8)."""
    return pd.Series([payload_base64(p) for p in payloads], dtype=object)
