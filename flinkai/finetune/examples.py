"""Training examples: parsed from raw Kafka bytes, rendered as serving renders a prompt.

A record is a JSON object ``{"id", "instruction", "target"}`` with an optional
``"adapter"`` (the adapter it trains; the job's default otherwise). A record that is not
one gets a :class:`BadExample` with a machine-readable ``reason`` and goes to the
dead-letter topic; it never stops the job:

========================  ==========================================================
``not_json``              no payload, not UTF-8, or not JSON
``not_object``            JSON, but not an object
``missing_field``         ``id``, ``instruction`` or ``target`` is absent or null
``invalid_field``         one of them (or ``adapter``) is not a string
``empty_field``           one of them is empty or only white space
``invalid_adapter``       ``adapter`` is not a valid adapter name, or not the record's key
``too_long``              prompt plus answer exceed the trainer's ``max_tokens``
========================  ==========================================================

The prompt is the instruction as one user message through the model's own chat
template, exactly what ``llm_complete`` feeds the decoder
(:meth:`flinkai.functions.llm.LoadedModel.prompt_ids`); the answer is the target's
tokens followed by the stop token, so the adapter learns to stop where serving stops.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flinkai.llm.lora import AdapterError, check_adapter_name
from flinkai.llm.tokenizer import LlmTokenizer

__all__ = [
    "REASONS",
    "BadExample",
    "EncodedExample",
    "Example",
    "encode_example",
    "parse_example",
]

#: Every dead-letter reason an example can get (see the module docstring).
REASONS = (
    "not_json",
    "not_object",
    "missing_field",
    "invalid_field",
    "empty_field",
    "invalid_adapter",
    "too_long",
)
_FIELDS = ("id", "instruction", "target")


@dataclass(frozen=True)
class Example:
    """One valid example.

    Attributes:
        id: The record's id (carried into logs and dead letters only).
        instruction: The user message.
        target: The answer the adapter should give.
        adapter: The adapter it trains.
    """

    id: str
    instruction: str
    target: str
    adapter: str

    def to_state(self) -> tuple[str, str, str, str]:
        """Plain data for Flink state (no object of this code is pickled)."""
        return (self.id, self.instruction, self.target, self.adapter)

    @classmethod
    def from_state(cls, data: Sequence[Any]) -> Example:
        return cls(str(data[0]), str(data[1]), str(data[2]), str(data[3]))


@dataclass(frozen=True)
class BadExample:
    """Why a record is not an example: ``reason`` is one of :data:`REASONS`."""

    reason: str
    detail: str


@dataclass(frozen=True)
class EncodedExample:
    """An example as token ids: the prompt, then the answer (target and stop token).

    Attributes:
        input_ids: Prompt ids followed by answer ids.
        prompt_tokens: How many of ``input_ids`` are the prompt (no loss on them).
    """

    input_ids: tuple[int, ...]
    prompt_tokens: int

    @property
    def answer_tokens(self) -> int:
        return len(self.input_ids) - self.prompt_tokens


def parse_example(payload: bytes | None, default_adapter: str) -> Example | BadExample:
    """The example in a record's raw bytes, or why there is none.

    Args:
        payload: The record's value (``None`` for a tombstone).
        default_adapter: The adapter an example without ``"adapter"`` trains.
    """
    if payload is None:
        return BadExample("not_json", "the record has no value")
    try:
        data = json.loads(payload.decode("utf-8"))
    except UnicodeDecodeError as e:
        return BadExample("not_json", f"not UTF-8: {e}")
    except json.JSONDecodeError as e:
        return BadExample("not_json", f"not JSON: {e}")
    if not isinstance(data, dict):
        return BadExample("not_object", f"expected a JSON object, got {type(data).__name__}")
    values: dict[str, str] = {}
    for name in _FIELDS:
        value = data.get(name)
        if value is None:
            return BadExample("missing_field", f"field {name!r} is missing")
        if not isinstance(value, str):
            return BadExample(
                "invalid_field", f"field {name!r} must be a string, got {type(value).__name__}"
            )
        if not value.strip():
            return BadExample("empty_field", f"field {name!r} is empty")
        values[name] = value
    adapter = data.get("adapter")
    if adapter is None:
        adapter = default_adapter
    if not isinstance(adapter, str):
        return BadExample(
            "invalid_field", f"field 'adapter' must be a string, got {type(adapter).__name__}"
        )
    try:
        check_adapter_name(adapter)
    except AdapterError as e:
        return BadExample("invalid_adapter", str(e))
    return Example(values["id"], values["instruction"], values["target"], adapter)


def encode_example(
    tokenizer: LlmTokenizer, example: Example, stop_id: int, max_tokens: int
) -> EncodedExample | BadExample:
    """The example's ids as serving would see them, or ``too_long``.

    Args:
        tokenizer: The export's tokenizer and chat template (the serving ones).
        example: The example.
        stop_id: The token that ends an answer (the manifest's first stop id).
        max_tokens: Most prompt + answer tokens one example may have.
    """
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": example.instruction}])
    answer = [*tokenizer.encode(example.target), stop_id]
    total = len(prompt) + len(answer)
    if total > max_tokens:
        return BadExample(
            "too_long",
            f"{len(prompt)} prompt + {len(answer)} answer tokens > max_tokens {max_tokens}",
        )
    return EncodedExample(tuple(prompt + answer), len(prompt))
