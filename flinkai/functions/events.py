"""Validate raw click events; every bad one gets a stable reason code.

Events arrive as raw Kafka bytes (the source table uses the ``raw`` format) so
that invalid UTF-8 and broken JSON reach this code instead of being dropped or
failing the job inside a format deserialiser.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

__all__ = [
    "ClickEvent",
    "Invalid",
    "Reason",
    "decode_object",
    "is_utf8_safe",
    "parse_click",
    "payload_base64",
    "validate_click",
]


class Reason(StrEnum):
    """Dead-letter reason codes; part of the DLQ record contract."""

    EMPTY_PAYLOAD = "empty_payload"
    INVALID_UTF8 = "invalid_utf8"
    NOT_JSON = "not_json"
    TOO_DEEPLY_NESTED = "too_deeply_nested"
    NOT_OBJECT = "not_object"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    EMPTY_TEXT = "empty_text"
    OVERSIZED_TEXT = "oversized_text"
    INFERENCE_FAILED = "inference_failed"
    #: An unexpected exception on this row inside a Python function (a bug, not bad
    #: input); the row is dead-lettered instead of failing the task (flinkai.functions.guard).
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class ClickEvent:
    """A valid click event; ``event_time`` normalised to ISO-8601 UTC with milliseconds."""

    user_id: str
    click_text: str
    event_time: str


@dataclass(frozen=True)
class Invalid:
    """Why an event was rejected."""

    reason: Reason
    detail: str


REQUIRED_FIELDS = ("user_id", "click_text", "event_time")


@functools.lru_cache(maxsize=4096)
def _utc_second(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of an epoch second; cached, as a stream's times are close."""
    return datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None).isoformat()


def _event_time(value: object) -> str | None:
    """Accept epoch milliseconds or an ISO-8601 string; None when unparseable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        # Integer milliseconds: exact arithmetic, and a formatted second shared by all
        # events of that second (formatting a datetime was the parser's largest cost).
        seconds, millis = divmod(value, 1000)
        try:
            second = _utc_second(seconds)
        except (OverflowError, OSError, ValueError):
            return None
        return f"{second}.{millis:03d}Z"
    if isinstance(value, float):
        try:
            dt = datetime.fromtimestamp(value / 1000.0, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)  # naive times are taken as UTC, documented in the README
    else:
        return None
    try:
        utc = dt.astimezone(UTC)
    except OverflowError:  # e.g. year 1 with a positive offset falls before year 1 in UTC
        return None
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_utf8_safe(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def payload_base64(payload: bytes | None) -> str | None:
    """Raw bytes as base64: a dead letter keeps the exact payload, even invalid UTF-8."""
    return None if payload is None else base64.b64encode(payload).decode("ascii")


def decode_object(payload: bytes | None) -> dict[str, object] | Invalid:
    """Raw record value -> JSON object, or why it is not one."""
    if not payload:
        return Invalid(Reason.EMPTY_PAYLOAD, "record value is empty or null")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as e:
        return Invalid(Reason.INVALID_UTF8, f"byte {e.start}: {e.reason}")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return Invalid(Reason.NOT_JSON, f"line {e.lineno} column {e.colno}: {e.msg}")
    except RecursionError:
        # The C decoder recurses once per level; a few KB of '[' exhaust the stack.
        return Invalid(
            Reason.TOO_DEEPLY_NESTED, "JSON nesting is deeper than the parser's recursion limit"
        )
    except ValueError as e:
        # e.g. an integer literal over Python's 4,300-digit conversion limit
        return Invalid(Reason.NOT_JSON, str(e))
    if not isinstance(obj, dict):
        return Invalid(Reason.NOT_OBJECT, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_click(payload: bytes | None, max_text_bytes: int) -> ClickEvent | Invalid:
    """Validate one raw event."""
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return obj
    return validate_click(obj, max_text_bytes)


def validate_click(obj: Mapping[str, object], max_text_bytes: int) -> ClickEvent | Invalid:
    """Validate a decoded event object (the fields of ``REQUIRED_FIELDS``)."""
    missing = [f for f in REQUIRED_FIELDS if obj.get(f) is None]
    if missing:
        return Invalid(Reason.MISSING_FIELD, ", ".join(missing))
    user_id, click_text = obj["user_id"], obj["click_text"]
    if not isinstance(user_id, str | int) or isinstance(user_id, bool):
        return Invalid(Reason.INVALID_FIELD, "user_id must be a string or an integer")
    if not isinstance(click_text, str):
        return Invalid(Reason.INVALID_FIELD, "click_text must be a string")
    for name, value in (("user_id", user_id), ("click_text", click_text)):
        if isinstance(value, str) and not is_utf8_safe(value):
            # JSON escapes can spell lone surrogates ("\ud800"): valid JSON, but no
            # UTF-8 string, so Arrow would fail the task when the row leaves Python.
            return Invalid(Reason.INVALID_FIELD, f"{name} holds a lone UTF-16 surrogate")
    event_time = _event_time(obj["event_time"])
    if event_time is None:
        return Invalid(Reason.INVALID_FIELD, "event_time must be ISO-8601 or epoch milliseconds")
    if not click_text.strip():
        return Invalid(Reason.EMPTY_TEXT, "click_text is empty or whitespace")
    size = len(click_text.encode("utf-8"))
    if size > max_text_bytes:
        return Invalid(Reason.OVERSIZED_TEXT, f"click_text is {size} bytes; limit {max_text_bytes}")
    return ClickEvent(str(user_id), click_text, event_time)
