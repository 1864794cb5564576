"""The windows bench's arithmetic: events to windows, latencies, throughput, options."""

from __future__ import annotations

import pytest

from flinkai.errors import SetupError
from flinkai_bench.windows import WindowsOptions, event_latencies, figures, processing_rate


def _w(start: int, end: int, n: int, delay: float = 0.0) -> dict[str, object]:
    return {"window_start_ms": start, "window_end_ms": end, "n": n, "delay_ms": delay}


def test_each_event_takes_its_windows_close_time() -> None:
    sent = [100, 200, 300, 1200, 1500]
    windows = [_w(0, 1000, 3), _w(1000, 2000, 2)]
    assert event_latencies(sent, windows) == [900.0, 800.0, 700.0, 800.0, 500.0]


@pytest.mark.parametrize("n", [4, 6])
def test_a_lost_or_duplicated_event_is_an_error(n: int) -> None:
    with pytest.raises(ValueError, match=f"hold {n} events, 5 were sent"):
        event_latencies([0] * 5, [_w(0, 1000, n)])


def test_figures_leave_out_the_warm_up() -> None:
    # 2 warm-up events in the first window; 4 measured events in two windows.
    sent = [0, 0, 5000, 5100, 5200, 9000]
    windows = [_w(0, 1000, 2), _w(5000, 7000, 3, 400.0), _w(7000, 10000, 1, 900.0)]
    f = figures("paced", "adaptive", sent, windows, skip=2)
    assert f.events == 4 and f.windows == 2
    assert f.sent_per_s == pytest.approx(3 / 4.0)  # 4 events sent over 4 s
    # Processed at 5,100 + 400 and 9,000 + 900 ms: 1 event in 4.4 s after the first.
    assert f.events_per_s == pytest.approx(1 / 4.4)
    assert f.p50_ms == pytest.approx(1850.0)  # latencies 2000, 1900, 1800, 1000
    assert f.mean_window_ms == 2500 and f.max_window_ms == 3000
    assert f.max_delay_ms == 900.0


def test_the_rate_comes_from_processing_times_not_window_lengths() -> None:
    # A backlog sent at once: the second 100 events were processed 1 s after the first.
    sent = [0] * 200
    short = [_w(0, 1000, 100, 500.0), _w(1000, 2000, 100, 1500.0)]
    long = [_w(0, 1000, 100, 500.0), _w(1000, 9000, 100, 1500.0)]
    assert processing_rate(sent, short) == pytest.approx(100.0)
    assert processing_rate(sent, long) == pytest.approx(100.0)
    assert processing_rate(sent, short[:1]) is None


def test_a_window_holding_warm_up_and_measured_events_counts_as_measured() -> None:
    f = figures("paced", "fixed", [0, 0, 10], [_w(0, 1000, 3)], skip=2)
    assert f.events == 1 and f.windows == 1 and f.p99_ms == pytest.approx(990.0)


def test_fixed_mode_clamps_to_the_base() -> None:
    o = WindowsOptions()
    fixed = o.window_for("fixed")
    assert fixed.min_ms == fixed.max_ms == fixed.base_ms == o.window.base_ms
    assert o.window_for("adaptive") == o.window


@pytest.mark.parametrize(
    "kwargs",
    [{"rate": 0}, {"backlog": 0}, {"loads": ("burst",)}, {"modes": ()}],
)
def test_bad_options_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(SetupError, match="bench windows"):
        WindowsOptions(**kwargs)  # type: ignore[arg-type]
