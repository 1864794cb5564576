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


# -- likelihood = "numenta" ----------------------------------------------------------------

_NUMENTA = ScorerConfig(likelihood="numenta", peak_window=0, numenta_learning_period=20,
                        numenta_estimation_samples=30, numenta_history=200)  # fmt: skip


def _points(n: int = 400) -> list[tuple[float, float]]:
    rng = np.random.default_rng(5)
    values = np.cumsum(rng.normal(0.0, 1.0, n))
    return [(abs(float(e)), float(v)) for e, v in zip(rng.normal(0.0, 0.5, n), values, strict=True)]


def test_numenta_option_is_numentas_likelihood_over_bounded_errors() -> None:
    from flinkai.anomaly.likelihood import NumentaConfig, NumentaLikelihood

    scorer = ErrorScorer(_NUMENTA)
    reference = NumentaLikelihood(NumentaConfig(learning_period=20, estimation_samples=30,
                                                historic_window=200))  # fmt: skip
    points = _points()
    got = [scorer.score(e, v) for e, v in points]
    expected = [reference.score(e / (1.0 + e), v) for e, v in points]
    assert got == expected
    # Control: the default (gaussian) scorer gives other scores on the same errors.
    assert [ErrorScorer(ScorerConfig(peak_window=0)).score(e) for e, _ in points] != got


def test_numenta_option_restores_mid_stream() -> None:
    points = _points()
    whole = ErrorScorer(_NUMENTA)
    expected = [whole.score(e, v) for e, v in points]
    scorer = ErrorScorer(_NUMENTA)
    got = []
    for e, v in points:
        scorer = ErrorScorer.from_snapshot(scorer.snapshot(), _NUMENTA)
        got.append(scorer.score(e, v))
    assert got == expected


def test_numenta_option_is_checked() -> None:
    with pytest.raises(ValueError, match="likelihood"):
        ScorerConfig(likelihood="htm")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ScorerConfig(likelihood="numenta", numenta_history=0)


def test_operator_accepts_the_numenta_option() -> None:
    from flinkai.operators.anomaly import parse_options

    opts = parse_options({"key": "k", "time": "t", "value": "v",
                          "scorer.likelihood": "numenta", "scorer.numenta_history": "3000"})  # fmt: skip
    assert opts.detector.scorer.likelihood == "numenta"
    assert opts.detector.scorer.numenta_history == 3000
