"""SQL function for validating raw text events ``{stream_id, text, event_time}``.

CREATE TEMPORARY FUNCTION parse_text_event AS 'text_events.parse_text_event' LANGUAGE PYTHON;

Returns ROW<stream_id STRING, text STRING, event_ms BIGINT, error_reason STRING,
error_detail STRING>: the event with its time as epoch milliseconds, or NULLs and
the reason (the same codes as ``parse_click``) for the dead-letter topic.
"""

from datetime import datetime

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import ClickEvent, Invalid, decode_object, validate_click
from flinkai.functions.guard import RowGuard
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["parse_text_event", "parse_text_events"]

TEXT_EVENT_ROW = dead_letter_row(
    DataTypes.FIELD("stream_id", DataTypes.STRING()),
    DataTypes.FIELD("text", DataTypes.STRING()),
    DataTypes.FIELD("event_ms", DataTypes.BIGINT()),
    payload=False,
)

# Field names of a text event -> those of a click event, whose validation is reused.
_RENAMES = {"stream_id": "user_id", "text": "click_text"}


def _one(payload: bytes | None, max_text_bytes: int) -> tuple[object, ...]:
    obj = decode_object(payload)
    result: ClickEvent | Invalid
    if isinstance(obj, Invalid):
        result = obj
    else:
        renamed = {_RENAMES.get(k, k): v for k, v in obj.items() if k not in _RENAMES.values()}
        result = validate_click(renamed, max_text_bytes)
    if isinstance(result, ClickEvent):
        ms = round(datetime.fromisoformat(result.event_time).timestamp() * 1000)
        return (result.user_id, result.click_text, ms, None, None)
    detail = result.detail
    for ours, theirs in _RENAMES.items():
        detail = detail.replace(theirs, ours)
    return (None, None, None, result.reason.value, detail)


def parse_text_events(
    payloads: list[bytes | None], max_text_bytes: int, guard: RowGuard | None = None
) -> pd.DataFrame:
    """Validate a batch of raw text events (one Arrow batch).

    Args:
        payloads: Raw Kafka record values.
        max_text_bytes: Longest accepted text, in UTF-8 bytes.
        guard: Turns a row's unexpected exception into an ``internal_error`` row.

    Returns:
        One row per payload with the columns of ``TEXT_EVENT_ROW``.
    """
    guard = guard or RowGuard("parse_text_event")
    rows = guard.rows(
        payloads,
        lambda p: _one(p, max_text_bytes),
        lambda _, e: internal_error_row(3, e, with_payload=False),
    )
    frame = pd.DataFrame(rows, columns=[f.name for f in TEXT_EVENT_ROW.fields])
    # Python ints and None (object dtype): a float column would lose precision and
    # pandas' nullable Int64 is rejected by PyFlink's Arrow conversion.
    frame["event_ms"] = pd.Series([r[2] for r in rows], dtype=object)
    return frame


class _ParseTextEvent(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._max_text_bytes = config.embedding.max_text_bytes
        self._guard = row_guard(function_context, config, "parse_text_event")

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        return parse_text_events(list(payloads), self._max_text_bytes, self._guard)


parse_text_event = udf(_ParseTextEvent(), result_type=TEXT_EVENT_ROW, func_type="pandas")
