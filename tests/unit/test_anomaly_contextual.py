"""The operator's contextual detector (model 'cad'): CAD OSE within a known value range,
or with a learnt one."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from flinkai.anomaly.cad import CadConfig, CadDetector, rest_masked
from flinkai.anomaly.contextual import (
    CAD_THRESHOLD,
    DEFAULT_MAX_CONTEXTS,
    LEARNT_CAD_THRESHOLD,
    CadModel,
    CadSeriesDetector,
)
from flinkai.anomaly.detector import DetectorConfig, PointRejected
from flinkai.anomaly.errors import AnomalyModelError, DetectorInputError
from flinkai.anomaly.keyed import new_detector, open_model, restore_detector
from flinkai.errors import ConfigError
from flinkai.operators.anomaly import parse_options, process_point

START_MS = 1764576000000
STEP_MS = 300_000
CONFIG = DetectorConfig(model="cad", threshold=CAD_THRESHOLD, value_min=0.0, value_max=20.0)


def _series(n: int = 1500) -> np.ndarray:
    rng = np.random.default_rng(5)
    xs = 10 + 5 * np.sin(np.arange(n) / 6) + rng.normal(0, 0.3, n)
    xs[900:905] = 19.5  # a burst at the top of the range
    return np.clip(xs, 0.0, 20.0)


def test_scores_are_cad_oses_within_the_given_range() -> None:
    xs = _series(600)
    model = CadModel(0.0, 20.0, max_contexts=300, rest_period=40)
    det = CadSeriesDetector(model, CONFIG)
    ref = CadDetector(CadConfig(0.0, 20.0, rest_period=40, max_contexts=300))
    for i, x in enumerate(xs.tolist()):
        got = det.update(START_MS + i * STEP_MS, x)
        want = ref.update(x)
        assert got.score == want
        assert got.is_anomaly == (want >= CAD_THRESHOLD)
        assert det.last_error == ref.last_raw


def test_rest_masked_gives_the_detectors_scores_for_any_rest_period() -> None:
    xs = _series(1200).tolist()
    raws = []
    det = CadDetector(CadConfig(0.0, 20.0, rest_period=1))
    for x in xs:
        det.update(x)
        raws.append(det.last_raw)
    outputs = {}
    for rest in (1, 25, 150):
        other = CadDetector(CadConfig(0.0, 20.0, rest_period=rest))
        outputs[rest] = [other.update(x) for x in xs]
        assert rest_masked(raws, rest) == outputs[rest]
    # control: the rest period changes the scores, so the equality can fail
    assert outputs[1] != outputs[150]


def test_state_round_trip_at_every_point_gives_the_same_scores() -> None:
    xs = _series(800)
    model = CadModel(0.0, 20.0, max_contexts=60, rest_period=20)  # small cap: evictions happen
    ref = new_detector(model, CONFIG)
    blob = pickle.dumps(new_detector(model, CONFIG).snapshot())
    for i, x in enumerate(xs.tolist()):
        ts = START_MS + i * STEP_MS
        det = restore_detector(pickle.loads(blob), model, CONFIG)
        assert det.update(ts, x) == ref.update(ts, x)
        blob = pickle.dumps(det.snapshot())
    assert pickle.loads(blob) == ref.snapshot()
    assert isinstance(ref, CadSeriesDetector) and ref.cad.context_count <= 60


def test_state_stays_bounded_by_the_cap() -> None:
    rng = np.random.default_rng(7)
    xs = rng.uniform(0.0, 20.0, 1500)  # noise: a new context at almost every step
    det = CadSeriesDetector(CadModel(0.0, 20.0), CONFIG)
    sizes = []
    for i, x in enumerate(xs.tolist()):
        det.update(START_MS + i * STEP_MS, x)
        if i % 100 == 0:
            sizes.append(len(pickle.dumps(det.snapshot())))
    assert det.cad.context_count <= DEFAULT_MAX_CONTEXTS
    # evictions happened: far more contexts were made than are kept
    assert det.snapshot()["cad"]["next"][2] > 5 * DEFAULT_MAX_CONTEXTS
    assert max(sizes) <= 64 * 1024
    # control: uncapped, the same stream grows past the cap
    free = CadDetector(CadConfig(0.0, 20.0, max_contexts=0))
    for x in xs.tolist():
        free.update(x)
        if free.context_count > DEFAULT_MAX_CONTEXTS:
            break
    assert free.context_count > DEFAULT_MAX_CONTEXTS


def test_another_range_restarts_the_keys_contexts() -> None:
    xs = _series(300).tolist()
    det = CadSeriesDetector(CadModel(0.0, 20.0), CONFIG)
    for i, x in enumerate(xs):
        det.update(START_MS + i * STEP_MS, x)
    snap = pickle.loads(pickle.dumps(det.snapshot()))
    same = CadSeriesDetector.from_snapshot(snap, CadModel(0.0, 20.0), CONFIG)
    wider = CadSeriesDetector.from_snapshot(snap, CadModel(0.0, 40.0), CONFIG)
    assert same.cad.context_count == det.cad.context_count > 0
    assert wider.cad.context_count == 0
    assert wider.last_ts == det.last_ts  # ordering still holds across the change


def test_bad_points_are_dead_letters_and_leave_the_state_unchanged() -> None:
    model = open_model("cad", (0.0, 20.0))
    out, snap = process_point(None, ("k", START_MS, 5.0, 0, 1, None), model, CONFIG)
    assert out[6] is None and snap is not None
    for value, ts, reason in ((float("nan"), START_MS + STEP_MS, "not_finite"),
                              (6.0, START_MS, "out_of_order")):  # fmt: skip
        dead, unchanged = process_point(snap, ("k", ts, value, 0, 2, None), model, CONFIG)
        assert dead[6] == reason and unchanged is None
    det = restore_detector(snap, model, CONFIG)
    with pytest.raises(PointRejected):
        det.update(START_MS, 1.0)


def test_operator_options() -> None:
    base = {"key": "k", "time": "t", "value": "v"}
    opts = parse_options({**base, "model": "cad", "value_min": "0", "value_max": "100"})
    assert (opts.detector.value_min, opts.detector.value_max) == (0.0, 100.0)
    assert opts.detector.threshold is None  # unset: the model's own applies
    explicit = parse_options({**base, "model": "cad", "value_min": "0", "value_max": "1",
                              "threshold": "0.9"})  # fmt: skip
    assert explicit.detector.threshold == 0.9
    with pytest.raises(ConfigError, match="both 'value_min' and 'value_max', or neither"):
        parse_options({**base, "model": "cad", "value_min": "0"})
    learnt = parse_options({**base, "model": "cad"})
    assert learnt.detector.value_min is None and learnt.detector.value_max is None
    assert learnt.detector.threshold is None
    # a range with no model selects cad; with another model it is refused
    chosen = parse_options({**base, "value_min": "0", "value_max": "1"})
    assert (chosen.detector.model, chosen.detector.value_max) == ("cad", 1.0)
    with pytest.raises(ConfigError, match="model 'cad' only"):
        parse_options({**base, "model": "zscore", "value_min": "0", "value_max": "1"})
    with pytest.raises(ConfigError, match="both 'value_min' and 'value_max', or neither"):
        parse_options({**base, "value_max": "1"})
    with pytest.raises(ConfigError, match="model 'cad' only"):  # a model set in the Flink options
        parse_options({**base, "value_min": "0", "value_max": "1"},
                      {"flinkai.anomaly.model": "zscore"})  # fmt: skip
    with pytest.raises(ConfigError, match="value_min <= value_max"):
        parse_options({**base, "model": "cad", "value_min": "5", "value_max": "1"})
    with pytest.raises(ConfigError, match="must be finite"):
        parse_options({**base, "model": "cad", "value_min": "-inf", "value_max": "1"})
    # an empty option (a script placeholder left empty) is unset: the Flink option or default
    empty = {"model": "", "threshold": "", "value_min": "", "value_max": ""}
    unset = parse_options({**base, **empty}, {"flinkai.anomaly.threshold": "0.7"})
    assert (unset.detector.model, unset.detector.threshold) == ("zscore", 0.7)
    assert unset.detector.value_min is None
    with pytest.raises(AnomalyModelError, match="both value_min and value_max, or neither"):
        open_model("cad", (0.0, None))
    assert not open_model("cad").known_range
    with pytest.raises(DetectorInputError):
        CadModel(3.0, 1.0)


def test_an_unset_threshold_is_the_models_own() -> None:
    from flinkai.anomaly.detector import DEFAULT_THRESHOLD

    xs = _series().tolist()

    def decisions(model: CadModel, threshold: float | None) -> list[bool]:
        det = CadSeriesDetector(model, DetectorConfig(model="cad", threshold=threshold))
        return [det.update(START_MS + i * STEP_MS, x).is_anomaly for i, x in enumerate(xs)]

    for model, own in ((CadModel(0.0, 20.0), CAD_THRESHOLD), (CadModel(), LEARNT_CAD_THRESHOLD)):
        unset = decisions(model, None)
        assert unset == decisions(model, own)
        # control: the z-score's threshold, which an unset one used to mean, flags more
        assert sum(decisions(model, DEFAULT_THRESHOLD)) > sum(unset)
    assert DetectorConfig().threshold_or(DEFAULT_THRESHOLD) == 0.5091
    assert DetectorConfig(threshold=0.9).threshold_or(DEFAULT_THRESHOLD) == 0.9
