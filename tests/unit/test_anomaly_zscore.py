"""Beam's ZScore (flinkai.anomaly.zscore) against a sliding-window recomputation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flinkai.anomaly.zscore import ZScore


def _stream(n: int = 1500) -> np.ndarray:
    return np.random.default_rng(7).normal(10, 2, size=n)


def test_zscore_matches_a_sliding_window_recomputation() -> None:
    xs = _stream()
    det = ZScore(window=100)
    for i, x in enumerate(xs):
        got = det.score_one(float(x))
        past = xs[max(0, i - 100) : i]
        if len(past) < 2:
            assert math.isnan(got)
        else:
            want = abs((x - past.mean()) / past.std(ddof=1))
            assert got == pytest.approx(want, rel=1e-7)
        det.learn_one(float(x))
