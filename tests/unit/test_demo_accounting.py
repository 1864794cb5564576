"""The demo's exit status rests on an exact account of every event, not on totals."""

from __future__ import annotations

import json

import pytest

from flinkai.demo import DemoReport, accounting_problems, print_report
from flinkai.errors import FlinkAIError

LIMIT = 1024
EVENTS = [
    json.dumps({"user_id": f"u{i}", "click_text": "t", "event_time": 1764576000000 + i}).encode()
    for i in range(4)
]
EVENTS.insert(2, b"not json")


def _embedding(i: int) -> dict[str, object]:
    return {
        "user_id": f"u{i}",
        "event_time": f"2025-12-01T08:00:00.00{i}Z",
        "embedding_vec": [0.1, 0.2, 0.3, 0.4],
        "model_version": "m@1",
    }


def _dead(offset: int, reason: str = "not_json") -> dict[str, object]:
    return {"reason": reason, "source_offset": offset, "payload_base64": "", "detail": "x"}


GOOD = [_embedding(i) for i in range(4)]


def test_exact_outputs_have_no_problems() -> None:
    assert accounting_problems(EVENTS, GOOD, [_dead(2)], LIMIT) == []


def test_a_duplicate_hiding_a_loss_is_caught_though_the_totals_match() -> None:
    embedded = [GOOD[0], GOOD[1], GOOD[1], GOOD[3]]  # u2 lost, u1 twice: 5 outputs for 5 events
    problems = accounting_problems(EVENTS, embedded, [_dead(2)], LIMIT)
    assert len(embedded) + 1 == len(EVENTS)
    assert "event at offset 3 lost" in problems  # u2 sits at offset 3, after the poison
    assert any("matches no input" in p for p in problems)


def test_a_duplicated_or_unknown_dead_letter_is_caught() -> None:
    assert accounting_problems(EVENTS, GOOD, [_dead(2), _dead(2)], LIMIT) == [
        "event at offset 2 output 2 times"
    ]
    problems = accounting_problems(EVENTS, GOOD, [_dead(2), _dead(99)], LIMIT)
    assert problems == ["dead letter with unknown source_offset 99"]


def test_a_valid_event_may_be_dead_lettered_instead_of_embedded() -> None:
    # e.g. inference_failed: the dead letter accounts for it, and an embedding too would be a duplicate
    dead = [_dead(2), _dead(0, "inference_failed")]
    assert accounting_problems(EVENTS, GOOD[1:], dead, LIMIT) == []
    assert accounting_problems(EVENTS, GOOD, dead, LIMIT) != []


def test_print_report_fails_the_demo_when_anything_is_unaccounted() -> None:
    report = DemoReport(EVENTS, GOOD[:3], [_dead(2)], 1.0, ("in", "out", "dlq"), LIMIT)
    with pytest.raises(FlinkAIError, match="1 event\\(s\\) not accounted for exactly once"):
        print_report(report)
    print_report(DemoReport(EVENTS, GOOD, [_dead(2)], 1.0, ("in", "out", "dlq"), LIMIT))
