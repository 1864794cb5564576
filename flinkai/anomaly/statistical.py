"""Beam's z-score as a keyed detector: the operator's ``model = 'zscore'``.

Per point ``(ts, value)`` of a key, :meth:`ZScoreSeriesDetector.update`:

1. refuses a non-finite value or a timestamp not after the key's last one
   (:class:`~flinkai.anomaly.detector.PointRejected`; the state is unchanged), as
   the forecaster does;
2. scores the value's z-score against the key's last ``window`` values
   (:class:`~flinkai.anomaly.zscore.ZScore`, Beam's definition: NaN below two
   values) through the key's :class:`~flinkai.anomaly.features.ErrorScorer`. With
   ``likelihood = numenta`` the scorer sees ``z / (1 + z)`` (NaN as 0) and the value,
   exactly what the bench's ``numenta_stream`` scorer computes offline; with the
   Gaussian scorer a point without a z-score scores 0 and is not learnt;
3. learns the value.

No model files: the "model version" is ``zscore-w<window>``. The state is plain
data (:meth:`ZScoreSeriesDetector.snapshot`): the window as float64 bytes (8 KB at
Beam's 1,000), the scorer, the last timestamp.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkai.anomaly.contract import KeyDetector, PointScore
from flinkai.anomaly.features import ErrorScorer
from flinkai.anomaly.zscore import DEFAULT_WINDOW, ZScore

if TYPE_CHECKING:
    from flinkai.anomaly.detector import DetectorConfig

__all__ = ["ZSCORE_MODEL", "ZScoreModel", "ZScoreSeriesDetector"]

#: The operator's ``model`` name of this detector (reserved: no model folder is read).
ZSCORE_MODEL = "zscore"


@dataclass(frozen=True)
class ZScoreModel:
    """The z-score detector's fixed settings (shared by every key of a worker).

    Attributes:
        window: Values per key the mean and deviation are taken over (Beam's 1,000).
    """

    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        if self.window < 2:
            raise ValueError(f"z-score window must be >= 2, got {self.window}")

    @property
    def model_version(self) -> str:
        return f"{ZSCORE_MODEL}-w{self.window}"


class ZScoreSeriesDetector(KeyDetector):
    """All state of one key under the z-score detector, and the per-point logic.

    Args:
        model: The detector's settings.
        config: Operator settings (threshold, scorer).
    """

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def __init__(self, model: ZScoreModel, config: DetectorConfig) -> None:
        self.model = model
        self.config = config
        self.zscore = ZScore(model.window)
        self.scorer = ErrorScorer(config.scorer)
        # The last point's z-score before the scorer (None: none yet); not state.
        self.last_error: float | None = None

    @property
    def model_version(self) -> str:
        return self.model.model_version

    def _step(self, ts_ms: int, value: float) -> PointScore:
        from flinkai.anomaly.detector import DEFAULT_THRESHOLD

        z = self.zscore.score_one(value)
        self.zscore.learn_one(value)
        self.last_error = None if math.isnan(z) else z
        if self.config.scorer.likelihood == "numenta":
            score = self.scorer.score(0.0 if math.isnan(z) else z, value)
        else:
            score = 0.0 if math.isnan(z) else self.scorer.score(z, value)
        return PointScore(score, score >= self.config.threshold_or(DEFAULT_THRESHOLD))

    def snapshot(self) -> dict[str, Any]:
        """The key's state as plain data with version tags."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "model_version": self.model.model_version,
            "zscore": self.zscore.snapshot(),
            "scorer": self.scorer.snapshot(),
            "last_ts": self.last_ts,
        }

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], model: ZScoreModel, config: DetectorConfig
    ) -> ZScoreSeriesDetector:
        """Rebuild with the *current* config; another window restarts the z-score window.

        Raises:
            ValueError: Unknown layout version or an inconsistent snapshot.
        """
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown z-score key-state version {snap.get('version')!r}")
        det = cls(model, config)
        det.scorer = ErrorScorer.from_snapshot(snap["scorer"], config.scorer)
        last = snap["last_ts"]
        det.last_ts = None if last is None else int(last)
        if snap["model_version"] == model.model_version:
            det.zscore = ZScore.from_snapshot(snap["zscore"])
        return det
