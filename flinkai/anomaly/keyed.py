r"""The operator's per-key detector, whichever ``model`` it names.

``model = 'zscore'`` is Beam's z-score (:mod:`flinkai.anomaly.statistical`, no
files); ``model = 'cad'`` is CAD OSE within the configured value range, or a range
learnt per key (:mod:`flinkai.anomaly.contextual`, no files); any other name is a
forecaster folder run by ONNX Runtime (:class:`~flinkai.anomaly.step.StepModel`,
:class:`~flinkai.anomaly.detector.SeriesDetector`). All three are
:class:`~flinkai.anomaly.contract.KeyDetector`\ s: one contract, checked for each by
:func:`~flinkai.anomaly.contract.check_detector` (tests/unit/test_anomaly_contract.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkai.anomaly.contextual import CAD_MODEL, CadModel, CadSeriesDetector
from flinkai.anomaly.contract import KeyDetector
from flinkai.anomaly.detector import DetectorConfig, SeriesDetector
from flinkai.anomaly.errors import AnomalyModelError, DetectorInputError
from flinkai.anomaly.statistical import ZSCORE_MODEL, ZScoreModel, ZScoreSeriesDetector
from flinkai.anomaly.step import StepModel

__all__ = ["KeyDetector", "KeyModel", "new_detector", "open_model", "restore_detector"]

KeyModel = StepModel | ZScoreModel | CadModel


def open_model(
    name: str, value_range: tuple[float | None, float | None] = (None, None)
) -> KeyModel:
    """The detector model the operator's ``model`` option names (loaded once per worker).

    Args:
        value_range: The series' known ``(min, max)``, used by ``cad`` only; both
            ``None``: ``cad`` learns each key's range.

    Raises:
        AnomalyModelError: A forecaster folder that holds no loadable model, or
            ``cad`` with one end of the range only or a bad range.
    """
    if name == ZSCORE_MODEL:
        return ZScoreModel()
    if name == CAD_MODEL:
        low, high = value_range
        try:
            return CadModel(low, high)
        except DetectorInputError as e:
            raise AnomalyModelError(f"model 'cad': {e}") from e
    from flinkai.anomaly.spec import resolve_model_dir

    return StepModel(resolve_model_dir(name))


def new_detector(model: Any, config: DetectorConfig) -> KeyDetector:
    """A fresh key's detector."""
    if isinstance(model, ZScoreModel):
        return ZScoreSeriesDetector(model, config)
    if isinstance(model, CadModel):
        return CadSeriesDetector(model, config)
    return SeriesDetector(model, config)


def restore_detector(snap: Mapping[str, Any], model: Any, config: DetectorConfig) -> KeyDetector:
    """A key's detector from its stored snapshot, with the current config and model."""
    if isinstance(model, ZScoreModel):
        return ZScoreSeriesDetector.from_snapshot(snap, model, config)
    if isinstance(model, CadModel):
        return CadSeriesDetector.from_snapshot(snap, model, config)
    return SeriesDetector.from_snapshot(snap, model, config)
