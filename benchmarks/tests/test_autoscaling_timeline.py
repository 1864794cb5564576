"""The scaling harness's pure parts: timeline figures, backlog signals, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flinkai_bench.autoscaling.timeline import (
    Sample,
    ScaleEvent,
    phases,
    rate_series,
    reduce_timeline,
)


def _sample(
    t: float,
    replicas: int,
    p: int | None,
    running: bool,
    pending: float | None,
    proposal: int | None,
    committed: int,
) -> Sample:
    signal = None if pending is None else pending / 32
    produced = committed + int(pending or 0)  # outstanding input = what the source has
    return Sample(t, replicas, replicas, p, running, pending, signal, proposal, committed, produced)


def timeline() -> tuple[list[Sample], list[ScaleEvent]]:
    """1 TM saturated, up to 2 (restart), up to 3, drain, down to 2."""
    s = [
        _sample(0, 1, 1, True, 0, 1, 0),
        _sample(10, 1, 1, True, 2000, 3, 500),  # crossing
        _sample(12, 1, 1, True, 2000, 3, 700),  # decision 1 -> 2 at 12
        _sample(20, 2, 1, True, 2000, 2, 1300),
        _sample(25, 2, 2, False, None, None, 1300),  # restarting
        _sample(30, 2, 2, True, 2000, 3, 1300),  # running at 2; decision 2 -> 3 at 30
        _sample(40, 3, 2, True, 2000, 3, 2300),
        _sample(45, 3, 3, True, 2000, 3, 2300),  # running at 3
        _sample(60, 3, 3, True, 1000, 3, 4300),  # load stopped at 60
        _sample(65, 3, 3, True, 0, 1, 5000),  # under target
        _sample(80, 3, 3, True, 0, 1, 5200),  # decision 3 -> 2 at 80
        _sample(90, 2, 2, True, 0, 1, 5200),  # running at 2
    ]
    e = [ScaleEvent(12, 1, 2), ScaleEvent(30, 2, 3), ScaleEvent(80, 3, 2)]
    return s, e


def test_reduce_timeline_times_each_rescale() -> None:
    samples, events = timeline()
    f = reduce_timeline(samples, events, target=10.0, load_stopped_t=60.0, min_phase_s=5.0)
    up1, up2, down = f.scale_events
    assert (up1.crossed_t, up1.decided_t, up1.running_t) == (10, 12, 30)
    assert up1.cross_to_running_s == 20 and up1.decide_to_running_s == 18
    assert (up1.parallelism_before, up1.parallelism_after) == (1, 2)
    assert (up2.crossed_t, up2.running_t, up2.parallelism_after) == (30, 45, 3)
    assert down.kind == "down" and (down.crossed_t, down.running_t) == (65, 90)
    assert f.parallelism_seen == [1, 2, 3, 2]
    assert f.under_target_t == 65 and f.cross_to_under_s == 55
    assert f.under_before_load_stopped is False
    assert f.rate_before == pytest.approx((1300 - 500) / 10)  # saturated from t=10 at p=1
    assert f.rate_after == pytest.approx((4300 - 2300) / 15)


def test_a_dip_after_the_restart_is_not_the_drain() -> None:
    samples, events = timeline()
    # p=3 runs at 45 with a moment's 0 from the restarted source, then the backlog
    # stands again until the load stops at 60.
    samples[7] = _sample(45, 3, 3, True, 0, 1, 2300)
    f = reduce_timeline(samples, events, target=10.0, load_stopped_t=60.0, min_phase_s=5.0)
    assert f.under_target_t == 65 and f.stop_to_under_s == 5


def test_rates_only_from_saturated_stretches() -> None:
    samples, _ = timeline()
    spans = phases(samples, 5.0)
    assert [(p.parallelism, p.saturated, p.start_t) for p in spans] == [
        (1, False, 0),
        (1, True, 10),
        (2, True, 30),
        (3, True, 45),
        (3, False, 65),
        (2, False, 90),
    ]


def test_a_run_that_never_rescaled_has_no_times() -> None:
    samples = [_sample(t, 1, 1, True, 2000, 3, int(t * 10)) for t in range(0, 30, 5)]
    f = reduce_timeline(samples, [ScaleEvent(10, 1, 2)], target=10.0)
    assert f.scale_events[0].running_t is None and f.scale_events[0].cross_to_running_s is None
    assert f.parallelism_seen == [1]


def test_rate_series_is_trailing() -> None:
    samples = [_sample(t, 1, 1, True, 1, 1, t * 100) for t in range(0, 21, 5)]
    assert rate_series(samples, 10.0)[-1] == (20, pytest.approx(100.0))


def test_report_writes_json_and_png(tmp_path: Path) -> None:
    from flinkai_bench.scaling.harness import ScalingRun
    from flinkai_bench.scaling.report import draw_timeline, payload, write_json

    samples, events = timeline()
    run = ScalingRun(target=10.0, batch_size=32, samples=samples, events=events)
    run.expected_ids = ["s0", "s1"]
    figures = reduce_timeline(samples, events, target=10.0, load_stopped_t=60.0)
    path = write_json(payload(run, figures, {"cpu_cores": 2}), tmp_path / "r" / "scaling.json")
    data = json.loads(path.read_text())
    assert [e["kind"] for e in data["events"]] == ["up", "up", "down"]
    assert data["figures"]["parallelism_seen"] == [1, 2, 3, 2]
    assert len(data["samples"]) == len(samples) and data["exactly_once"]["sent"] == 2
    png = draw_timeline(run, tmp_path / "scaling.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_backlog_signals_count_what_pending_records_does_not_see() -> None:
    from flinkai_bench.scaling.report import backlog_signals

    # (pending, committed, produced): prefetched and uncheckpointed records are in the
    # group lag (produced - committed) only.
    rows = [(0.0, 0, 1000), (500.0, 0, 1000), (0.0, 900, 1000), (None, 900, 1000)]
    samples = [
        Sample(float(i), 1, 1, 1, p is not None, p, None, None, c, n)
        for i, (p, c, n) in enumerate(rows)
    ]
    got = backlog_signals(samples, batch=64)
    assert got["ticks"] == 3  # the tick without a running source is left out
    assert got["pending_peak"] == 500.0 and got["group_lag_peak"] == 1000.0
    assert got["ticks_pending_under_batch_lag_over_batch"] == 2
    assert got["hidden_max"] == 1000.0
    assert backlog_signals([], batch=64) == {"ticks": 0}


def test_backlog_signals_compare_the_source_lag_where_it_was_read() -> None:
    from flinkai_bench.scaling.report import backlog_signals

    # (pending, source lag): the source lag holds the prefetch pendingRecords misses.
    rows = [(0.0, 800.0), (500.0, 700.0), (100.0, 10.0), (0.0, None)]
    samples = [
        Sample(float(i), 1, 1, 1, True, p, None, None, 0, 1000, lag)
        for i, (p, lag) in enumerate(rows)
    ]
    got = backlog_signals(samples, batch=64)
    assert got["source_lag_ticks"] == 3  # the tick without a source-lag read is left out
    assert got["source_lag_peak"] == 800.0
    assert got["prefetch_max"] == 800.0 and got["prefetch_mean"] == (800 + 200 - 90) / 3
    assert got["ticks_pending_under_batch_source_lag_over_batch"] == 1
    assert got["ticks_source_lag_under_batch_pending_over_batch"] == 1
    # A run that never read it (no broker metrics) reports none of these keys.
    plain = [Sample(0.0, 1, 1, 1, True, 0.0, None, None, 0, 10)]
    assert "source_lag_ticks" not in backlog_signals(plain, batch=64)
