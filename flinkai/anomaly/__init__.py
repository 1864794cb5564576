"""Anomaly detection per key: the detectors behind the anomaly operator.

The operator (:mod:`flinkai.operators.anomaly`) keeps one detector per key; its
``model`` option names which (:mod:`flinkai.anomaly.keyed`). Every detector follows
one contract (:class:`~flinkai.anomaly.contract.KeyDetector`): it scores a point,
then learns it, and its whole state is plain data with a version tag.

* ``zscore`` (the default): Beam's z-score through Numenta's anomaly likelihood
  (:mod:`flinkai.anomaly.statistical`, :mod:`flinkai.anomaly.zscore`,
  :mod:`flinkai.anomaly.likelihood`).
* ``cad``: CAD OSE within a known value range or one learnt per key
  (:mod:`flinkai.anomaly.contextual`, :mod:`flinkai.anomaly.cad`,
  :mod:`flinkai.anomaly.cad_growing`).
* A forecaster: an LSTM (+ attention) step run by ONNX Runtime
  (:mod:`flinkai.anomaly.detector`, :mod:`flinkai.anomaly.step`), trained offline
  with torch from a NAB-layout folder (:mod:`flinkai.anomaly.train`,
  :mod:`flinkai.anomaly.nab`).

Settings, state sizes and budgets: docs/anomaly.md. This package imports no
benchmark code; the NAB scorer and the research detectors live in ``flinkai_bench``.
"""

from flinkai.anomaly.errors import (
    AnomalyError,
    AnomalyModelError,
    DetectorInputError,
    NabDataError,
)

__all__ = ["AnomalyError", "AnomalyModelError", "DetectorInputError", "NabDataError"]
