"""Z-score variants chosen leave-one-group-out (flinkai_bench.anomaly_variants)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flinkai.anomaly.nab import LabelledSeries, NabSeries, Window
from flinkai.anomaly.zscore import ZScore
from flinkai_bench.anomaly import _zscore_variants
from flinkai_bench.anomaly_variants import run_variant, variant_logo

N = 300


def _nab(name: str, values: np.ndarray, start: int) -> NabSeries:
    times = np.arange(len(values)).astype("datetime64[m]")
    return NabSeries(LabelledSeries(name, len(values), (Window(start, start + 9),)), times, values)


def _step_series(at: int) -> np.ndarray:
    rng = np.random.default_rng(at)
    values = rng.normal(0.0, 1.0, N)
    values[at:] += 50.0  # a level shift
    return values


def test_value_input_is_beams_zscore_scored_before_learnt() -> None:
    s = _nab("A/a.csv", _step_series(200), 200)
    det, expected = ZScore(100), []
    for v in s.values.tolist():
        expected.append(det.score_one(v))
        det.learn_one(v)
    assert np.allclose(run_variant(s, 100, "value"), expected, equal_nan=True)


def test_diff_input_scores_a_level_shift_once_and_skips_the_first_point() -> None:
    s = _nab("A/a.csv", _step_series(200), 200)
    diff = run_variant(s, 100, "diff")
    value = run_variant(s, 100, "value")
    assert math.isnan(diff[0])
    # Both spike at the shift; after it, the value's z-score stays high while the
    # difference is back to noise.
    assert diff[200] > 10 and value[200] > 10
    assert value[203] > 3 and diff[203] < 4


def test_unknown_input_and_bad_windows_are_refused() -> None:
    s = _nab("A/a.csv", _step_series(200), 200)
    with pytest.raises(ValueError, match="unknown z-score input"):
        run_variant(s, 100, "log")
    with pytest.raises(ValueError, match=">= 2"):
        variant_logo({"A/a.csv": s}, [1], ["value"], ["raw"])
    assert _zscore_variants(None, "value") is None
    assert _zscore_variants("100,x", "value") == "--zscore-windows: expected integers, got '100,x'"
    assert "each value must be >= 2" in str(_zscore_variants("1", "value"))
    assert "--zscore-inputs" in str(_zscore_variants("100", "value,log"))
    assert _zscore_variants("100, 300", "value,diff") == ([100, 300], ["value", "diff"])


def test_joint_choice_lists_every_variant_and_setting_per_fold() -> None:
    data = {f"{g}/{g.lower()}.csv": _nab(f"{g}/{g.lower()}.csv", _step_series(150 + i * 20), 150 + i * 20)
            for i, g in enumerate("ABC")}  # fmt: skip
    out = variant_logo(data, [50, 100], ["value", "diff"], ["raw"])
    r = out["scorers"]["raw"]
    assert [(s["window"], s["input"]) for s in r["settings"]] == [
        (50, "value"), (50, "diff"), (100, "value"), (100, "diff")
    ]  # fmt: skip
    assert [f["held_out"] for f in r["folds"]] == ["A", "B", "C"]
    for fold in r["folds"]:
        assert fold["setting"] == r["settings"][fold["candidate"]]
    assert r["in_sample_best_setting"] == r["settings"][r["in_sample_best_candidate"]]


def test_cad_operator_raw_scores_give_its_scores_under_its_rest_period() -> None:
    from flinkai.anomaly.cad import rest_masked
    from flinkai.anomaly.contextual import DEFAULT_REST_PERIOD
    from flinkai_bench.anomaly import run_detector

    data = {f"{g}/{g.lower()}.csv": _nab(f"{g}/{g.lower()}.csv", _step_series(150 + i * 20), 150 + i * 20)
            for i, g in enumerate("AB")}  # fmt: skip
    run = run_detector("cad_operator", data, cad_max_contexts=50, round_trip_every=7)
    for key in data:
        assert (
            rest_masked(run.cad_raw[key].tolist(), DEFAULT_REST_PERIOD) == run.scores[key].tolist()
        )
        # control: another rest period hides other scores
        assert rest_masked(run.cad_raw[key].tolist(), 1) != run.scores[key].tolist()
    assert run.operator_ms and run.state_bytes and run.model_version == "cad"
