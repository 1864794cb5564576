"""The parse functions' result ROWs: own fields, then the shared dead-letter columns.

The SQL jobs select these columns by name and position, so the names and their order
are pinned here; ``dead_letter_row`` builds the tail of each.
"""

from __future__ import annotations

import pytest

from flinkai.functions.events import Reason
from flinkai.runtime.udf import dead_letter_row, internal_error_row
from flinkai.udfs import anomaly_points, events, feature_events, llm, rag, text_events

DEAD_LETTER = ["error_reason", "error_detail", "payload_base64"]


@pytest.mark.parametrize(
    ("row", "own"),
    [
        (events.CLICK_ROW, ["user_id", "click_text", "event_time"]),
        (anomaly_points.POINT_ROW, ["series", "ts_ms", "value"]),
        (feature_events.FEATURE_EVENT_ROW, ["id", "features"]),
        (llm.PROMPT_ROW, ["id", "prompt"]),
        (rag.DOC_EVENT_ROW, ["doc_id", "op", "version", "text"]),
        (rag.QUESTION_ROW, ["id", "question"]),
    ],
)
def test_parse_rows_end_with_the_dead_letter_columns(row: object, own: list[str]) -> None:
    assert [f.name for f in row.fields] == own + DEAD_LETTER  # type: ignore[attr-defined]


def test_text_event_row_has_no_payload_column() -> None:
    names = [f.name for f in text_events.TEXT_EVENT_ROW.fields]
    assert names == ["stream_id", "text", "event_ms", "error_reason", "error_detail"]
    assert [f.name for f in dead_letter_row(payload=False).fields] == DEAD_LETTER[:2]


def test_internal_error_row_fills_the_dead_letter_columns() -> None:
    row = internal_error_row(2, ValueError("bad"), b"\xff\x00")
    assert row == (None, None, Reason.INTERNAL_ERROR.value, "ValueError: bad", "/wA=")
    assert internal_error_row(1, KeyError("k"), with_payload=False) == (
        None,
        Reason.INTERNAL_ERROR.value,
        "KeyError: 'k'",
    )
