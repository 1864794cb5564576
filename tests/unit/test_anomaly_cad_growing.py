"""CAD OSE with a learnt, growing range (flinkai.anomaly.cad_growing): hand cases."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from flinkai.anomaly.cad import CadDetector, rest_masked
from flinkai.anomaly.cad_growing import GrowingRangeCad, GrowingRangeConfig
from flinkai.anomaly.errors import DetectorInputError


def _series(n: int = 900) -> list[float]:
    rng = np.random.default_rng(11)
    xs = 10 + 5 * np.sin(np.arange(n) / 6) + rng.normal(0, 0.3, n)
    xs[int(n * 2 / 3) : int(n * 2 / 3) + 3] = 40.0  # far above the learnt range: grows it
    xs[int(n * 5 / 6)] = -20.0  # far below it
    return [float(v) for v in xs]


def _learnt(values: list[float], **kw: int | float) -> GrowingRangeCad:
    det = GrowingRangeCad(GrowingRangeConfig(**kw))  # type: ignore[arg-type]
    for v in values:
        det.update(v)
    return det


def test_learning_points_score_zero_then_fix_the_range() -> None:
    det = GrowingRangeCad(GrowingRangeConfig(learn_points=4, rest_period=1))
    scores = [det.update(v) for v in (3.0, 7.0, 5.0)]
    assert scores == [0.0, 0.0, 0.0]
    assert det.cad is None and math.isnan(det.last_raw)
    assert det.update(4.0) == 0.0  # the 4th value ends learning
    assert (det.low, det.high) == (3.0, 7.0)
    # the rebuilt CAD has seen exactly the learning values
    ref = CadDetector(det.config.cad_config(3.0, 7.0))
    for v in (3.0, 7.0, 5.0, 4.0):
        ref.update(v)
    assert det.cad is not None and det.cad.snapshot() == ref.snapshot()


def test_a_value_past_the_allowance_scores_one_and_grows_the_range() -> None:
    det = _learnt([0.0, 10.0] * 10, learn_points=20, rest_period=1)
    # 5% of the span (0.5) is allowed: 10.4 goes to CAD as it is
    det.update(10.4)
    assert det.regrowths == 0 and det.high == 10.0
    for _ in range(50):  # a repeated value ends up with low raw scores: rest over
        det.update(5.0)
    assert det.since_high > 1
    assert det.update(10.6) == 1.0
    assert det.regrowths == 1 and det.high == 10.6 and det.last_raw == 1.0
    assert det.update(-0.6) == 0.0  # inside the rest period of 1 point
    assert det.regrowths == 2 and det.low == -0.6
    # the rebuilt detector replayed the history at the new range
    assert det.cad is not None and det.cad.config.value_max == 10.6
    assert det.cad.steps == len(det.history)


def test_margin_widens_the_grown_side() -> None:
    det = _learnt([0.0, 10.0] * 10, learn_points=20, margin=0.5)
    det.update(20.0)
    assert det.high == 20.0 + 0.5 * 20.0 and det.low == 0.0


def test_a_flat_learning_range_grows_on_any_other_value() -> None:
    det = _learnt([5.0] * 10, learn_points=10, rest_period=1)
    assert det.high == det.low == 5.0
    det.update(5.0)
    assert det.regrowths == 0
    det.update(5.001)
    assert det.regrowths == 1 and det.high == 5.001


def test_history_is_bounded_and_replayed() -> None:
    det = _learnt(_series(400), learn_points=20, history=50)
    assert len(det.history) == 50
    with pytest.raises(DetectorInputError, match="must hold the learn_points"):
        GrowingRangeConfig(learn_points=60, history=50)


def test_rest_masked_gives_the_scores_for_any_rest_period() -> None:
    xs = _series()
    raws = []
    det = GrowingRangeCad(GrowingRangeConfig(rest_period=1))
    for x in xs:
        det.update(x)
        raws.append(0.0 if math.isnan(det.last_raw) else det.last_raw)
    assert det.regrowths >= 2  # the series did grow the range
    seen = []
    for rest in (1, 20, 100):
        other = GrowingRangeCad(GrowingRangeConfig(rest_period=rest))
        scores = [other.update(x) for x in xs]
        assert rest_masked(raws, rest) == scores
        seen.append(scores)
    assert seen[0] != seen[2]  # control: the rest period changes the scores


def test_snapshot_round_trip_at_every_point_changes_nothing() -> None:
    xs = _series(700)
    cfg = GrowingRangeConfig(learn_points=30, history=200, max_contexts=100)
    straight = GrowingRangeCad(cfg)
    tripped = GrowingRangeCad(cfg)
    for x in xs:
        a = straight.update(x)
        tripped = GrowingRangeCad.from_snapshot(pickle.loads(pickle.dumps(tripped.snapshot())), cfg)
        assert tripped.update(x) == a
    assert tripped.snapshot() == straight.snapshot()
    assert straight.regrowths >= 2


def test_bad_values_are_refused_and_leave_the_state_alone() -> None:
    det = _learnt(_series(100), learn_points=20)
    before = det.snapshot()
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(DetectorInputError, match="finite"):
            det.update(bad)
    assert det.snapshot() == before


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"learn_points": 0}, "learn_points"),
        ({"history": 0}, "history"),
        ({"rest_period": 0}, "rest_period"),
        ({"margin": -0.1}, "margin"),
        ({"out_of_range": math.nan}, "out_of_range"),
        ({"max_contexts": 2}, "max_contexts"),
    ],
)
def test_bad_settings_are_refused(kw: dict[str, float], match: str) -> None:
    with pytest.raises(DetectorInputError, match=match):
        GrowingRangeConfig(**kw)  # type: ignore[arg-type]


def test_malformed_snapshots_are_refused() -> None:
    cfg = GrowingRangeConfig(learn_points=10)
    snap = _learnt(_series(50), learn_points=10).snapshot()
    with pytest.raises(DetectorInputError, match="version"):
        GrowingRangeCad.from_snapshot({**snap, "version": 99}, cfg)
    with pytest.raises(DetectorInputError, match="malformed"):
        GrowingRangeCad.from_snapshot({**snap, "range": ["a", 1.0]}, cfg)
    with pytest.raises(DetectorInputError, match="malformed"):
        GrowingRangeCad.from_snapshot({k: v for k, v in snap.items() if k != "history"}, cfg)
