"""One detector's scores and timings over a NAB folder: the bench's record of a row.

Its own module so the row runners (:mod:`flinkai_bench.anomaly_rounds`,
:mod:`flinkai_bench.anomaly_artime`) and :mod:`flinkai_bench.anomaly`, which
calls them, all import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["DetectorRun", "FloatArray"]

FloatArray = npt.NDArray[np.float64]


@dataclass
class DetectorRun:
    """One detector's scores and timings over a folder.

    Attributes:
        name: Detector name.
        scores: Per series, one score in [0, 1] per row.
        step_ms: Per-point time of the detector's core step (the ONNX step for
            the forecasters, score + learn for the baselines).
        operator_ms: Per-point time of the whole operator step (forecasters; for
            the per-series detectors every 100th point, with the state round trip).
        state_bytes: Largest pickled per-key state seen (forecasters and per-series
            detectors; the per-series ones at every round trip and at each file's end).
        model_version: The forecaster's model version.
        rejected: Points the forecaster refused (a timestamp not after the last one).
        native: Per series, the detector's own output before any scorer (the
            forecasters: the forecast error; the baselines: their unbounded score),
            NaN where it has none; the input of :mod:`flinkai_bench.research.anomaly.scorers`.
    """

    name: str
    scores: dict[str, FloatArray] = field(default_factory=dict)
    step_ms: list[float] = field(default_factory=list)
    operator_ms: list[float] = field(default_factory=list)
    state_bytes: int | None = None
    model_version: str | None = None
    rejected: int = 0
    native: dict[str, FloatArray] = field(default_factory=dict)
    #: ``cad_operator`` only: CAD's raw score per point, before the rest period.
    cad_raw: dict[str, FloatArray] = field(default_factory=dict)
    #: ``cad_learnt_operator`` only: times each key's range grew.
    regrowths: dict[str, int] = field(default_factory=dict)
    #: ARTime rows only: categories each key's network holds at the end.
    categories: dict[str, int] = field(default_factory=dict)
