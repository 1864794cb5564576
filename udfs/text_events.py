"""SQL function for validating raw text events ``{stream_id, text, event_time}``.

CREATE TEMPORARY FUNCTION parse_text_event AS 'text_events.parse_text_event' LANGUAGE PYTHON;

Returns ROW<stream_id STRING, text STRING, event_ms BIGINT, error_reason STRING,
error_detail STRING>: the event with its time as epoch milliseconds, or NULLs and
the reason (the same codes as ``parse_click``) for the dead-letter topic.
"""

import json
from datetime import datetime

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import ClickEvent, Invalid, parse_click
from flinkai.runtime.environment import config_from_function_context

__all__ = ["parse_text_event", "parse_text_events"]

TEXT_EVENT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("stream_id", DataTypes.STRING()),
        DataTypes.FIELD("text", DataTypes.STRING()),
        DataTypes.FIELD("event_ms", DataTypes.BIGINT()),
        DataTypes.FIELD("error_reason", DataTypes.STRING()),
        DataTypes.FIELD("error_detail", DataTypes.STRING()),
    ]
)

# Field names of a text event -> those of a click event, whose validation is reused.
_RENAMES = {"stream_id": "user_id", "text": "click_text"}


def _one(payload: bytes | None, max_text_bytes: int) -> tuple[object, ...]:
    remapped = payload
    try:
        obj = json.loads(payload) if payload else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        obj = None  # parse_click below reports the exact reason
    if isinstance(obj, dict):
        for ours, theirs in _RENAMES.items():
            obj[theirs] = obj.pop(ours, None)
        remapped = json.dumps(obj).encode()
    result = parse_click(remapped, max_text_bytes)
    if isinstance(result, ClickEvent):
        ms = round(datetime.fromisoformat(result.event_time).timestamp() * 1000)
        return (result.user_id, result.click_text, ms, None, None)
    assert isinstance(result, Invalid)
    detail = result.detail
    for ours, theirs in _RENAMES.items():
        detail = detail.replace(theirs, ours)
    return (None, None, None, result.reason.value, detail)


def parse_text_events(payloads: list[bytes | None], max_text_bytes: int) -> pd.DataFrame:
    """Validate a batch of raw text events (one Arrow batch).

    Args:
        payloads: Raw Kafka record values.
        max_text_bytes: Longest accepted text, in UTF-8 bytes.

    Returns:
        One row per payload with the columns of ``TEXT_EVENT_ROW``.
    """
    rows = [_one(p, max_text_bytes) for p in payloads]
    frame = pd.DataFrame(rows, columns=[f.name for f in TEXT_EVENT_ROW.fields])
    # Python ints and None (object dtype): a float column would lose precision and
    # pandas' nullable Int64 is rejected by PyFlink's Arrow conversion.
    frame["event_ms"] = pd.Series([r[2] for r in rows], dtype=object)
    return frame


class _ParseTextEvent(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        self._max_text_bytes = config_from_function_context(
            function_context
        ).embedding.max_text_bytes

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        return parse_text_events(list(payloads), self._max_text_bytes)


parse_text_event = udf(_ParseTextEvent(), result_type=TEXT_EVENT_ROW, func_type="pandas")
