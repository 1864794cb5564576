"""flinkai bench llm-serve's own logic: arrivals, the keeps-up judgement, the summary."""

from __future__ import annotations

import random

from flinkai_bench.llm_serve import summarize
from flinkai_bench.llm_serve_rows import RateRun, Record, arrivals, judge


def test_poisson_arrivals_have_the_asked_rate() -> None:
    times = arrivals(5.0, 200.0, random.Random(0))
    assert 900 <= len(times) <= 1100
    assert times == sorted(times) and times[-1] < 200.0


def test_a_row_that_falls_behind_does_not_keep_up() -> None:
    arrived = [i * 0.1 for i in range(600)]  # 10/s for 60 s
    on_time = [a + 0.5 for a in arrived]  # about 5 in the system at any time
    assert judge(600, on_time, arrived, 60.0) == (True, 5)
    # Completions at 5/s: the queue grows by 5 every second.
    late = [i * 0.2 for i in range(600)]
    ok, backlog = judge(600, late, arrived, 60.0)
    assert not ok and backlog > 250


def _served(rate: float, capacity: float, seconds: float = 60.0) -> tuple[list[float], list[float]]:
    """Poisson arrivals served first come, first served, one at a time, 1/capacity each."""
    came = arrivals(rate, seconds, random.Random(1))
    done, free = [], 0.0
    for a in came:
        free = max(free, a) + 1 / capacity
        done.append(free)
    return came, done


def test_poisson_load_under_capacity_keeps_up() -> None:
    came, done = _served(rate=1.0, capacity=2.0)
    assert judge(len(came), done, came, 60.0)[0]


def test_a_row_a_few_percent_short_of_its_arrivals_does_not_keep_up() -> None:
    # 0.78/s against a capacity of 0.53/s: the bench's per-row case that an earlier rule
    # ("last quarter <= 1.5 x second quarter + 3") judged as keeping up.
    came, done = _served(rate=0.78, capacity=0.53)
    ok, backlog = judge(len(came), done, came, 60.0)
    assert not ok and backlog > 5
    # 8% short also fails: the tolerance is 5% of the arrivals plus 3 requests.
    came, done = _served(rate=2.4, capacity=2.2)
    assert not judge(len(came), done, came, 60.0)[0]


def _run(row: str, rate: float, tok_s: float, keeps_up: bool, itl_p99: float) -> RateRun:
    r = Record("q0-0", 0.0, first=0.01, done=1.0, tokens=(1, 2, 3))
    r.token_times = [0.01, 0.01 + itl_p99 / 1000, 0.01 + 2 * itl_p99 / 1000]
    return RateRun(row, rate, 60.0, 10, 10, 0, int(tok_s * 60), keeps_up, [r])


def test_the_summary_takes_each_row_at_its_max_rate_that_kept_up() -> None:
    rows = {
        "per-row": [_run("per-row", 0.5, 20, True, 30), _run("per-row", 1.0, 30, False, 30)],
        "raw": [_run("raw", 2, 100, True, 30), _run("raw", 4, 180, True, 30)],
        "job": [
            _run("job", 2, 90, True, 30),
            _run("job", 4, 170, True, 60),
            _run("job", 5, 175, False, 80),
        ],
    }
    result = {"job_half_rate": {"itl_ms": {"p99": 40.0},
                                "ttft_at_consumer_ms": {"p50": 300.0, "p99": 900.0}}}  # fmt: skip
    s = summarize(result, rows, step_ms=20.0)
    assert (s["per_row_tok_s"], s["raw_tok_s"], s["job_tok_s"]) == (20.0, 180.0, 170.0)
    assert s["job_over_per_row"] == 8.5 and s["job_over_raw"] == 0.94
    assert s["itl_half_over_step"] == 2.0
    assert (s["job_first_delta_p50_ms_at_half"], s["job_first_delta_p99_ms_at_half"]) == (300, 900)
    assert s["job_tok_s_at_itl_slo"] == 90.0  # the 4/s run's ITL p99 (60 ms) misses 42.7
    assert s["burst_restarts"] is None and s["identical"] is None  # legs that did not run


def test_a_run_reports_the_first_delta_as_its_consumer_received_it() -> None:
    seen = Record("q0-0", 0.0, first=0.2, first_seen=0.25, done=1.0, tokens=(1, 2))
    unseen = Record("q1-0", 0.0, first=0.3, done=1.0, tokens=(1, 2))  # per-row, raw: none
    s = RateRun("job", 1.0, 60.0, 2, 2, 0, 4, True, [seen, unseen]).summary()
    assert s["ttft_ms"]["n"] == 2 and s["ttft_at_consumer_ms"]["n"] == 1
    assert s["ttft_at_consumer_ms"]["p50"] == 250.0
