"""The bench's streaming baselines: Beam's RobustZScore and IQR definitions, river's HST."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flinkai_bench.research.anomaly.baselines import (
    IQR,
    HalfSpaceTrees,
    RobustZScore,
    SlidingQuantile,
)


def _stream(n: int = 1500) -> np.ndarray:
    return np.random.default_rng(7).normal(10, 2, size=n)


def test_quantile_and_iqr_match_numpy_linear_interpolation() -> None:
    xs = _stream()
    q1, iqr = SlidingQuantile(0.25, window=50), IQR(window=50)
    assert math.isnan(iqr.score_one(1.0))
    for i, x in enumerate(xs):
        past = xs[max(0, i - 50) : i]
        if len(past):
            lo, hi = np.quantile(past, [0.25, 0.75])
            assert q1.get() == pytest.approx(lo)
            if hi - lo < 1e-9:
                want = 0.0  # one value so far: no spread
            elif x > hi:
                want = (x - hi) / (hi - lo)
            else:
                want = (lo - x) / (hi - lo) if x < lo else 0.0
            assert iqr.score_one(float(x)) == pytest.approx(want)
        q1.push(float(x))
        iqr.learn_one(float(x))


def test_robust_zscore_uses_the_online_mad() -> None:
    det = RobustZScore(window=1000)
    for x in (1.0, 2.0, 3.0, 4.0):
        det.learn_one(x)
    # medians after each push: 1, 1.5, 2, 2.5 -> |x - median|: 0, 0.5, 1, 1.5 -> MAD 0.75
    assert det.score_one(10.0) == pytest.approx(0.6745 * (10.0 - 2.5) / 0.75)
    flat = RobustZScore()
    for _ in range(5):
        flat.learn_one(3.0)
    assert flat.score_one(100.0) == 0.0  # zero spread scores 0, as in Beam


def test_half_space_trees_scores_an_outlier_higher() -> None:
    det = HalfSpaceTrees(seed=1)
    for x in _stream(600):
        det.score_one(float(x))
        det.learn_one(float(x))
    assert det.score_one(60.0) > det.score_one(10.0)
