"""Forecast-error anomaly detection for one key, free of Flink.

Per point ``(ts, value)`` of a key, :meth:`SeriesDetector.update`:

1. refuses a non-finite value or a timestamp not after the key's last one
   (:class:`PointRejected` with a reason code; the key's state is unchanged);
2. scores the point: the absolute error of the forecast made at the previous
   point, in that point's normalised units, through the key's
   :class:`~flinkai.anomaly.features.ErrorScorer` (0 for the first point);
3. updates the input normaliser and runs one model step, which forecasts the
   next point.

The whole state (normaliser, scorer, LSTM state, KV cache, pending forecast, last
timestamp) is plain data (:meth:`SeriesDetector.snapshot`) with a version tag and
the model version; :meth:`SeriesDetector.from_snapshot` rebuilds it with the
current config and model. A snapshot from a different model version keeps the
normaliser and scorer but restarts the model state (a fresh LSTM state and an
empty KV cache), since another model's hidden state means nothing to this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkai.anomaly.contract import (
    KeyDetector,
    PointRejected,
    PointScore,
    RejectReason,
    check_point,
)
from flinkai.anomaly.features import (
    STREAM_NUMENTA,
    ErrorScorer,
    InputNormalizer,
    ScorerConfig,
    feature_row,
)
from flinkai.anomaly.step import RecurrentState, StepModel

__all__ = [
    "DEFAULT_THRESHOLD",
    "DetectorConfig",
    "PointRejected",
    "PointScore",
    "RejectReason",
    "SeriesDetector",
    "check_point",
]

#: The threshold of ``zscore`` and the forecasters unless one is set: NAB's
#: standard-profile threshold of the default over the 58 NAB files (0.50912; the
#: leave-one-group-out folds chose 0.5091 to 0.5238).
DEFAULT_THRESHOLD = 0.5091


@dataclass(frozen=True)
class DetectorConfig:
    """Settings of the anomaly operator.

    The defaults are the best candidate of the leave-one-group-out comparison on the
    full NAB corpus (docs/anomaly.md): Beam's z-score through Numenta's likelihood
    with the streaming setting that comparison chose.

    Attributes:
        model: ``zscore`` (Beam's z-score, :mod:`flinkai.anomaly.statistical`), ``cad``
            (CAD OSE within a known value range), or a forecaster: a model name under
            ``$FLINKAI_HOME/models/anomaly`` or a folder.
        threshold: ``is_anomaly`` is ``score >= threshold``; ``None``: the model's own
            (:data:`DEFAULT_THRESHOLD`; ``cad``: its mode's, see
            :mod:`flinkai.anomaly.contextual`).
        scorer: How errors become scores (not used by ``cad``, whose score is its own).
        value_min, value_max: The series' known value range, used by ``cad`` only
            (:mod:`flinkai.anomaly.contextual`; neither: learnt per key).
    """

    model: str = "zscore"
    threshold: float | None = None
    scorer: ScorerConfig = field(default_factory=lambda: STREAM_NUMENTA)
    value_min: float | None = None
    value_max: float | None = None

    def threshold_or(self, model_default: float) -> float:
        """The set threshold, else the model's own."""
        return model_default if self.threshold is None else self.threshold


class SeriesDetector(KeyDetector):
    """All state of one key, and the per-point logic.

    Args:
        model: The loaded step model (shared by all keys of a worker).
        config: Operator settings.
    """

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def __init__(self, model: StepModel, config: DetectorConfig) -> None:
        self.model = model
        self.config = config
        self.normalizer = InputNormalizer()
        self.scorer = ErrorScorer(config.scorer)
        self.state = RecurrentState.zeros(model.spec)
        self.forecast: float | None = None
        # The last scored point's forecast error, before the scorer (not state: for
        # the benchmark, which runs other scorers over the same errors).
        self.last_error: float | None = None

    @property
    def model_version(self) -> str:
        return self.model.model_version

    def _step(self, ts_ms: int, value: float) -> PointScore:
        score = 0.0
        self.last_error = None
        if self.forecast is not None:
            error = abs(self.forecast - self.normalizer.scale(value))
            score = self.scorer.score(error, value)
            self.last_error = error
        self.normalizer.update(value)
        x = feature_row(self.normalizer.scale(value), ts_ms)
        self.forecast, self.state = self.model.step(x, self.state)
        return PointScore(score, score >= self.config.threshold_or(DEFAULT_THRESHOLD))

    def snapshot(self) -> dict[str, Any]:
        """The key's state as plain data (numbers, byte strings, lists) and version tags."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "model_version": self.model.model_version,
            "normalizer": self.normalizer.snapshot(),
            "scorer": self.scorer.snapshot(),
            "model_state": self.state.snapshot(),
            "forecast": self.forecast,
            "last_ts": self.last_ts,
        }

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], model: StepModel, config: DetectorConfig
    ) -> SeriesDetector:
        """Rebuild a key's state from :meth:`snapshot` with the *current* config and model.

        Raises:
            ValueError: The snapshot has a layout version this code does not know.
        """
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown anomaly key-state version {snap.get('version')!r}")
        det = cls(model, config)
        det.normalizer = InputNormalizer.from_snapshot(snap["normalizer"])
        det.scorer = ErrorScorer.from_snapshot(snap["scorer"], config.scorer)
        last = snap["last_ts"]
        det.last_ts = None if last is None else int(last)
        if snap["model_version"] == model.model_version:
            det.state = RecurrentState.from_snapshot(snap["model_state"], model.spec)
            forecast = snap["forecast"]
            det.forecast = None if forecast is None else float(forecast)
        return det
