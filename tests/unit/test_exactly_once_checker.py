"""The exactly-once checker on bad data: each fault it exists to catch makes it fail."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from flinkai.kafka.admin import Record
from flinkai.testing import (
    check_exactly_once,
    compare_ids,
    dead_letter_id,
    result_id,
)

N = 100
IDS = [f"e-{i}" for i in range(N)]


def _result(i: int, partition: int = 0, offset: int | None = None) -> Record:
    value = json.dumps({"user_id": f"e-{i}", "embedding_vec": [0.0]}).encode()
    return Record("out", partition, i if offset is None else offset, None, value, 0)


def _dead_letter(source_offset: int, offset: int) -> Record:
    value = {"reason": "not_json", "source_topic": "in", "source_partition": 0}
    value["source_offset"] = source_offset
    return Record("dlq", 0, offset, None, json.dumps(value).encode(), 0)


def _output() -> list[Record]:
    return [_result(i) for i in range(N)]


def test_exact_output_passes() -> None:
    report = check_exactly_once(IDS, _output())
    assert report.ok, str(report)
    assert (report.expected, report.seen) == (N, N)
    report.assert_ok()


def test_duplicate_after_record_n_fails() -> None:
    # A replayed record committed after all N: reading up to N records would stop
    # before it and pass.
    out = [*_output(), _result(7, offset=N)]
    assert check_exactly_once(IDS, out[:N]).ok
    report = check_exactly_once(IDS, out)
    assert not report.ok
    assert report.duplicated == {"e-7": 1}
    assert not report.missing and not report.unexpected
    with pytest.raises(AssertionError, match=r"1 duplicated id\(s\): e-7 x1"):
        report.assert_ok()


def test_missing_record_fails() -> None:
    out = [r for r in _output() if result_id(r) != "e-42"]
    report = check_exactly_once(IDS, out)
    assert report.missing == {"e-42": 1}
    assert not report.duplicated and not report.unexpected
    with pytest.raises(AssertionError, match=r"1 missing id\(s\): e-42 x1"):
        report.assert_ok()


def test_loss_hidden_by_a_duplicate_fails() -> None:
    # Same count as expected: a count check alone would pass this.
    out = [*(r for r in _output() if result_id(r) != "e-5"), _result(6, offset=N)]
    report = check_exactly_once(IDS, out)
    assert report.seen == report.expected == N
    assert report.missing == {"e-5": 1}
    assert report.duplicated == {"e-6": 1}
    assert not report.ok


def test_unexpected_record_fails() -> None:
    report = check_exactly_once(IDS, [*_output(), _result(N + 1, offset=N)])
    assert report.unexpected == {f"e-{N + 1}": 1}
    with pytest.raises(AssertionError, match="unexpected"):
        report.assert_ok()


def test_reordering_across_keys_and_partitions_passes() -> None:
    # The contract is the multiset of ids: Kafka orders only within a partition, and
    # the job may commit different keys in any order.
    out = [_result(i, partition=i % 3) for i in range(N)]
    random.Random(1).shuffle(out)
    assert [result_id(r) for r in out] != IDS
    report = check_exactly_once(IDS, out)
    assert report.ok, str(report)


def test_reordering_does_not_hide_a_duplicate() -> None:
    out = [*_output(), _result(0, partition=2, offset=0)]
    random.Random(2).shuffle(out)
    assert check_exactly_once(IDS, out).duplicated == {"e-0": 1}


def test_expected_counter_allows_repeated_ids() -> None:
    expected = Counter({"a": 2, "b": 1})
    assert compare_ids(expected, ["b", "a", "a"]).ok
    assert compare_ids(expected, ["a", "b"]).missing == {"a": 1}
    assert compare_ids(expected, ["a", "a", "a", "b"]).duplicated == {"a": 1}
    # An iterable of ids counts its repeats the same way.
    assert compare_ids(["a", "b", "a"], ["a", "b", "a"]).ok


def test_dead_letters_are_identified_by_source_offset() -> None:
    expected = ["in:0:99", "in:0:200"]
    letters = [_dead_letter(99, 0), _dead_letter(200, 1)]
    assert check_exactly_once(expected, letters, id_of=dead_letter_id).ok
    report = check_exactly_once(expected, [*letters, _dead_letter(99, 2)], id_of=dead_letter_id)
    assert report.duplicated == {"in:0:99": 1}


def test_report_lists_a_bounded_number_of_examples() -> None:
    report = compare_ids(IDS, [])
    text = str(report)
    assert f"{N} missing id(s)" in text
    assert f"({N - 10} more)" in text
    assert str(compare_ids(IDS, IDS)) == f"expected {N} records, read {N}: exactly once"
