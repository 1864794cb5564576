"""The research detectors the bench runs hold to the operator's detector contract.

ARTime and the bench's CAD rows, wrapped as
:class:`~flinkai_bench.research.anomaly.keyed.ValueKeyDetector`, go through the same
:func:`~flinkai.anomaly.contract.check_detector` as the operator's own detectors:
identical scores after a state round trip and determinism always; the 64 KB and
8 ms budgets for the rows that are built for them (a cap on categories or
contexts). The uncapped CAD rows (NAB's own CAD) keep every context, so their state
grows with the series without bound; their budgets are not asserted.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from flinkai.anomaly.contract import STATE_BUDGET_BYTES, check_detector
from flinkai.anomaly.nab import LabelledSeries, NabSeries, probationary_length
from flinkai_bench.anomaly import CAD_MAX_CONTEXTS, SERIES_DETECTORS, _series_model
from flinkai_bench.anomaly_artime import ARTIME_DETECTORS, ArtimeBench, artime_config, artime_model
from flinkai_bench.research.anomaly.keyed import ValueKeyDetector, ValueModel

N = 3000


def _values(n: int = N, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    values = 50 + 10 * np.sin(t * 2 * np.pi / 288) + rng.normal(0, 1.5, n)
    values[int(0.6 * n) :] += 15
    values[t % 997 == 500] += 40
    return values.round(4)


def _series(values: np.ndarray) -> NabSeries:
    stamps = np.datetime64("2024-01-01T00:00") + np.arange(len(values)) * np.timedelta64(5, "m")
    return NabSeries(LabelledSeries("synthetic/a.csv", len(values), ()), stamps, values)


def _model(name: str, values: np.ndarray) -> ValueModel:
    if name in ARTIME_DETECTORS:
        return artime_model(name, artime_config(name, values, ArtimeBench()))
    return _series_model(name, _series(values), CAD_MAX_CONTEXTS)


#: Rows built for the operator's budgets: ARTime keeps 200 categories, CAD 300 contexts.
BUDGETED = (*ARTIME_DETECTORS, "cad_capped", "cad_probation_capped")


@pytest.mark.parametrize("name", [*ARTIME_DETECTORS, *SERIES_DETECTORS])
def test_research_detectors_keep_the_contract(name: str) -> None:
    values = _values()
    model = _model(name, values)
    points = [(i, float(v)) for i, v in enumerate(values)]
    budgets = {} if name in BUDGETED else {"state_budget": 2**62, "step_budget_ms": math.inf}
    # the round trip after the probation, where the state is the model's, not a buffer
    cut = probationary_length(N) + 301
    report = check_detector(
        partial(ValueKeyDetector, model),
        partial(ValueKeyDetector.from_snapshot, model=model),
        points,
        round_trip_at=cut,
        **budgets,
    )
    assert report.max_state_bytes > 0
    if name in BUDGETED:
        assert report.max_state_bytes <= STATE_BUDGET_BYTES


def test_a_restore_with_another_model_restarts_the_key() -> None:
    values = _values(600)
    a, b = _model("artime", values), _model("artime_learnt", values)
    det = ValueKeyDetector(a)
    for i, v in enumerate(values.tolist()):
        det.update(i, v)
    again = ValueKeyDetector.from_snapshot(det.snapshot(), b)
    assert again.last_ts == len(values) - 1
    assert again.inner.snapshot() == ValueKeyDetector(b).inner.snapshot()
