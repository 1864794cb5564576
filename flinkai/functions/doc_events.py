"""Validate document events for the live RAG index; every bad one gets a reason code.

A record on the documents topic is either

* a JSON event ``{"doc_id", "text", "updated_at", "op": "upsert" | "delete"}``
  (``op`` defaults to ``upsert``; ``text`` is required for an upsert only), or
* a Kafka tombstone: a null value whose key is the ``doc_id``. It deletes the document.

Each valid event carries a **version**, an int that orders the changes of one
document: ``updated_at`` in epoch milliseconds (ISO-8601 or epoch ms accepted), or,
for a tombstone (which has no body), the record's Kafka timestamp. The index applies
an event only when its version is newer than the one it holds, so a replay after a
restart never moves a document back in time. An empty value (``b""``) is not a
tombstone: it is dead-lettered as ``empty_payload``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from flinkai.functions.events import (
    Invalid,
    Reason,
    _event_time,
    decode_object,
    is_utf8_safe,
)

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_DOC_ID_BYTES",
    "DocEvent",
    "DocOp",
    "parse_doc_event",
    "validate_doc_event",
]

#: Longest accepted document text (UTF-8 bytes); it is chunked, so it may far exceed
#: what the model takes in one piece (``embedding.max_text_bytes``).
MAX_DOCUMENT_BYTES = 1 << 20
#: Longest accepted ``doc_id``; chunk ids (``doc_id#n``) must stay usable as store ids.
MAX_DOC_ID_BYTES = 512


class DocOp(StrEnum):
    """What a document event does to the index."""

    UPSERT = "upsert"
    DELETE = "delete"


@dataclass(frozen=True)
class DocEvent:
    """A valid document event.

    Attributes:
        doc_id: The document's id (the Kafka key of a tombstone).
        op: Upsert or delete.
        version: Epoch ms of ``updated_at`` (a tombstone: the record's timestamp).
        text: The document's text for an upsert; None for a delete.
        tombstone: Whether the event was a null-value Kafka record.
    """

    doc_id: str
    op: DocOp
    version: int
    text: str | None
    tombstone: bool = False


def _version_ms(value: object) -> int | None:
    iso = _event_time(value)
    if iso is None:
        return None
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _key_text(key: bytes | None) -> str | Invalid | None:
    if key is None or key == b"":
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as e:
        return Invalid(Reason.INVALID_UTF8, f"record key, byte {e.start}: {e.reason}")


def parse_doc_event(
    key: bytes | None,
    payload: bytes | None,
    record_ms: int | None,
    max_text_bytes: int,
) -> DocEvent | Invalid:
    """Validate one raw record of the documents topic.

    Args:
        key: The record key (the ``doc_id`` by convention; required for a tombstone).
        payload: The record value; None for a tombstone.
        record_ms: The record's Kafka timestamp in epoch ms (a tombstone's version).
        max_text_bytes: Longest accepted document text, in UTF-8 bytes.
    """
    key_text = _key_text(key)
    if isinstance(key_text, Invalid):
        return key_text
    if payload is None:
        if key_text is None:
            return Invalid(Reason.EMPTY_PAYLOAD, "null value without a key: a tombstone needs one")
        if record_ms is None or record_ms < 0:
            return Invalid(Reason.INVALID_FIELD, "tombstone without a record timestamp")
        if not is_utf8_safe(key_text) or len(key) > MAX_DOC_ID_BYTES:  # type: ignore[arg-type]
            return Invalid(Reason.INVALID_FIELD, f"tombstone key is over {MAX_DOC_ID_BYTES} bytes")
        return DocEvent(key_text, DocOp.DELETE, int(record_ms), None, tombstone=True)
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return obj
    event = validate_doc_event(obj, max_text_bytes)
    if isinstance(event, DocEvent) and key_text is not None and key_text != event.doc_id:
        return Invalid(
            Reason.INVALID_FIELD,
            f"record key {key_text[:80]!r} differs from doc_id {event.doc_id[:80]!r}",
        )
    return event


def validate_doc_event(obj: Mapping[str, object], max_text_bytes: int) -> DocEvent | Invalid:
    """Validate a decoded document event object."""
    op_value = obj.get("op", DocOp.UPSERT.value)
    if op_value is None:
        op_value = DocOp.UPSERT.value
    if not isinstance(op_value, str) or op_value not in {o.value for o in DocOp}:
        shown = op_value[:40] if isinstance(op_value, str) else type(op_value).__name__
        return Invalid(Reason.INVALID_FIELD, f"op must be upsert or delete, got {shown!r}")
    op = DocOp(op_value)
    required = ("doc_id", "updated_at", "text") if op is DocOp.UPSERT else ("doc_id", "updated_at")
    missing = [f for f in required if obj.get(f) is None]
    if missing:
        return Invalid(Reason.MISSING_FIELD, ", ".join(missing))
    doc_id = obj["doc_id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        return Invalid(Reason.INVALID_FIELD, "doc_id must be a string or an integer")
    doc_id = str(doc_id)
    if not doc_id.strip():
        return Invalid(Reason.INVALID_FIELD, "doc_id is empty")
    if not is_utf8_safe(doc_id):
        return Invalid(Reason.INVALID_FIELD, "doc_id holds a lone UTF-16 surrogate")
    if len(doc_id.encode("utf-8")) > MAX_DOC_ID_BYTES:
        return Invalid(Reason.INVALID_FIELD, f"doc_id is over {MAX_DOC_ID_BYTES} bytes")
    version = _version_ms(obj["updated_at"])
    if version is None:
        return Invalid(Reason.INVALID_FIELD, "updated_at must be ISO-8601 or epoch milliseconds")
    if op is DocOp.DELETE:
        return DocEvent(doc_id, op, version, None)
    text = obj["text"]
    if not isinstance(text, str):
        return Invalid(Reason.INVALID_FIELD, "text must be a string")
    if not is_utf8_safe(text):
        return Invalid(Reason.INVALID_FIELD, "text holds a lone UTF-16 surrogate")
    if not text.strip():
        return Invalid(Reason.EMPTY_TEXT, "text is empty or whitespace")
    size = len(text.encode("utf-8"))
    if size > max_text_bytes:
        return Invalid(Reason.OVERSIZED_TEXT, f"text is {size} bytes; limit {max_text_bytes}")
    return DocEvent(doc_id, op, version, text)
