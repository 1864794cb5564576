"""The per-event CUSUM drift detector: statistic, calibration, state round trip."""

from __future__ import annotations

import io
import math
import pickle

import numpy as np
import pytest

from flinkai.drift.errors import CalibrationError
from flinkai.drift.sequential import (
    CusumConfig,
    CusumDriftDetector,
    calibrate_threshold,
    cusum_path,
)
from flinkai.errors import ConfigError

DIM = 16
# Small reference and calibration, so a test builds one in a few hundred events.
SMALL = CusumConfig(
    reference_events=30, null_events=120, settle_s=20.0, chains=64, chain_events=1000
)


Events = list[tuple[np.ndarray, float]]


def _events(n: int, centre: int, seed: int, t0: float = 0.0, step: float = 0.5) -> Events:
    """Unit-ish vectors scattered around one axis: distances to the centroid vary."""
    rng = np.random.default_rng(seed)
    base = np.eye(DIM)[centre]
    return [(base + rng.normal(0, 0.3, DIM), t0 + i * step) for i in range(n)]


def _run(det: CusumDriftDetector, events: Events) -> list[float]:
    return [e.period_end_s for x, t in events if (e := det.update(x, t)) is not None]


def test_cusum_path_is_the_page_recursion() -> None:
    z = np.array([0.5, 2.0, -3.0, 1.5, 1.5, 0.2])
    s, want = 0.0, []
    for v in z:
        s = max(0.0, s + v - 1.0)
        want.append(s)
    assert cusum_path(z, 1.0).tolist() == pytest.approx(want)
    assert cusum_path(z, 1.0)[2] == 0.0  # a large negative step resets it
    assert cusum_path(np.zeros(5), 0.5, start=2.0).tolist() == pytest.approx([1.5, 1.0, 0.5, 0, 0])


def test_calibrated_threshold_gives_the_target_run_length_on_fresh_data() -> None:
    """The ARL a threshold was fitted for is what a fresh stream from the null shows."""
    rng = np.random.default_rng(0)
    null = rng.standard_normal(2000)
    target = 2000.0  # small enough to measure directly below
    cal = calibrate_threshold(null, 0.5, target, np.random.default_rng(1), chains=256)
    assert cal.slope > 0 and cal.h > 0
    # Measured: mean events between alarms (restarting after each) on new N(0, 1) data.
    z = np.random.default_rng(2).standard_normal(600_000)
    alarms, s = 0, 0.0
    for v in z:
        s = max(0.0, s + v - 0.5)
        if s > cal.h:
            alarms, s = alarms + 1, 0.0
    measured = len(z) / alarms
    # The bootstrap adds jitter and parameter uncertainty, so it errs long, not short.
    assert target * 0.7 <= measured <= target * 4


def test_threshold_grows_with_the_run_length_and_falls_with_the_allowance() -> None:
    null = np.random.default_rng(3).standard_normal(300)

    def h(k: float, arl: float) -> float:
        return calibrate_threshold(null, k, arl, np.random.default_rng(4)).h

    assert h(1.0, 1e6) > h(1.0, 1e4) > 0
    assert h(0.25, 1e5) > h(1.0, 1e5)


def test_calibration_refuses_a_sample_without_spread() -> None:
    with pytest.raises(CalibrationError, match="spread"):
        calibrate_threshold(np.full(100, 0.7), 1.0, 1e5, np.random.default_rng(0))
    with pytest.raises(CalibrationError, match=">= 20"):
        calibrate_threshold(np.arange(5.0), 1.0, 1e5, np.random.default_rng(0))


def test_detects_a_jump_within_a_few_events_and_stays_quiet_before() -> None:
    det = CusumDriftDetector(SMALL)
    before = _events(600, 0, seed=1)
    assert _run(det, before) == []
    assert det.phase == "monitor" and det.thresholds is not None
    assert 0.0 <= det.score < 1.0
    after = _events(40, 1, seed=2, t0=300.0)
    events = [det.update(x, t) for x, t in after]
    fired = [i for i, e in enumerate(events) if e is not None]
    assert fired and fired[0] < 5, fired
    event = events[fired[0]]
    assert event is not None
    assert event.statistic == "cusum" and event.significance > 1.0 and event.jsd > 0
    assert 300.0 <= event.period_start_s <= event.period_end_s
    assert det.drift_count == 1 and det.phase == "settle"


def test_no_alarm_on_a_long_stationary_stream() -> None:
    det = CusumDriftDetector(SMALL)
    assert _run(det, _events(10_000, 0, seed=5)) == []
    assert det.phase == "monitor"


def test_rebuilds_its_reference_after_settling() -> None:
    det = CusumDriftDetector(SMALL)
    _run(det, _events(300, 0, seed=6))
    hits = _run(det, _events(400, 1, seed=7, t0=150.0))
    assert len(hits) == 1  # then a new reference on the new content, and quiet
    assert det.phase == "monitor"


def test_clock_is_injected_and_bad_input_is_refused() -> None:
    now = [100.0]
    det = CusumDriftDetector(SMALL, clock=lambda: now[0])
    det.update(np.ones(DIM))
    with pytest.raises(ValueError, match="clock"):
        CusumDriftDetector(SMALL).update(np.ones(DIM))
    with pytest.raises(ValueError, match="norm"):
        det.update(np.zeros(DIM), 1.0)
    with pytest.raises(ValueError, match="norm"):
        det.update(np.full(DIM, math.nan), 1.0)
    with pytest.raises(ValueError, match="dim"):
        det.update(np.ones(DIM + 1), 1.0)
    with pytest.raises(ConfigError, match="null_events"):
        CusumConfig(null_events=3)


class _PlainDataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "builtins" or module.split(".")[0] == "numpy":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"state holds {module}.{name}")


@pytest.mark.parametrize("cut", [10, 80, 500, 615])  # reference, null, monitor, settle
def test_state_round_trip_continues_exactly(cut: int) -> None:
    events = _events(600, 0, seed=8) + _events(200, 1, seed=9, t0=300.0)
    whole = CusumDriftDetector(SMALL)
    got_whole = _run(whole, events)
    first = CusumDriftDetector(SMALL)
    got = _run(first, events[:cut])
    data = pickle.dumps(first.snapshot())
    snap = _PlainDataOnly(io.BytesIO(data)).load()
    assert b"CusumConfig" not in data
    restored = CusumDriftDetector.from_snapshot(snap, SMALL)
    assert restored.phase == first.phase
    got += _run(restored, events[cut:])
    assert got == got_whole and got_whole
    assert restored.snapshot()["thresholds"] == whole.snapshot()["thresholds"]


def test_unknown_snapshot_version_starts_afresh() -> None:
    det = CusumDriftDetector(SMALL)
    _run(det, _events(300, 0, seed=10))
    snap = det.snapshot() | {"version": 99}
    assert CusumDriftDetector.from_snapshot(snap, SMALL).phase == "reference"
