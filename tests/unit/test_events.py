import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flinkai.functions.events import ClickEvent, Invalid, Reason, parse_click

LIMIT = 64


def event(**fields: object) -> bytes:
    base: dict[str, object] = {
        "user_id": "u1",
        "click_text": "red shoes",
        "event_time": "2026-12-01T08:00:00Z",
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_valid_event_is_normalised() -> None:
    got = parse_click(event(user_id=42, event_time=1764576000000), LIMIT)
    assert got == ClickEvent("42", "red shoes", "2025-12-01T08:00:00.000Z")
    assert parse_click(event(event_time="2026-12-01T09:00:00+01:00"), LIMIT) == ClickEvent(
        "u1", "red shoes", "2026-12-01T08:00:00.000Z"
    )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, Reason.EMPTY_PAYLOAD),
        (b"", Reason.EMPTY_PAYLOAD),
        (b'{"user_id": "u1", "click_text": "caf\xe9"}', Reason.INVALID_UTF8),
        (b"not json at all", Reason.NOT_JSON),
        (b'["a", "list"]', Reason.NOT_OBJECT),
        (event(click_text=...), Reason.MISSING_FIELD),
        (event(event_time=None), Reason.MISSING_FIELD),
        (event(click_text=7), Reason.INVALID_FIELD),
        (event(user_id=True), Reason.INVALID_FIELD),
        (event(event_time="yesterday"), Reason.INVALID_FIELD),
        (event(click_text="   "), Reason.EMPTY_TEXT),
        (event(click_text="é" * LIMIT), Reason.OVERSIZED_TEXT),
    ],
)
def test_bad_events_get_a_reason(payload: bytes | None, reason: Reason) -> None:
    got = parse_click(payload, LIMIT)
    assert isinstance(got, Invalid)
    assert got.reason is reason
    assert got.detail


def test_missing_fields_are_all_named() -> None:
    got = parse_click(b"{}", LIMIT)
    assert isinstance(got, Invalid)
    assert got.detail == "user_id, click_text, event_time"


@given(st.integers(min_value=-(10**16), max_value=10**16))
def test_epoch_millis_format_exactly(value: int) -> None:
    """Integer milliseconds take a cached fast path; it must equal exact datetime arithmetic."""
    from datetime import UTC, datetime, timedelta

    from flinkai.functions.events import _event_time

    try:
        expected: str | None = (
            (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=value))
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
    except OverflowError:
        expected = None
    assert _event_time(value) == expected
