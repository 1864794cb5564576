"""Anomaly-detection evaluation: NAB scoring and window-based precision/recall/F1.

* :mod:`flinkai.anomaly.nab`: the Numenta Anomaly Benchmark scorer (windows, scaled
  sigmoid, application profiles, threshold optimisation, normalisation) and a loader
  for NAB-layout folders.
* :mod:`flinkai.anomaly.detector`: forecast-error detection for one key, its state as
  plain data; the model step runs in ONNX Runtime (:mod:`flinkai.anomaly.step`),
  trained offline with torch (:mod:`flinkai.anomaly.train`).
* :mod:`flinkai.anomaly.baselines`: Beam-definition statistical detectors and river's
  HalfSpaceTrees, for the benchmark.
* :mod:`flinkai.anomaly.statistical`: Beam's z-score as a keyed detector, the
  operator's default; :mod:`flinkai.anomaly.keyed` picks the key detector a ``model``
  names.
* :mod:`flinkai.anomaly.cad`: CAD OSE, with an optional bounded context store.
"""

from flinkai.anomaly.errors import AnomalyError, NabDataError
from flinkai.anomaly.nab import (
    PROFILES,
    CostProfile,
    EventMetrics,
    FileScore,
    LabelledSeries,
    NabSeries,
    ProfileResult,
    Window,
    evaluate,
    event_metrics,
    load_nab_folder,
    optimize_threshold,
    score_file,
)

__all__ = [
    "PROFILES",
    "AnomalyError",
    "CostProfile",
    "EventMetrics",
    "FileScore",
    "LabelledSeries",
    "NabDataError",
    "NabSeries",
    "ProfileResult",
    "Window",
    "evaluate",
    "event_metrics",
    "load_nab_folder",
    "optimize_threshold",
    "score_file",
]
