"""The operator's z-score detector (model 'zscore') with Numenta's likelihood: the default."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest

from flinkai.anomaly.detector import DetectorConfig, PointRejected
from flinkai.anomaly.features import STREAM_NUMENTA, ScorerConfig
from flinkai.anomaly.keyed import new_detector, open_model, restore_detector
from flinkai.anomaly.statistical import ZScoreModel, ZScoreSeriesDetector
from flinkai.anomaly.zscore import ZScore
from flinkai.operators.anomaly import parse_options, process_point
from flinkai_bench.research.anomaly.scorers import DEFAULTS, apply_scorer

START_MS = 1764576000000
STEP_MS = 300_000
#: Short periods so a short series gets past Numenta's learning period.
_SHORT = dataclasses.replace(
    STREAM_NUMENTA, numenta_learning_period=30, numenta_estimation_samples=20, numenta_history=200
)


def _series(n: int = 600) -> np.ndarray:
    rng = np.random.default_rng(3)
    xs = 10 + np.sin(np.arange(n) / 8) + rng.normal(0, 0.1, n)
    if n > 400:
        xs[400] += 3.0  # far outside the range seen so far: the range override
    return xs


def test_default_is_zscore_with_numentas_likelihood() -> None:
    cfg = DetectorConfig()
    assert cfg.model == "zscore"
    assert cfg.scorer == STREAM_NUMENTA
    assert (cfg.scorer.likelihood, cfg.scorer.peak_window) == ("numenta", 0)
    assert isinstance(open_model(cfg.model), ZScoreModel)
    # the bench's offline setting of the same scorer
    assert DEFAULTS["numenta_stream"] == {
        "learning_period": STREAM_NUMENTA.numenta_learning_period,
        "estimation_samples": STREAM_NUMENTA.numenta_estimation_samples,
        "historic_window": STREAM_NUMENTA.numenta_history,
    }


def test_scores_equal_the_offline_zscore_through_numenta_stream() -> None:
    xs = _series()
    det = ZScoreSeriesDetector(ZScoreModel(), DetectorConfig(scorer=_SHORT))
    online = [det.update(START_MS + i * STEP_MS, float(x)).score for i, x in enumerate(xs)]
    base = ZScore()
    native = np.zeros(len(xs))
    for i, x in enumerate(xs.tolist()):
        native[i] = base.score_one(x)
        base.learn_one(x)
    setting = {"learning_period": 30, "estimation_samples": 20, "historic_window": 200}
    offline = apply_scorer("numenta_stream", native, xs, setting)
    assert online == pytest.approx(offline.tolist(), abs=0)
    assert online[400] == 1.0  # the range override fired
    # past the learning period the likelihood moves (not one constant "no opinion")
    assert online[0] == online[49] and len(set(online[60:400])) > 100
    # control: another history changes the scores, so the comparison can fail
    other = apply_scorer("numenta_stream", native, xs, {**setting, "historic_window": 50})
    assert offline.tolist() != other.tolist()


def test_state_round_trip_at_every_point_gives_the_same_scores() -> None:
    xs = _series(400)
    model, config = ZScoreModel(window=50), DetectorConfig(scorer=_SHORT)
    ref = new_detector(model, config)
    blob = pickle.dumps(new_detector(model, config).snapshot())
    for i, x in enumerate(xs):
        ts = START_MS + i * STEP_MS
        det = restore_detector(pickle.loads(blob), model, config)
        assert det.update(ts, float(x)) == ref.update(ts, float(x))
        blob = pickle.dumps(det.snapshot())
    assert pickle.loads(blob) == ref.snapshot()
    # another window restarts the z-score window but keeps the scorer
    wider = restore_detector(pickle.loads(blob), ZScoreModel(window=60), config)
    assert isinstance(wider, ZScoreSeriesDetector)
    assert wider.zscore.snapshot()["n"] == 0
    assert wider.scorer.snapshot() == ref.scorer.snapshot()


def test_default_state_fits_the_operator_budget() -> None:
    xs = np.random.default_rng(5).normal(0, 1, 5000)
    det = ZScoreSeriesDetector(ZScoreModel(), DetectorConfig())
    sizes = []
    for i, x in enumerate(xs):
        det.update(START_MS + i * STEP_MS, float(x))
        if i % 500 == 499:
            sizes.append(len(pickle.dumps(det.snapshot())))
    # the history (3,000) and the window (1,000) are full well before 5,000 points
    assert sizes[-1] == sizes[-2]
    assert 50_000 < sizes[-1] <= 64 * 1024


def test_bad_points_are_refused_and_leave_the_state_alone() -> None:
    det = ZScoreSeriesDetector(ZScoreModel(), DetectorConfig(scorer=_SHORT))
    for i in range(5):
        det.update(START_MS + i * STEP_MS, float(i))
    before = det.snapshot()
    with pytest.raises(PointRejected) as nan:
        det.update(START_MS + 10 * STEP_MS, math.nan)
    assert nan.value.reason == "not_finite"
    with pytest.raises(PointRejected) as late:
        det.update(START_MS, 1.0)
    assert late.value.reason == "out_of_order"
    assert det.snapshot() == before
    det.update(START_MS + 10 * STEP_MS, 1.0)  # control: a good point changes it
    assert det.snapshot() != before


def test_zscore_snapshot_checks() -> None:
    z = ZScore(window=4)
    for x in (1.0, 2.0, 4.0, 8.0, 16.0):
        z.learn_one(x)
    snap = z.snapshot()
    again = ZScore.from_snapshot(pickle.loads(pickle.dumps(snap)))
    assert again.score_one(3.0) == z.score_one(3.0)
    with pytest.raises(ValueError, match="holds"):
        ZScore.from_snapshot({**snap, "n": 3})
    with pytest.raises(ValueError, match="holds"):
        ZScore.from_snapshot({**snap, "window": 2})
    with pytest.raises(ValueError, match="window"):
        ZScoreModel(window=1)


def test_operator_runs_the_default_and_keeps_scorer_overrides_on_it() -> None:
    opts = parse_options({"key": "k", "time": "t", "value": "v"})
    assert opts.detector == DetectorConfig()
    # one scorer field moves only that field: the rest stay the default's
    opts = parse_options({"key": "k", "time": "t", "value": "v",
                          "scorer.numenta_learning_period": "30"})  # fmt: skip
    assert opts.detector.scorer == dataclasses.replace(STREAM_NUMENTA, numenta_learning_period=30)
    model = open_model(opts.detector.model)
    stored = None
    for i in range(3):
        row = ("s", START_MS + i * STEP_MS, 1.0 + i, 0, i, None)
        out, stored = process_point(stored, row, model, opts.detector)
        assert out[5] == "zscore-w1000" and out[6] is None
    dead, unchanged = process_point(stored, ("s", START_MS, 1.0, 0, 9, None), model, opts.detector)
    assert (dead[6], unchanged) == ("out_of_order", None)
    # the former default, spelled out
    old = parse_options({"key": "k", "time": "t", "value": "v", "model": "hybrid",
                         "scorer.likelihood": "gaussian", "scorer.peak_window": "100"})  # fmt: skip
    assert old.detector.scorer.likelihood == "gaussian"
    assert old.detector.scorer.peak_window == ScorerConfig().peak_window
