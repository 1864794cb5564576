"""The operator's per-key detector, whichever ``model`` it names.

``model = 'zscore'`` is Beam's z-score (:mod:`flinkai.anomaly.statistical`, no
files); any other name is a forecaster folder run by ONNX Runtime
(:class:`~flinkai.anomaly.step.StepModel`, :class:`~flinkai.anomaly.detector.SeriesDetector`).
Both detectors have the same ``update`` / ``snapshot`` / ``from_snapshot`` shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkai.anomaly.detector import DetectorConfig, SeriesDetector
from flinkai.anomaly.statistical import ZSCORE_MODEL, ZScoreModel, ZScoreSeriesDetector
from flinkai.anomaly.step import StepModel

__all__ = ["KeyDetector", "KeyModel", "new_detector", "open_model", "restore_detector"]

KeyModel = StepModel | ZScoreModel
KeyDetector = SeriesDetector | ZScoreSeriesDetector


def open_model(name: str) -> KeyModel:
    """The detector model the operator's ``model`` option names (loaded once per worker).

    Raises:
        AnomalyModelError: A forecaster folder that holds no loadable model.
    """
    if name == ZSCORE_MODEL:
        return ZScoreModel()
    from flinkai.anomaly.spec import resolve_model_dir

    return StepModel(resolve_model_dir(name))


def new_detector(model: Any, config: DetectorConfig) -> KeyDetector:
    """A fresh key's detector."""
    if isinstance(model, ZScoreModel):
        return ZScoreSeriesDetector(model, config)
    return SeriesDetector(model, config)


def restore_detector(snap: Mapping[str, Any], model: Any, config: DetectorConfig) -> KeyDetector:
    """A key's detector from its stored snapshot, with the current config and model."""
    if isinstance(model, ZScoreModel):
        return ZScoreSeriesDetector.from_snapshot(snap, model, config)
    return SeriesDetector.from_snapshot(snap, model, config)
