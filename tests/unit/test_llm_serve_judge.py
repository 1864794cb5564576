"""The llm-serve bench's max-rate judge: a queue that grows fails, a steady one passes."""

from __future__ import annotations

import random

from flinkai_bench.llm_serve_rows import arrivals, judge


def _served(rate: float, capacity: float, seconds: float = 60.0) -> tuple[list[float], list[float]]:
    """Poisson arrivals served first come, first served, one at a time, 1/capacity each."""
    came = arrivals(rate, seconds, random.Random(1))
    done, free = [], 0.0
    for a in came:
        free = max(free, a) + 1 / capacity
        done.append(free)
    return came, done


def test_a_row_that_keeps_up_passes() -> None:
    came, done = _served(rate=1.0, capacity=2.0)
    ok, _ = judge(len(came), done, came, 60.0)
    assert ok


def test_a_row_short_of_its_arrivals_fails_even_when_the_old_rule_passed() -> None:
    # 0.78/s against a capacity of 0.53/s: the bench's per-row case that the earlier
    # "late quarter <= 1.5 x second quarter + 3" rule judged as keeping up.
    came, done = _served(rate=0.78, capacity=0.53)
    ok, backlog = judge(len(came), done, came, 60.0)
    assert not ok and backlog > 5
    # 8% short of the arrivals also fails (the tolerance is 5% plus noise).
    came, done = _served(rate=2.4, capacity=2.2)
    assert not judge(len(came), done, came, 60.0)[0]
