"""Document and question events: valid shapes, tombstones, and one reason per bad input."""

from __future__ import annotations

import json

import pytest

from flinkai.functions.doc_events import (
    MAX_DOC_ID_BYTES,
    DocEvent,
    DocOp,
    parse_doc_event,
)
from flinkai.functions.events import Invalid
from flinkai.functions.questions import Question, parse_question

LIMIT = 1000
T0 = 1764576000000  # 2025-12-01T08:00:00Z


def _doc(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_upsert_with_epoch_and_iso_versions() -> None:
    a = parse_doc_event(b"d1", _doc(doc_id="d1", text="hello", updated_at=T0), 5, LIMIT)
    b = parse_doc_event(
        None, _doc(doc_id="d1", text="hello", updated_at="2025-12-01T08:00:00Z"), 5, LIMIT
    )
    assert a == DocEvent("d1", DocOp.UPSERT, T0, "hello")
    assert b == a  # the same instant in both notations is the same version


def test_op_defaults_to_upsert_and_delete_needs_no_text() -> None:
    got = parse_doc_event(None, _doc(doc_id=7, op="delete", updated_at=T0), None, LIMIT)
    assert got == DocEvent("7", DocOp.DELETE, T0, None)


def test_tombstone_deletes_at_the_record_timestamp() -> None:
    got = parse_doc_event(b"doc-9", None, T0 + 5, LIMIT)
    assert got == DocEvent("doc-9", DocOp.DELETE, T0 + 5, None, tombstone=True)


@pytest.mark.parametrize(
    ("key", "payload", "ts", "reason", "detail"),
    [
        (None, None, T0, "empty_payload", "without a key"),
        (b"d", b"", T0, "empty_payload", "empty"),
        (b"d", None, None, "invalid_field", "timestamp"),
        (b"\xff", None, T0, "invalid_utf8", "record key"),
        (None, b"\xff\xfe", T0, "invalid_utf8", "byte 0"),
        (None, b"{not json", T0, "not_json", "line 1"),
        (None, b"[1]", T0, "not_object", "list"),
        (None, _doc(text="x", updated_at=T0), T0, "missing_field", "doc_id"),
        (None, _doc(doc_id="d", updated_at=T0), T0, "missing_field", "text"),
        (None, _doc(doc_id="d", text="x"), T0, "missing_field", "updated_at"),
        (None, _doc(doc_id="d", text="x", updated_at=T0, op="merge"), T0, "invalid_field", "merge"),
        (None, _doc(doc_id="d", text="x", updated_at=T0, op=3), T0, "invalid_field", "op"),
        (None, _doc(doc_id=True, text="x", updated_at=T0), T0, "invalid_field", "doc_id"),
        (None, _doc(doc_id=" ", text="x", updated_at=T0), T0, "invalid_field", "empty"),
        (None, _doc(doc_id="d", text=" \n", updated_at=T0), T0, "empty_text", "text"),
        (None, _doc(doc_id="d", text=3, updated_at=T0), T0, "invalid_field", "text"),
        (None, _doc(doc_id="d", text="x", updated_at="soon"), T0, "invalid_field", "updated_at"),
        (
            None,
            b'{"doc_id": "d", "text": "\\ud800", "updated_at": 1}',
            T0,
            "invalid_field",
            "surrogate",
        ),
        (
            None,
            _doc(doc_id="d", text="x" * (LIMIT + 1), updated_at=T0),
            T0,
            "oversized_text",
            "1001",
        ),
        (
            None,
            _doc(doc_id="d" * (MAX_DOC_ID_BYTES + 1), text="x", updated_at=T0),
            T0,
            "invalid_field",
            "over",
        ),
        (b"other", _doc(doc_id="d", text="x", updated_at=T0), T0, "invalid_field", "differs"),
    ],
)
def test_bad_events_get_a_reason(
    key: bytes | None, payload: bytes | None, ts: int | None, reason: str, detail: str
) -> None:
    got = parse_doc_event(key, payload, ts, LIMIT)
    assert isinstance(got, Invalid), got
    assert got.reason.value == reason
    assert detail in got.detail


def test_questions() -> None:
    assert parse_question(b'{"id": 1, "question": "why?"}', LIMIT) == Question("1", "why?")
    bad = {
        b"": "empty_payload",
        b"nope": "not_json",
        b'{"id": "q"}': "missing_field",
        b'{"id": "q", "question": "  "}': "empty_text",
        b'{"id": [], "question": "x"}': "invalid_field",
    }
    for payload, reason in bad.items():
        got = parse_question(payload, LIMIT)
        assert isinstance(got, Invalid) and got.reason.value == reason, (payload, got)
