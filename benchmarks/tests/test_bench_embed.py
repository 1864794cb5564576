"""Pure logic of ``flinkai bench embed``: rates, percentiles, pacing, settings. No timing."""

from __future__ import annotations

import argparse

import pytest

from flinkai_bench.embed import JobSettings, VariantResult
from flinkai_bench.embed.command import _ratio
from flinkai_bench.embed.stats import (
    cpu_between,
    event_latencies_ms,
    half_rate,
    latency_windows,
    pacing_schedule,
    percentiles,
    span_rate,
    steady_rate,
    steady_span,
    two_run_rate,
)


def test_percentiles_of_nothing_is_none() -> None:
    assert percentiles([]) == (None, None)


def test_percentiles_interpolate_linearly() -> None:
    p50, p99 = percentiles([float(v) for v in range(1, 101)])
    assert p50 == pytest.approx(50.5)
    assert p99 == pytest.approx(99.01)


def test_span_rate_steady_stream() -> None:
    # One record every 0.1 s from t=30 (after start-up) to t=39.9: 10 records/s.
    ts = [30.0 + i * 0.1 for i in range(100)]
    assert span_rate(ts, burst_s=0.05) == pytest.approx(10.0)


def test_span_rate_counts_bursts_from_the_end_of_the_first_one() -> None:
    # Bursts of 256 records every 4 s: the job sustains 64 records/s. Records of one
    # burst are written within a few ms; the first burst is start-up, not rate.
    ts = [100.0 + 4.0 * b + 0.0005 * i for b in range(5) for i in range(256)]
    rate = span_rate(ts, burst_s=0.25)
    assert rate == pytest.approx(4 * 256 / (16.0 + 0.1275), rel=1e-6)
    assert rate == pytest.approx(64.0, rel=0.02)


def test_a_first_flush_written_over_most_of_a_second_is_all_start_up() -> None:
    # 1,024 records written over 0.7 s, then 876 more 15 s later: one steady flush.
    first = [37.0 + 0.7 * i / 1024 for i in range(1024)]
    ts = first + [52.0 + 0.0005 * i for i in range(876)]
    assert steady_span(ts, burst_s=0.25) == (37.0, pytest.approx(52.4375), 876)
    assert span_rate(ts, burst_s=0.25) == pytest.approx(876 / 15.4375)


def test_span_rate_ignores_order_and_start_up() -> None:
    late_start = [500.0 + i for i in range(10)]
    assert span_rate(reversed(late_start), burst_s=0.1) == pytest.approx(1.0)


@pytest.mark.parametrize("ts", [[], [1.0], [5.0, 5.0, 5.0], [5.0, 5.1]])
def test_span_rate_needs_two_flushes(ts: list[float]) -> None:
    assert span_rate(ts, burst_s=0.25) is None


def test_two_run_rate() -> None:
    assert two_run_rate(64, 30.0, 3864, 80.0) == pytest.approx(76.0)
    assert two_run_rate(64, 30.0, 600, 29.0) is None  # start-up noise exceeds the work
    assert two_run_rate(64, 30.0, 64, 40.0) is None


def test_half_rate() -> None:
    assert half_rate(80.0) == 40.0
    assert half_rate(80.0, 0.25) == 20.0
    assert half_rate(None) is None
    assert half_rate(0.0) is None
    assert half_rate(80.0, 0.0) is None


def test_pacing_schedule_is_absolute_and_even() -> None:
    sched = pacing_schedule(5, 4.0, start_s=10.0)
    assert sched == [10.0, 10.25, 10.5, 10.75, 11.0]
    assert pacing_schedule(0, 4.0) == []


@pytest.mark.parametrize(("count", "rate"), [(3, 0.0), (3, -1.0), (-1, 1.0)])
def test_pacing_schedule_rejects_bad_input(count: int, rate: float) -> None:
    with pytest.raises(ValueError):
        pacing_schedule(count, rate)


def test_event_latencies_pairs_by_id_and_counts_missing() -> None:
    produced = {"a": 10.0, "b": 10.5, "c": 11.0}
    arrived = {"b": 10.75, "a": 10.25, "zzz": 99.0}
    latencies, missing = event_latencies_ms(produced, arrived)
    assert latencies == pytest.approx([250.0, 250.0])
    assert missing == 1


def test_latency_windows_split_by_send_time_and_count_missing() -> None:
    # Sends at 0..9 s; the first five answer in 100 ms, the next five in 1 s but one is lost.
    produced = {f"e{i}": 100.0 + i for i in range(10)}
    arrived = {f"e{i}": 100.0 + i + (0.1 if i < 5 else 1.0) for i in range(10) if i != 7}
    windows = latency_windows(produced, arrived, window_s=5.0)
    assert [w["start_s"] for w in windows] == [0.0, 5.0]
    assert windows[0]["events"] == 5 and windows[0]["missing"] == 0
    assert windows[0]["max_ms"] == pytest.approx(100.0)
    assert windows[1]["events"] == 4 and windows[1]["missing"] == 1
    assert windows[1]["p50_ms"] == pytest.approx(1000.0)
    assert latency_windows({}, {}) == []
    with pytest.raises(ValueError):
        latency_windows(produced, arrived, window_s=0)


def test_job_settings_parse_and_overrides() -> None:
    s = JobSettings.parse("1024:1024:64:2")
    assert s == JobSettings(1024, 1024, 64, 2)
    assert s.label == "1024:1024:64:2"
    assert s.overrides() == {
        "runtime": {"arrow_batch_size": 1024, "python_bundle_size": 1024, "parallelism": 1},
        "embedding": {"batch_size": 64},
        "onnx": {"intra_op_threads": 2},
    }
    p2 = JobSettings.parse("1024:1024:32:1:2")
    assert p2 == JobSettings(1024, 1024, 32, 1, 2)
    assert p2.label == "1024:1024:32:1:2"
    assert p2.overrides()["runtime"]["parallelism"] == 2


@pytest.mark.parametrize(
    "spec", ["1024:512:32:0", "0:1:1:0", "1:1:0:0", "a:b:c:d", "1:2:3", "1:1:1:1:0", "1:1:1:1:1:1"]
)
def test_job_settings_parse_rejects(spec: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        JobSettings.parse(spec)


def test_job_settings_overrides_are_valid_config() -> None:
    from flinkai.config import Config

    config = Config()
    for section, values in JobSettings.parse("512:512:16:1").overrides().items():
        config = config.with_overrides(**{section: values})
    assert config.runtime.arrow_batch_size == 512
    assert config.runtime.python_bundle_size == 512
    assert config.embedding.batch_size == 16
    assert config.onnx.intra_op_threads == 1
    assert config.runtime.parallelism == 1


def test_ratio_needs_two_rates() -> None:
    a, b = VariantResult("a", texts_per_s=90.0), VariantResult("b", texts_per_s=45.0)
    assert _ratio(a, b) == pytest.approx(2.0)
    assert _ratio(a, VariantResult("n/a")) is None
    assert _ratio(None, b) is None


def test_steady_span_reports_the_work_after_the_first_flush() -> None:
    ts = [10.0, 10.1, 12.0, 14.0]
    assert steady_span(ts, burst_s=0.25) == (10.0, 14.0, 2)
    assert steady_span([3.0], burst_s=0.25) is None


def test_cpu_between_interpolates_the_cumulative_counter() -> None:
    series = [(0.0, 0.0), (1.0, 2.0), (2.0, 2.0), (3.0, 5.0)]
    assert cpu_between(series, 0.5, 2.5) == pytest.approx(2.5)
    assert cpu_between(series, 0.0, 3.0) == pytest.approx(5.0)


@pytest.mark.parametrize(("t0", "t1"), [(-1.0, 1.0), (1.0, 4.0), (2.0, 1.0)])
def test_cpu_between_outside_the_samples_is_none(t0: float, t1: float) -> None:
    assert cpu_between([(0.0, 0.0), (3.0, 5.0)], t0, t1) is None
    assert cpu_between([(0.0, 0.0)], 0.0, 0.0) is None


def test_steady_rate_sums_each_subtasks_own_steady_rate() -> None:
    # Two subtasks flush 10 records each at 1 s intervals, B starting 0.5 s after A.
    times = [t + i * 1e-3 for t in (10.0, 11.0, 12.0) for i in range(10)]
    times += [t + i * 1e-3 for t in (10.5, 11.5, 12.5) for i in range(10)]
    groups = [0] * 30 + [1] * 30
    steady = steady_rate(times, groups)
    assert steady is not None
    # Each: 20 records after its first flush over ~2 s = ~10/s; together ~20/s.
    assert steady.rate == pytest.approx(20.0, rel=0.01)
    assert steady.subtask_rates == {
        0: pytest.approx(10.0, rel=0.01),
        1: pytest.approx(10.0, rel=0.01),
    }
    assert steady.subtask_outputs == {0: 30, 1: 30}
    # Both subtasks are past their first flush from B's first output to A's last.
    assert steady.window == (10.5, pytest.approx(12.009))
    # One span over both would count B's first flush as steady work: 50 / 2.5 s.
    assert span_rate(times) == pytest.approx(50 / 2.509, rel=0.01)
    assert steady_rate(times[:10] + times[30:], [0] * 10 + [1] * 30) is None
    with pytest.raises(ValueError):
        steady_rate(times, groups[:-1])


def test_steady_rate_of_one_subtask_is_its_span_rate() -> None:
    ts = [100.0 + 4.0 * b + 0.0005 * i for b in range(5) for i in range(256)]
    steady = steady_rate(ts)
    assert steady is not None
    assert steady.rate == pytest.approx(span_rate(ts))
    assert steady.window == (100.0, pytest.approx(116.1275))
    assert steady_rate([5.0, 5.1]) is None


def test_percentile_rate_covers_a_run_without_pauses() -> None:
    from flinkai_bench.embed.stats import percentile_rate, percentile_window, steady_rate

    # 1,001 records written 1 ms apart: one flush, so no "after the first flush" rate.
    times = [100.0 + i / 1000 for i in range(1001)]
    assert steady_rate(times) is None
    window = percentile_window(times)
    assert window is not None
    start, end, n = window
    assert (start, end, n) == (times[100], times[900], 800)
    assert abs(percentile_rate(times) - 1000.0) < 1e-6  # type: ignore[operator]
    assert percentile_rate(times[:9]) is None  # too few records
    assert percentile_rate([5.0] * 50) is None  # no time between the quantiles
