"""JSDDriftDetector and the baseline detectors, on synthetic 384-dim vectors.

Time is always explicit (event times or a fake clock); nothing sleeps. The
synthetic "topics" are clusters of sub-topics around a random direction, so the
distances to a centroid spread over several histogram bins as real text does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from flinkai.drift.detector import (
    DriftConfig,
    DriftEvent,
    JSDDriftDetector,
    cosine_distance,
    js_divergence,
    jsd_significance,
    mean_shift_significance,
)
from flinkai.errors import ConfigError
from flinkai_bench.research.drift.baselines import (
    JSDWindowDetector,
    RiverDetector,
    RiverParams,
    RunningCentroidDistance,
    fixed_window_config,
    plain_config,
)

DIM = 384


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _topic(rng: np.random.Generator, n_sub: int = 6, spread: float = 0.8) -> np.ndarray:
    """Sub-topic centres scattered around one random direction."""
    base = _unit(rng.normal(size=DIM))
    return _unit(base + spread * _unit(rng.normal(size=(n_sub, DIM))))


def _draw(rng: np.random.Generator, topic: np.ndarray, n: int, noise: float = 1.0) -> np.ndarray:
    centres = topic[rng.integers(len(topic), size=n)]
    return _unit(centres + noise * rng.normal(size=(n, DIM)) / math.sqrt(DIM))


def _times(rng: np.random.Generator, duration_s: float, rate: float = 2.0) -> np.ndarray:
    gaps = rng.exponential(1.0 / rate, size=int(duration_s * rate * 1.5) + 10)
    t = np.cumsum(gaps)
    return t[t < duration_s]


def _events(
    detector: JSDDriftDetector, vectors: np.ndarray, times: np.ndarray
) -> Iterator[DriftEvent]:
    for v, t in zip(vectors, times.tolist(), strict=True):
        event = detector.update(v, t)
        if event is not None:
            yield event


# -- divergence and significance ------------------------------------------------------


def test_jsd_identical_is_zero() -> None:
    p = np.array([3.0, 0.0, 5.0, 2.0])
    assert js_divergence(p, p) == 0.0
    assert js_divergence(p, 2 * p) == pytest.approx(0.0, abs=1e-15)  # scale-free


def test_jsd_disjoint_is_ln2_and_symmetric() -> None:
    p, q = np.array([4.0, 1.0, 0.0, 0.0]), np.array([0.0, 0.0, 2.0, 7.0])
    assert js_divergence(p, q) == pytest.approx(math.log(2))
    assert js_divergence(q, p) == pytest.approx(js_divergence(p, q))


def test_jsd_smoothing_keeps_empty_bins_finite_and_shrinks_divergence() -> None:
    p, q = np.array([10.0, 0.0]), np.array([0.0, 10.0])
    smoothed = js_divergence(p, q, smoothing=0.5)
    assert 0.0 < smoothed < math.log(2)


@pytest.mark.parametrize(
    ("p", "q"),
    [([1.0, 2.0], [1.0, 2.0, 3.0]), ([0.0, 0.0], [1.0, 1.0]), ([-1.0, 2.0], [1.0, 1.0])],
)
def test_jsd_rejects_bad_histograms(p: list[float], q: list[float]) -> None:
    with pytest.raises(ValueError):
        js_divergence(np.array(p), np.array(q))


def test_significance_is_roughly_standard_normal_under_the_null() -> None:
    rng = np.random.default_rng(7)
    probs = np.array([0.05, 0.15, 0.3, 0.3, 0.15, 0.05])
    sig = []
    for _ in range(2000):
        a = rng.multinomial(60, probs).astype(float)
        b = rng.multinomial(300, probs).astype(float)
        dof = int(np.count_nonzero(a + b)) - 1
        sig.append(jsd_significance(js_divergence(a, b), 60, 300, dof))
    assert abs(np.mean(sig)) < 0.3
    assert 0.8 < np.std(sig) < 1.25
    assert max(sig) < 5.0


def test_significance_grows_with_divergence_and_sample_size() -> None:
    assert jsd_significance(0.05, 60, 300, 8) < jsd_significance(0.1, 60, 300, 8)
    assert jsd_significance(0.05, 30, 300, 8) < jsd_significance(0.05, 90, 300, 8)
    assert jsd_significance(0.1, 0, 300, 8) == 0.0
    assert jsd_significance(0.1, 60, 300, 0) == 0.0


def test_mean_shift_is_heavier_tailed_for_small_samples() -> None:
    # Same t statistic; fewer samples must give a smaller deviate.
    small = mean_shift_significance(
        np.array([10.0, 10.0 + 9 * 0.01]), 10, np.array([0.0, 0.09]), 10
    )
    assert small[0] == pytest.approx(1.0)
    assert mean_shift_significance(np.array([5.0, 5.0]), 5, np.array([5.0, 5.0]), 5) == (0.0, 0.0)
    assert mean_shift_significance(np.array([1.0, 1.0]), 1, np.array([1.0, 1.0]), 10) == (0.0, 0.0)


def test_cosine_distance_edges() -> None:
    x = np.array([1.0, 0.0])
    assert cosine_distance(x, x) == 0.0
    assert cosine_distance(x, -x) == 2.0
    assert cosine_distance(x, np.zeros(2)) == 1.0


# -- the detector -----------------------------------------------------------------------


def test_abrupt_shift_detected_within_one_period() -> None:
    rng = np.random.default_rng(1)
    a, b = _topic(rng), _topic(rng)
    t_change = 913.7  # deliberately not on the 30 s grid
    times = _times(rng, 1500)
    after = times >= t_change
    vectors = np.where(after[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times)))
    detector = JSDDriftDetector()
    events = list(_events(detector, vectors, times))
    assert len(events) == 1
    event = events[0]
    assert t_change <= event.period_end_s <= t_change + detector.cfg.period_s
    assert event.period_start_s < event.period_end_s
    assert event.z > detector.cfg.z_threshold
    assert event.significance >= detector.cfg.min_significance
    assert 0.0 < event.jsd <= math.log(2)
    assert event.n >= detector.cfg.min_samples
    assert detector.drift_count == 1


def test_no_alarm_on_stationary_stream_of_several_hundred_periods() -> None:
    rng = np.random.default_rng(2)
    topic = _topic(rng)
    times = _times(rng, 300 * 30.0, rate=1.5)  # 300 periods, ~13.5k events
    detector = JSDDriftDetector()
    assert list(_events(detector, _draw(rng, topic, len(times)), times)) == []
    assert detector.last is not None and detector.last.warm
    assert detector.score < detector.cfg.min_significance


def test_no_alarm_during_warm_up_even_on_a_shift() -> None:
    rng = np.random.default_rng(3)
    a, b = _topic(rng), _topic(rng)
    times = _times(rng, 150)  # 5 periods: the rolling history is not full yet
    vectors = np.where((times >= 95)[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times)))
    detector = JSDDriftDetector()
    assert list(_events(detector, vectors, times)) == []
    assert detector.advance_to(150.0) is None
    assert detector.score == 0.0


def test_rebaselines_after_drift_and_accepts_the_new_regime() -> None:
    rng = np.random.default_rng(4)
    a, b = _topic(rng), _topic(rng)
    times = _times(rng, 2400)
    vectors = np.where(
        (times >= 700)[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times))
    )
    detector = JSDDriftDetector()
    events = list(_events(detector, vectors, times))
    # One alarm for the change, none for the 28 minutes of the new topic after it.
    assert [round(e.period_end_s) // 30 for e in events] == [round(events[0].period_end_s) // 30]
    assert 700 <= events[0].period_end_s <= 730


def test_fake_clock_drives_processing_time() -> None:
    rng = np.random.default_rng(5)
    a, b = _topic(rng), _topic(rng)
    now = [0.0]
    detector = JSDDriftDetector(clock=lambda: now[0])
    events = []
    for i in range(2 * 1200):
        now[0] = i * 0.5
        topic = a if now[0] < 600 else b
        event = detector.update(_draw(rng, topic, 1)[0])
        if event is not None:
            events.append(event)
    assert len(events) == 1
    assert 600 <= events[0].period_end_s <= 630


def test_time_is_required_without_clock() -> None:
    with pytest.raises(ValueError, match="clock"):
        JSDDriftDetector().update(np.ones(DIM))


def test_sparse_periods_are_skipped() -> None:
    rng = np.random.default_rng(6)
    topic = _topic(rng)
    detector = JSDDriftDetector(DriftConfig(min_samples=10))
    # 5 events per 30 s period: below min_samples, so nothing is ever evaluated.
    times = np.arange(0, 3000, 6.0)
    assert list(_events(detector, _draw(rng, topic, len(times)), times)) == []
    assert detector.last is None


def test_constant_stream_has_zero_std_history_and_then_detects_a_switch() -> None:
    v, w = np.zeros(DIM), np.zeros(DIM)
    v[0], w[1] = 1.0, 1.0
    detector = JSDDriftDetector()
    events = []
    for i in range(2 * 900):
        t = i * 0.5
        event = detector.update(v if t < 600 else w, t)
        if event is not None:
            events.append(event)
    # Identical histograms give JSD 0 and a zero-std history; the floor keeps z finite.
    assert len(events) == 1
    assert math.isfinite(events[0].z)
    assert 600 <= events[0].period_end_s <= 630


def test_long_gap_closes_in_one_step() -> None:
    rng = np.random.default_rng(8)
    detector = JSDDriftDetector()
    detector.update(_draw(rng, _topic(rng), 1)[0], 0.0)
    assert detector.advance_to(1e12) is None  # would be ~3e10 periods one by one


def test_rejects_zero_and_resized_embeddings() -> None:
    detector = JSDDriftDetector()
    with pytest.raises(ValueError, match="norm"):
        detector.update(np.zeros(DIM), 0.0)
    with pytest.raises(ValueError, match="norm"):
        detector.update(np.full(DIM, np.nan), 0.0)
    detector.update(np.ones(DIM), 0.0)
    with pytest.raises(ValueError, match="dim"):
        detector.update(np.ones(DIM + 1), 1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"period_s": 0},
        {"bins": 1},
        {"history": 1},
        {"min_samples": 1},
        {"std_floor": 0},
        {"reference_periods": 0},
        {"checks_per_period": 0},
        {"baseline_span": 0},
        {"z_threshold": math.nan},
        {"smoothing": -1},
    ],
)
def test_invalid_config(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        DriftConfig(**kwargs)  # type: ignore[arg-type]


# -- baselines --------------------------------------------------------------------------


def test_plain_and_fixed_window_configs() -> None:
    plain = plain_config()
    assert (plain.reference_periods, plain.normalize, plain.baseline) == (1, False, False)
    assert plain.min_significance == -math.inf
    fixed = fixed_window_config()
    assert (fixed.period_s, fixed.checks_per_period, fixed.min_samples) == (10.0, 1, 10)


def test_jsd_window_detector_reports_detection_times() -> None:
    rng = np.random.default_rng(9)
    a, b = _topic(rng), _topic(rng)
    times = _times(rng, 1200)
    vectors = np.where(
        (times >= 800)[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times))
    )
    det = JSDWindowDetector("fixed-10s", fixed_window_config())
    hits = [h for v, t in zip(vectors, times.tolist(), strict=True) if (h := det.update(v, t))]
    assert len(hits) == 1 and 800 <= hits[0] <= 820


def test_running_centroid_distance() -> None:
    feature = RunningCentroidDistance(warmup_events=2)
    x, y = np.array([1.0, 0.0]), np.array([0.0, 3.0])
    assert feature.distance(x) is None
    assert feature.distance(x) is None
    assert feature.distance(y) == pytest.approx(1.0)
    feature.reset()
    assert feature.distance(y) is None
    with pytest.raises(ValueError):
        feature.distance(np.zeros(2))


def test_river_detectors_flag_an_abrupt_shift() -> None:
    pytest.importorskip("river")
    rng = np.random.default_rng(10)
    a, b = _topic(rng), _topic(rng)
    times = _times(rng, 600)
    vectors = np.where(
        (times >= 300)[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times))
    )
    for kind in ("adwin", "page_hinkley"):
        det = RiverDetector(kind, RiverParams(kind, {"threshold": 5.0} if kind != "adwin" else {}))
        hits = [h for v, t in zip(vectors, times.tolist(), strict=True) if (h := det.update(v, t))]
        assert hits and 300 <= hits[0] <= 400, (kind, hits)


def test_pickled_state_resumes_identically() -> None:
    # A Flink operator keeps the detector in keyed state as pickled bytes.
    import pickle

    rng = np.random.default_rng(11)
    a, b = _topic(rng), _topic(rng)
    times = _times(rng, 1200)
    vectors = np.where(
        (times >= 800)[:, None], _draw(rng, b, len(times)), _draw(rng, a, len(times))
    )
    half = len(times) // 2
    original = JSDDriftDetector()
    list(_events(original, vectors[:half], times[:half]))
    restored = pickle.loads(pickle.dumps(original))
    rest_a = list(_events(original, vectors[half:], times[half:]))
    rest_b = list(_events(restored, vectors[half:], times[half:]))
    assert rest_a == rest_b and len(rest_a) == 1
