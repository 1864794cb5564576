"""Numenta's anomaly likelihood (flinkai.anomaly.likelihood) against hand-computed cases."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from flinkai.anomaly.likelihood import (
    MEAN_FLOOR,
    NO_OPINION,
    NULL_DISTRIBUTION,
    VARIANCE_FLOOR,
    YELLOW_TAIL,
    Gaussian,
    NumentaConfig,
    NumentaLikelihood,
    log_likelihood,
    moving_averages,
    tail_probability,
)

# Small constants so every number below can be worked out by hand.
SMALL = NumentaConfig(
    learning_period=2, estimation_samples=3, historic_window=100, reestimation_period=100,
    averaging_window=2, spatial=False,
)  # fmt: skip


def test_tail_is_two_sided() -> None:
    dist = Gaussian(0.5, 0.01)  # stdev 0.1
    # z = 2: Q(2) = 0.0227501319...
    assert tail_probability(0.7, dist) == pytest.approx(0.02275013194817922, rel=1e-12)
    # 0.3 is as far below the mean: the same tail, not 1 - Q(-2).
    assert tail_probability(0.3, dist) == pytest.approx(0.02275013194817922, rel=1e-12)
    assert tail_probability(0.5, dist) == pytest.approx(0.5)


def test_log_scale() -> None:
    assert log_likelihood(1.0) == pytest.approx(1.0)
    assert log_likelihood(0.0) == pytest.approx(0.0, abs=1e-9)
    # log(1e-5 + 1e-10) / log(1e-10) and log(1e-3 + 1e-10) / log(1e-10).
    assert log_likelihood(1 - 1e-5) == pytest.approx(0.49999956570768955, rel=1e-9)
    assert log_likelihood(1 - 1e-3) == pytest.approx(0.2999999956570554, rel=1e-9)


def test_moving_average_restarts_at_the_start() -> None:
    out = moving_averages(np.array([0.9, 0.9, 0.1, 0.3, 0.2]), 2)
    assert out.tolist() == pytest.approx([0.9, 0.9, 0.5, 0.2, 0.25])


def test_learning_then_first_fit_by_hand() -> None:
    lk = NumentaLikelihood(SMALL)
    raws = [0.9, 0.9, 0.1, 0.3, 0.2]
    # learning 2 + estimation 3: five points of no opinion (likelihood 0.5, log scale 0.03).
    learning = [lk.score(r, float(i)) for i, r in enumerate(raws)]
    assert learning == [log_likelihood(NO_OPINION)] * 5
    assert learning[0] == pytest.approx(0.0301, abs=1e-4)
    assert lk.dist is None
    out = lk.score(0.6, 5.0)
    # Fit at point 5: averages (window 2) [0.9, 0.9, 0.5, 0.2, 0.25], the first two
    # (the learning period) skipped: mean 0.95/3, variance 0.0516667/3.
    assert lk.dist is not None
    assert lk.dist.mean == pytest.approx(0.31666666666666665)
    assert lk.dist.variance == pytest.approx(0.017222222222222222)
    # Scored average (0.2 + 0.6) / 2 = 0.4: z = 0.0833333 / 0.1312335 = 0.635.
    z = (0.4 - 0.31666666666666665) / math.sqrt(0.017222222222222222)
    q = 0.5 * math.erfc(z / math.sqrt(2))
    assert out == pytest.approx(log_likelihood(1 - q), rel=1e-12)


def test_nab_learning_period_comes_from_probation() -> None:
    cfg = NumentaConfig.for_nab(750)
    assert (cfg.learning_period, cfg.estimation_samples) == (375, 375)
    cfg = NumentaConfig.for_nab(151)
    assert (cfg.learning_period, cfg.estimation_samples) == (75, 76)


def test_reestimated_only_every_period() -> None:
    cfg = NumentaConfig(learning_period=0, estimation_samples=4, historic_window=50,
                        reestimation_period=3, averaging_window=1, spatial=False)  # fmt: skip
    lk = NumentaLikelihood(cfg)
    fits = []
    for i in range(12):
        lk.score(0.1 * (i % 5), float(i))
        fits.append(lk.dist)
    # First fit at point 4 (first scored point), then at points 6 and 9 only.
    changes = [i for i in range(1, 12) if fits[i] != fits[i - 1]]
    assert fits[3] is None and changes == [4, 6, 9]


def test_floors_of_a_silent_detector() -> None:
    lk = NumentaLikelihood(SMALL)
    for i in range(7):
        lk.score(0.0, float(i % 3))
    assert lk.dist == Gaussian(MEAN_FLOOR, VARIANCE_FLOOR)


def test_flat_values_give_the_null_distribution() -> None:
    lk = NumentaLikelihood(SMALL)
    for r in [0.1, 0.2, 0.1, 0.3, 0.1]:
        lk.score(r, 7.0)
    out = lk.score(0.99, 7.0)
    assert lk.dist == NULL_DISTRIBUTION
    # Nothing is unlikely under it: the tail is about 0.5 and the score about 0.03.
    assert out == pytest.approx(log_likelihood(0.5), abs=1e-3)
    assert out < 0.05


def _primed(cfg: NumentaConfig) -> NumentaLikelihood:
    lk = NumentaLikelihood(cfg)
    for i in range(5):
        lk.score([0.1, 0.2][i % 2], float(i))
    return lk


def test_low_scores_are_unlikely_too() -> None:
    lk = _primed(SMALL)
    assert lk.dist is None
    # Fitted at the next point: the averages skip the first two, [0.15, 0.15, 0.15], so
    # the floors hold (mean 0.15, variance 0.0003, stdev 0.0173). The average of the
    # last raw score and this one, [0.1, 0.0], is 0.05: 5.8 stdev below the mean, as
    # unlikely as 0.25 would be above it.
    low = lk.score(0.0, 5.0)
    q = 0.5 * math.erfc((0.1 / math.sqrt(VARIANCE_FLOOR)) / math.sqrt(2))
    assert low == pytest.approx(log_likelihood(1 - q), rel=1e-9)
    assert low > log_likelihood(0.99)


def test_repeated_red_alerts_are_suppressed() -> None:
    on = _primed(SMALL)
    off = _primed(NumentaConfig(**{**SMALL.__dict__, "suppress_repeats": False}))
    first = [on.score(1.0, 5.0), off.score(1.0, 5.0)]
    second = [on.score(1.0, 6.0), off.score(1.0, 6.0)]
    # Averages 0.6 and 1.0, mean 0.15, stdev 0.0173: both red (tail far below 1e-5).
    assert first[0] == first[1] and first[0] > 0.5
    assert second[1] > 0.5  # control: without suppression the second is red too
    assert second[0] == pytest.approx(log_likelihood(1 - YELLOW_TAIL))  # 0.3


def test_value_outside_the_seen_range_scores_one() -> None:
    lk = NumentaLikelihood(NumentaConfig(**{**SMALL.__dict__, "spatial": True}))
    learning = log_likelihood(NO_OPINION)
    assert lk.score(0.0, 0.0) == learning  # one value: no range yet
    assert lk.score(0.0, 10.0) == learning  # range [0, 10]: tolerance 0.5
    assert lk.score(0.0, 10.4) == learning  # inside the tolerance
    assert lk.score(0.0, 11.0) == 1.0  # 11 > 10.4 + 0.52
    assert lk.score(0.0, -0.6) == 1.0  # below 0 - 0.55


def test_snapshot_restores_mid_stream() -> None:
    cfg = NumentaConfig(learning_period=3, estimation_samples=5, historic_window=20,
                        reestimation_period=7)  # fmt: skip
    stream = [(abs(math.sin(i * 0.7)) * 0.5, math.cos(i * 0.3) * 10 + i * 0.01) for i in range(80)]
    whole = NumentaLikelihood(cfg)
    expected = [whole.score(r, v) for r, v in stream]
    lk = NumentaLikelihood(cfg)
    got = []
    for r, v in stream:
        blob = pickle.dumps(lk.snapshot())
        lk = NumentaLikelihood.from_snapshot(pickle.loads(blob), cfg)
        got.append(lk.score(r, v))
    assert got == expected
    assert len({round(e, 6) for e in expected}) > 10  # the stream does exercise the scorer


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        NumentaConfig(historic_window=0)
    with pytest.raises(ValueError):
        NumentaConfig(learning_period=-1)
