"""CAD OSE as NAB runs it (flinkai_bench.research.anomaly.cad_nab): NAB's rest period
and the probation-learnt range."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from flinkai.anomaly.cad import CadConfig, CadDetector
from flinkai.anomaly.errors import DetectorInputError
from flinkai_bench.research.anomaly.cad_nab import (
    ProbationRangeCad,
    nab_cad_config,
    nab_rest_period,
)


def _noisy(n: int) -> list[float]:
    return np.random.default_rng(11).uniform(0.0, 7.0, n).round(1).tolist()


def test_probation_range_learns_from_the_first_values_only() -> None:
    rng = np.random.default_rng(5)
    xs = [float(v) for v in rng.normal(10, 2, size=300)]
    probation = 60
    det = ProbationRangeCad(probation, rest_period=4)
    got = [det.update(x) for x in xs]
    assert got[:probation] == [0.0] * probation
    # after the probation it is the plain detector on the probation's range, fed everything
    lo, hi = min(xs[:probation]), max(xs[:probation])
    assert det.detector is not None and det.detector.config.value_max == hi
    assert max(xs) > hi  # so later values do fall outside the learnt range
    plain = CadDetector(CadConfig(lo, hi, rest_period=4))
    want = [plain.update(x) for x in xs]
    assert got[probation:] == want[probation:]
    # round trip while buffering and after
    for cut in (30, 200):
        again = ProbationRangeCad(probation, 4)
        part = [again.update(x) for x in xs[:cut]]
        state = pickle.loads(pickle.dumps(again.snapshot()))
        again = ProbationRangeCad.from_snapshot(state, probation, 4)
        assert part + [again.update(x) for x in xs[cut:]] == got


def test_capped_probation_variant_round_trips() -> None:
    xs = _noisy(300)
    ref, det = ProbationRangeCad(50, 4, 30), ProbationRangeCad(50, 4, 30)
    for i, x in enumerate(xs):
        if i % 37 == 0:
            det = ProbationRangeCad.from_snapshot(
                pickle.loads(pickle.dumps(det.snapshot())), 50, 4, 30
            )
        assert det.update(x) == ref.update(x)
    assert ref.detector is not None and ref.detector.context_count <= 30


@pytest.mark.parametrize("bad", [math.nan, math.inf, "abc", None])
def test_bad_values_leave_the_learning_state_alone(bad: object) -> None:
    learning = ProbationRangeCad(5, 1)
    with pytest.raises(DetectorInputError):
        learning.update(bad)  # type: ignore[arg-type]
    assert learning.snapshot() == {"buffer": []}
    with pytest.raises(DetectorInputError, match="probation"):
        ProbationRangeCad(0, 1)


def test_nab_rest_period() -> None:
    assert nab_rest_period(750) == 150
    assert nab_rest_period(604) == 120
    assert nab_rest_period(3) == 1
    assert nab_cad_config(1, 5, 750).rest_period == 150
