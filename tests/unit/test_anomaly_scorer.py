"""The error scorer: log-scaled anomaly likelihood, peak gate, state round trip."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from flinkai.anomaly.features import ErrorScorer, ScorerConfig, log_likelihood_score


def _errors(n: int = 600, seed: int = 3) -> list[float]:
    rng = np.random.default_rng(seed)
    return [abs(float(e)) for e in rng.normal(0.0, 1.0, n)]


def test_log_likelihood_score_is_monotone_and_half_at_its_decades() -> None:
    zs = np.linspace(-3, 40, 500)
    scores = [log_likelihood_score(float(z), 10.0) for z in zs]
    assert all(b > a for a, b in itertools.pairwise(scores))
    assert all(0.0 <= s < 1.0 for s in scores)
    # P[N(0,1) > 6.3613] is about 1e-10: d = 10 = decades, so the score is 0.5.
    assert log_likelihood_score(6.3613, 10.0) == pytest.approx(0.5, abs=1e-3)
    # Far in the tail the score stays finite and below 1.
    assert log_likelihood_score(1e6, 10.0) < 1.0


def test_peak_gate_reports_the_onset_of_a_burst_not_every_point() -> None:
    errors = _errors()
    burst = range(400, 410)
    for i in burst:
        errors[i] = 30.0  # ten equal large errors in a row
    gated = ErrorScorer(ScorerConfig(peak_window=100))
    ungated = ErrorScorer(ScorerConfig(peak_window=0))
    g = [gated.score(e) for e in errors]
    u = [ungated.score(e) for e in errors]
    assert all(s == 0.0 for s in g[:100]) and all(s == 0.0 for s in u[:100])  # warm-up
    # Without the gate every point of the burst scores high; with it only the first.
    assert min(u[i] for i in burst) > 0.5
    assert g[400] == pytest.approx(u[400]) and g[400] > 0.5
    assert all(g[i] == 0.0 for i in burst if i > 400)
    # Where the gate lets a score through, it is the ungated score.
    assert all(a == 0.0 or a == pytest.approx(b) for a, b in zip(g, u, strict=True))


def test_scorer_config_rejects_bad_values() -> None:
    for bad in ({"short_window": 0}, {"long_rate": 0.0}, {"decades": 0.0}, {"peak_window": -1}):
        with pytest.raises(ValueError):
            ScorerConfig(**bad)


def test_snapshot_round_trip_continues_the_same_scores() -> None:
    errors = _errors()
    config = ScorerConfig(short_window=3)
    straight = ErrorScorer(config)
    want = [straight.score(e) for e in errors]
    first = ErrorScorer(config)
    got = [first.score(e) for e in errors[:350]]
    restored = ErrorScorer.from_snapshot(first.snapshot(), config)
    assert len(restored.peaks) == config.peak_window
    got += [restored.score(e) for e in errors[350:]]
    assert got == want
    assert any(s > 0 for s in want[350:])


def test_snapshot_without_peaks_loads_with_an_empty_gate() -> None:
    scorer = ErrorScorer(ScorerConfig())
    for e in _errors(200):
        scorer.score(e)
    old = {k: v for k, v in scorer.snapshot().items() if k != "peaks"}
    restored = ErrorScorer.from_snapshot(old, ScorerConfig())
    assert restored.peaks == [] and restored.n == scorer.n
    assert math.isfinite(restored.score(1.0))
