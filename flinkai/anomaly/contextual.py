"""CAD OSE as a keyed detector for a series whose value range is known: ``model = 'cad'``.

The contextual detector (:mod:`flinkai.anomaly.cad`) discretises each value within
a fixed range, so it needs that range up front. Many metrics have one (a
percentage, a sensor's rated span, a queue's capacity); the operator takes it as
``value_min`` / ``value_max``. A value outside the range still scores (it gets
levels of its own), so a wrong range degrades the scores but never fails a point.

On NAB, the range each file is scored with is the file's own min/max: that is the
input NAB hands every detector of its scoreboard (CAD OSE, HTM, ARTime), and it
comes from the whole file, future values included. So NAB figures of this model
are comparable with the scoreboard, not with the range-free default ``zscore``
(docs/anomaly.md shows both).

Settings:

* contexts per key capped at :data:`DEFAULT_MAX_CONTEXTS` (least recently used
  evicted), for the 64 KB state and 8 ms p99 step budgets (measured in
  docs/anomaly.md; the cap is set by the budgets, not by a NAB score);
* rest period :data:`DEFAULT_REST_PERIOD` points, chosen leave-one-group-out on the
  58 NAB files (every fold chose it; NAB instead derives it from each file's
  length, which a stream does not know);
* the score is CAD's own, in [0, 1], with no scorer on top; the default threshold
  :data:`CAD_THRESHOLD` is NAB's rule over the 58 files (as for ``zscore``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkai.anomaly.cad import CadConfig, CadDetector

if TYPE_CHECKING:
    from flinkai.anomaly.detector import DetectorConfig, PointScore

__all__ = [
    "CAD_MODEL",
    "CAD_THRESHOLD",
    "DEFAULT_MAX_CONTEXTS",
    "DEFAULT_REST_PERIOD",
    "CadModel",
    "CadSeriesDetector",
]

#: The operator's ``model`` name of this detector (reserved: no model folder is read).
CAD_MODEL = "cad"
DEFAULT_MAX_CONTEXTS = 1000
DEFAULT_REST_PERIOD = 30
#: NAB's standard-profile threshold of this model (cap 1,000, rest 30) over the 58 NAB
#: files, each with its own range (0.75210; the same for the low-FP and low-FN profiles).
CAD_THRESHOLD = 0.7521


@dataclass(frozen=True)
class CadModel:
    """The contextual detector's fixed settings (shared by every key of a worker).

    Attributes:
        value_min: Value of the lowest level.
        value_max: Value of the highest level.
        max_contexts: Contexts kept per key (least recently used evicted).
        rest_period: Points after a high raw score that report 0.

    Raises:
        DetectorInputError: A range that is not finite or is inverted, or a bad cap.
    """

    value_min: float
    value_max: float
    max_contexts: int = DEFAULT_MAX_CONTEXTS
    rest_period: int = DEFAULT_REST_PERIOD

    def __post_init__(self) -> None:
        self.cad_config()  # validates

    def cad_config(self) -> CadConfig:
        return CadConfig(
            float(self.value_min),
            float(self.value_max),
            rest_period=self.rest_period,
            max_contexts=self.max_contexts,
        )

    @property
    def model_version(self) -> str:
        # The range and cap are part of what a stored key means: another range
        # restarts the key's contexts (see from_snapshot).
        return (
            f"{CAD_MODEL}-r{self.value_min:g}:{self.value_max:g}"
            f"-c{self.max_contexts}-p{self.rest_period}"
        )


class CadSeriesDetector:
    """All state of one key under the contextual detector, and the per-point logic.

    Args:
        model: The detector's settings.
        config: Operator settings (the threshold; the scorer does not apply).
    """

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def __init__(self, model: CadModel, config: DetectorConfig) -> None:
        self.model = model
        self.config = config
        self.cad = CadDetector(model.cad_config())
        self.last_ts: int | None = None
        # CAD's raw score of the last point (before the rest period); not state.
        self.last_error: float | None = None

    def update(self, ts_ms: int, value: float) -> PointScore:
        """Score one point, then learn it.

        Raises:
            PointRejected: ``value`` is not finite, or ``ts_ms`` is not after the
                key's last timestamp.
        """
        from flinkai.anomaly.detector import PointScore, check_point

        check_point(ts_ms, value, self.last_ts)
        score = self.cad.update(value)
        self.last_ts = ts_ms
        raw = self.cad.last_raw
        self.last_error = None if math.isnan(raw) else raw
        return PointScore(score, score >= self.config.threshold)

    def snapshot(self) -> dict[str, Any]:
        """The key's state as plain data with version tags."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "model_version": self.model.model_version,
            "cad": self.cad.snapshot(),
            "last_ts": self.last_ts,
        }

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], model: CadModel, config: DetectorConfig
    ) -> CadSeriesDetector:
        """Rebuild with the *current* settings; another range, cap or rest period
        restarts the key's contexts (their levels would mean other values).

        Raises:
            ValueError: Unknown layout version.
            DetectorInputError: A malformed CAD snapshot.
        """
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown CAD key-state version {snap.get('version')!r}")
        det = cls(model, config)
        last = snap["last_ts"]
        det.last_ts = None if last is None else int(last)
        if snap["model_version"] == model.model_version:
            det.cad = CadDetector.from_snapshot(snap["cad"], model.cad_config())
        return det
