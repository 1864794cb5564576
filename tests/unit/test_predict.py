"""``predict`` on a logistic regression built in the test with the ``onnx`` helper API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flinkai.backends.errors import BackendError, ScoringModelError
from flinkai.backends.shared import (
    acquire_scoring_backend,
    live_scoring_backends,
    release_scoring_backend,
)
from flinkai.config import PredictConfig
from flinkai.errors import ConfigError
from flinkai.functions.predict import PredictFunction

WEIGHTS = np.array([[0.5], [-1.25], [2.0], [0.75]], dtype=np.float32)
BIAS = np.array([-0.1], dtype=np.float32)
N_FEATURES = WEIGHTS.shape[0]


def build_logistic_regression(path: Path, *, static_width: bool = True) -> Path:
    """``sigmoid(features @ WEIGHTS + BIAS)``: input ``features`` [batch, 4], output ``score``."""
    width: int | str = N_FEATURES if static_width else "features"
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "W"], ["logits_raw"]),
            helper.make_node("Add", ["logits_raw", "B"], ["logits"]),
            helper.make_node("Sigmoid", ["logits"], ["score"]),
        ],
        "logreg",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime release we support
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def reference(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x.astype(np.float64) @ WEIGHTS + BIAS)))


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    return build_logistic_regression(tmp_path / "logreg.onnx")


@pytest.fixture
def fn(model_path: Path) -> Iterator[PredictFunction]:
    function = PredictFunction(PredictConfig(model_path=str(model_path)))
    function.open()
    yield function
    function.close()


def test_batch_scores_match_numpy(fn: PredictFunction) -> None:
    x = np.random.default_rng(0).normal(size=(64, N_FEATURES)).astype(np.float32)
    result = fn(list(x))
    assert result.errors == [None] * 64
    scores = np.stack([s for s in result.scores if s is not None])
    assert scores.shape == (64, 1) and scores.dtype == np.float32
    np.testing.assert_allclose(scores, reference(x), rtol=1e-5, atol=1e-6)
    assert result.model_version.startswith("logreg@") and len(result.model_version) == 19


def test_bad_rows_get_errors_and_keep_their_place(fn: PredictFunction) -> None:
    good = [0.1, 0.2, 0.3, 0.4]
    rows = [
        good,
        [1.0, 2.0, 3.0],  # too short
        None,
        [1.0, float("nan"), 0.0, 0.0],
        [*good, 5.0],  # too long
        [float("inf"), 0.0, 0.0, 0.0],
        ["a", "b", "c", "d"],
        [[1.0, 2.0], [3.0, 4.0]],
        [1e300, 0.0, 0.0, 0.0],  # overflows float32
        np.array(good, dtype=np.float64),
    ]
    result = fn(rows)
    assert len(result.scores) == len(result.errors) == len(rows)
    errors = result.errors
    assert errors[0] is None and errors[9] is None
    assert errors[1] == "invalid_field: expected 4 features, got 3"
    assert errors[2] == "invalid_field: features is null"
    assert errors[3] == "invalid_field: NaN at feature 1"
    assert errors[4] == "invalid_field: expected 4 features, got 5"
    assert errors[5] == "invalid_field: infinite value at feature 0"
    assert errors[6] is not None and errors[6].startswith("invalid_field: features are not numeric")
    assert errors[7] is not None and "flat array" in errors[7]
    assert errors[8] == "invalid_field: infinite value at feature 0"
    for i, score in enumerate(result.scores):
        assert (score is None) == (errors[i] is not None)
    expected = reference(np.array([good], dtype=np.float32))[0]
    for i in (0, 9):
        score = result.scores[i]
        assert score is not None
        np.testing.assert_allclose(score, expected, rtol=1e-5)


def test_all_rows_invalid_skips_the_model(fn: PredictFunction) -> None:
    result = fn([None, [1.0]])
    assert result.scores == [None, None]
    assert all(e is not None for e in result.errors)


def test_empty_batch(fn: PredictFunction) -> None:
    result = fn([])
    assert result.scores == [] and result.errors == []
    assert result.model_version.startswith("logreg@")


def test_inference_failure_is_data(fn: PredictFunction, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(features: np.ndarray) -> np.ndarray:
        raise BackendError("ONNX Runtime failed: boom")

    monkeypatch.setattr(fn.model, "_infer", broken)
    result = fn([[0.0] * N_FEATURES, None])
    assert result.scores == [None, None]
    assert result.errors[0] == "inference_failed: ONNX Runtime failed: boom"
    assert result.errors[1] == "invalid_field: features is null"


def test_model_shared_per_process(model_path: Path) -> None:
    config = PredictConfig(model_path=str(model_path), model_version="lr@v1")
    before = live_scoring_backends()
    a, b = acquire_scoring_backend(config), acquire_scoring_backend(config)
    assert a is b and live_scoring_backends() == before + 1
    assert a.model_version == "lr@v1"
    release_scoring_backend(a)
    assert live_scoring_backends() == before + 1
    release_scoring_backend(b)
    assert live_scoring_backends() == before
    with pytest.raises(ValueError, match="released twice"):
        release_scoring_backend(a)


def test_symbolic_width_needs_feature_count(tmp_path: Path) -> None:
    path = build_logistic_regression(tmp_path / "dyn.onnx", static_width=False)
    with pytest.raises(ScoringModelError, match="feature_count"):
        PredictFunction(PredictConfig(model_path=str(path))).open()
    fn = PredictFunction(PredictConfig(model_path=str(path), feature_count=N_FEATURES))
    fn.open()
    try:
        assert fn([[0.0] * N_FEATURES]).errors == [None]
    finally:
        fn.close()


def test_config_errors(model_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model_path"):
        PredictFunction(PredictConfig()).open()
    with pytest.raises(ScoringModelError, match="does not exist"):
        PredictFunction(PredictConfig(model_path=str(tmp_path / "nope.onnx"))).open()
    with pytest.raises(ScoringModelError, match="expects 4 features"):
        PredictFunction(PredictConfig(model_path=str(model_path), feature_count=3)).open()
    with pytest.raises(ScoringModelError, match="no input"):
        PredictFunction(PredictConfig(model_path=str(model_path), input_name="x")).open()
    with pytest.raises(ScoringModelError, match="no output"):
        PredictFunction(PredictConfig(model_path=str(model_path), output_name="y")).open()
    assert live_scoring_backends() == 0


def test_used_before_open(model_path: Path) -> None:
    with pytest.raises(RuntimeError, match="before open"):
        PredictFunction(PredictConfig(model_path=str(model_path)))([])
