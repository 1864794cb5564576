"""Validate question events ``{"id", "question"}`` for ``jobs/rag_answer.sql``."""

from __future__ import annotations

from dataclasses import dataclass

from flinkai.functions.events import Invalid, Reason, decode_object, is_utf8_safe

__all__ = ["Question", "parse_question"]


@dataclass(frozen=True)
class Question:
    """A valid question."""

    id: str
    question: str


def parse_question(payload: bytes | None, max_text_bytes: int) -> Question | Invalid:
    """Validate one raw question record; the same reason codes as the other parsers."""
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return obj
    missing = [f for f in ("id", "question") if obj.get(f) is None]
    if missing:
        return Invalid(Reason.MISSING_FIELD, ", ".join(missing))
    qid, text = obj["id"], obj["question"]
    if isinstance(qid, bool) or not isinstance(qid, str | int):
        return Invalid(Reason.INVALID_FIELD, "id must be a string or an integer")
    if not isinstance(text, str):
        return Invalid(Reason.INVALID_FIELD, "question must be a string")
    for name, value in (("id", str(qid)), ("question", text)):
        if not is_utf8_safe(value):
            return Invalid(Reason.INVALID_FIELD, f"{name} holds a lone UTF-16 surrogate")
    if not text.strip():
        return Invalid(Reason.EMPTY_TEXT, "question is empty or whitespace")
    size = len(text.encode("utf-8"))
    if size > max_text_bytes:
        return Invalid(Reason.OVERSIZED_TEXT, f"question is {size} bytes; limit {max_text_bytes}")
    return Question(str(qid), text)
