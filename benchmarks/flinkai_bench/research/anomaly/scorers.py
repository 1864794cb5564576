"""Scorer options: what turns a detector's raw per-point output into an anomaly score.

Every detector of the benchmark gives one non-negative *native* score per point
(the forecasters: the absolute forecast error in normalised units; Beam's
statistical detectors: their distance; HalfSpaceTrees: its score), NaN where it has
none (a forecaster's first point, a refused point, a baseline without enough data).
The same options then apply to every detector alike:

* ``raw``: ``s / (1 + s)`` (same order as ``s``, in [0, 1)), NaN as 0.
* ``gated``: ``raw``, kept only where it is above every ``raw`` score of the
  previous ``peak_window`` points, else 0 (the operator's peak gate).
* ``likelihood``: the operator's :class:`~flinkai.anomaly.features.ErrorScorer`
  (a Gaussian likelihood of the score against its exponentially weighted history,
  on a log scale, then the peak gate) over the native score; NaN points score 0
  and are not learnt.
* ``numenta``: Numenta's anomaly likelihood (:mod:`flinkai.anomaly.likelihood`)
  over the ``raw`` score and the series value, with NAB's learning period from the
  file's probationary period and every other constant as published.
* ``numenta_stream``: the same likelihood as a stream can run it (the operator's
  ``scorer.likelihood = numenta``): learning and estimation periods fixed rather
  than taken from the file's length (a stream has none), and a shorter history so
  the key's state fits the operator's 64 KB budget.

:data:`SETTINGS` lists the candidate settings of each option that a selection
protocol may choose between; :data:`DEFAULTS` the one used without a choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.features import STREAM_NUMENTA, ErrorScorer, ScorerConfig
from flinkai.anomaly.likelihood import NumentaConfig, NumentaLikelihood
from flinkai.anomaly.nab import probationary_length

__all__ = ["DEFAULTS", "SCORERS", "SETTINGS", "apply_scorer", "bounded", "peak_gated"]

FloatArray = npt.NDArray[np.float64]

#: Scorer options, in table order.
SCORERS = ("raw", "gated", "likelihood", "numenta", "numenta_stream")

#: The setting each option uses when nothing is chosen: the operator's defaults
#: (``gated`` and ``likelihood`` were picked earlier on the NAB score of the 34
#: shared files, see docs/anomaly.md) and Numenta's published constants.
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "raw": {},
    "gated": {"peak_window": ScorerConfig().peak_window},
    "likelihood": {},
    "numenta": {},
    "numenta_stream": {
        "learning_period": STREAM_NUMENTA.numenta_learning_period,
        "estimation_samples": STREAM_NUMENTA.numenta_estimation_samples,
        "historic_window": STREAM_NUMENTA.numenta_history,
    },
}

#: Candidates a selection protocol chooses between (``numenta`` has none: its
#: constants are Numenta's, and only the threshold is chosen).
SETTINGS: Mapping[str, Sequence[Mapping[str, Any]]] = {
    "raw": [{}],
    "gated": [{"peak_window": w} for w in (25, 50, 100, 200, 400)],
    "likelihood": [
        {"short_window": s, "long_rate": r, "peak_window": p}
        for s in (1, 10)
        for r in (0.001, 0.0002)
        for p in (0, 100, 200)
    ],
    "numenta": [{}],
    # Fixed periods: NuPIC's (288 / 100) and half NAB's largest probation each (375 / 375);
    # histories that fit 64 KB beside Beam's 1,000-value z-score window.
    "numenta_stream": [
        {"learning_period": lp, "estimation_samples": es, "historic_window": h}
        for lp, es in ((288, 100), (375, 375))
        for h in (1500, 3000)
    ],
}


def bounded(native: FloatArray) -> FloatArray:
    """``s / (1 + s)`` for ``s >= 0``; NaN and negative values as 0."""
    s = np.nan_to_num(np.asarray(native, dtype=np.float64), nan=0.0)
    s = np.maximum(s, 0.0)
    return np.asarray(s / (1.0 + s), dtype=np.float64)


def peak_gated(scores: FloatArray, window: int) -> FloatArray:
    """Each score kept only where it exceeds every score of the ``window`` before it."""
    out = scores.copy()
    if window <= 0:
        return out
    for i in range(1, len(scores)):
        if scores[i] <= scores[max(0, i - window) : i].max():
            out[i] = 0.0
    return out


def _likelihood(native: FloatArray, setting: Mapping[str, Any]) -> FloatArray:
    scorer = ErrorScorer(ScorerConfig(**setting))
    out = np.zeros(len(native))
    for i, e in enumerate(native.tolist()):
        if not math.isnan(e):
            out[i] = scorer.score(max(e, 0.0))
    return out


def _numenta(native: FloatArray, values: FloatArray, setting: Mapping[str, Any]) -> FloatArray:
    cfg = NumentaConfig.for_nab(probationary_length(len(native)), **setting)
    lk = NumentaLikelihood(cfg)
    raw = bounded(native).tolist()
    return np.array([lk.score(r, v) for r, v in zip(raw, values.tolist(), strict=True)])


def _numenta_stream(
    native: FloatArray, values: FloatArray, setting: Mapping[str, Any]
) -> FloatArray:
    lk = NumentaLikelihood(NumentaConfig(**setting))
    raw = bounded(native).tolist()
    return np.array([lk.score(r, v) for r, v in zip(raw, values.tolist(), strict=True)])


def apply_scorer(
    scorer: str,
    native: FloatArray,
    values: FloatArray,
    setting: Mapping[str, Any] | None = None,
) -> FloatArray:
    """One series' scores in [0, 1] under ``scorer`` with ``setting`` (default: DEFAULTS).

    Raises:
        ValueError: Unknown scorer.
    """
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; choose from {', '.join(SCORERS)}")
    chosen = DEFAULTS[scorer] if setting is None else setting
    if scorer == "raw":
        return bounded(native)
    if scorer == "gated":
        return peak_gated(bounded(native), int(chosen["peak_window"]))
    if scorer == "likelihood":
        return _likelihood(np.asarray(native, dtype=np.float64), chosen)
    if scorer == "numenta_stream":
        return _numenta_stream(np.asarray(native, dtype=np.float64), values, chosen)
    return _numenta(np.asarray(native, dtype=np.float64), values, chosen)
