"""RowGuard: one row's unexpected exception becomes that row's error, never the batch's."""

from __future__ import annotations

import logging

import pytest

from flinkai.functions.guard import RowGuard, internal_error_detail


def _boom_on(bad: set[int]):  # type: ignore[no-untyped-def]
    def fn(x: int) -> int:
        if x in bad:
            raise KeyError(f"row {x}")
        return x * 10

    return fn


def test_rows_turns_each_failing_row_into_its_error_and_counts_it() -> None:
    counted: list[int] = []
    guard = RowGuard("f", count=lambda: counted.append(1))
    out = guard.rows([1, 2, 3, 4], _boom_on({2, 4}), lambda x, e: f"err {x} {type(e).__name__}")
    assert out == [10, "err 2 KeyError", 30, "err 4 KeyError"]
    assert guard.errors == 2 and len(counted) == 2


def test_fail_policy_reraises_the_original_exception() -> None:
    guard = RowGuard("f", policy="fail")
    with pytest.raises(KeyError, match="row 2"):
        guard.rows([1, 2], _boom_on({2}), lambda x, e: None)
    with pytest.raises(KeyError):
        guard.batch([1, 2], lambda xs: [_boom_on({2})(x) for x in xs], lambda x, e: None)
    assert guard.errors == 0


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="dead_letter or fail"):
        RowGuard("f", policy="ignore")  # type: ignore[arg-type]


def test_batch_retries_rows_one_by_one_so_good_rows_keep_their_results() -> None:
    calls: list[list[int]] = []

    def model(xs: list[int]) -> list[int]:
        calls.append(list(xs))
        if 3 in xs:
            raise RecursionError("poison")
        return [x + 100 for x in xs]

    guard = RowGuard("embed")
    out = guard.batch([1, 2, 3, 4], model, lambda x, e: f"internal_error: {e}")
    assert out == [101, 102, "internal_error: poison", 104]
    assert calls == [[1, 2, 3, 4], [1], [2], [3], [4]]
    assert guard.errors == 1


def test_batch_without_error_runs_once() -> None:
    calls = []
    guard = RowGuard("embed")
    out = guard.batch([1, 2], lambda xs: calls.append(1) or [x for x in xs], lambda x, e: None)
    assert out == [1, 2] and calls == [1] and guard.errors == 0


def test_detail_is_bounded_and_valid_utf8() -> None:
    detail = internal_error_detail(ValueError("\ud800" + "x" * 5000))
    assert detail.startswith("ValueError: \\ud800")
    assert len(detail) < 1100 and detail.endswith("...")
    detail.encode("utf-8")  # a lone surrogate would fail Arrow, and so the task


def test_logging_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    guard = RowGuard("f")
    with caplog.at_level(logging.ERROR, logger="flinkai.functions.guard"):
        guard.rows(list(range(100)), _boom_on(set(range(100))), lambda x, e: None)
    assert guard.errors == 100
    assert 0 < len(caplog.records) <= 20
