"""CAD OSE as a keyed detector: ``model = 'cad'``, with a known range or a learnt one.

The contextual detector (:mod:`flinkai.anomaly.cad`) discretises each value within
a range. Two ways to set it:

* **Known range** (``value_min`` / ``value_max``): many metrics have one (a
  percentage, a sensor's rated span, a queue's capacity). A value outside the range
  still scores (it gets levels of its own), so a wrong range degrades the scores but
  never fails a point. On NAB, the range each file is scored with is the file's own
  min/max: that is the input NAB hands every detector of its scoreboard (CAD OSE,
  HTM, ARTime), and it comes from the whole file, future values included. So NAB
  figures of this mode are comparable with the scoreboard.
* **Learnt range** (neither given): the range is learnt from each key's first values
  and grows when a value falls well outside it
  (:class:`~flinkai.anomaly.cad_growing.GrowingRangeCad`). It uses no future data,
  so its NAB figures compare with the range-free ``zscore``.

Settings:

* contexts per key capped at :data:`DEFAULT_MAX_CONTEXTS` (least recently used
  evicted), for the 64 KB state and 8 ms p99 step budgets (measured in
  docs/anomaly.md; the cap is set by the budgets, not by a NAB score);
* rest periods :data:`DEFAULT_REST_PERIOD` (known range) and
  :data:`LEARNT_REST_PERIOD` (learnt range) points, each chosen leave-one-group-out
  on the 58 NAB files (NAB instead derives it from each file's length, which a
  stream does not know);
* the score is CAD's own, in [0, 1], with no scorer on top; the default thresholds
  :data:`CAD_THRESHOLD` and :data:`LEARNT_CAD_THRESHOLD` are NAB's rule over the 58
  files (as for ``zscore``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkai.anomaly.cad import CadConfig, CadDetector
from flinkai.anomaly.cad_growing import (
    DEFAULT_HISTORY,
    DEFAULT_LEARN_POINTS,
    GrowingRangeCad,
    GrowingRangeConfig,
)
from flinkai.anomaly.contract import KeyDetector, PointScore
from flinkai.anomaly.errors import DetectorInputError

if TYPE_CHECKING:
    from flinkai.anomaly.detector import DetectorConfig

__all__ = [
    "CAD_MODEL",
    "CAD_THRESHOLD",
    "DEFAULT_MAX_CONTEXTS",
    "DEFAULT_REST_PERIOD",
    "LEARNT_CAD_THRESHOLD",
    "LEARNT_REST_PERIOD",
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
#: The learnt-range mode's rest period: every fold of the leave-one-group-out choice
#: over 10-100 chose 20 (with 50 learn points, no margin; docs/anomaly.md).
LEARNT_REST_PERIOD = 20
#: NAB's standard-profile threshold of the learnt-range mode at its defaults over the
#: 58 NAB files (0.77184).
LEARNT_CAD_THRESHOLD = 0.7718


@dataclass(frozen=True)
class CadModel:
    """The contextual detector's fixed settings (shared by every key of a worker).

    Attributes:
        value_min: Value of the lowest level; ``None`` (with ``value_max``) learns
            each key's range from its first values.
        value_max: Value of the highest level.
        max_contexts: Contexts kept per key (least recently used evicted).
        rest_period: Points after a high raw score that report 0 (default: the
            mode's own, :data:`DEFAULT_REST_PERIOD` or :data:`LEARNT_REST_PERIOD`).
        learn_points: Learnt range only: values that fix the initial range.
        history: Learnt range only: values replayed when the range grows.

    Raises:
        DetectorInputError: Only one end of the range, a range that is not finite
            or is inverted, or a bad cap.
    """

    value_min: float | None = None
    value_max: float | None = None
    max_contexts: int = DEFAULT_MAX_CONTEXTS
    rest_period: int | None = None
    learn_points: int = DEFAULT_LEARN_POINTS
    history: int = DEFAULT_HISTORY

    def __post_init__(self) -> None:
        if (self.value_min is None) != (self.value_max is None):
            raise DetectorInputError("give both value_min and value_max, or neither (learnt range)")
        if self.known_range:
            self.cad_config()  # validates
        else:
            self.growing_config()

    @property
    def known_range(self) -> bool:
        return self.value_min is not None

    @property
    def rest(self) -> int:
        if self.rest_period is not None:
            return self.rest_period
        return DEFAULT_REST_PERIOD if self.known_range else LEARNT_REST_PERIOD

    @property
    def threshold(self) -> float:
        """The mode's default threshold (NAB's rule over the 58 files)."""
        return CAD_THRESHOLD if self.known_range else LEARNT_CAD_THRESHOLD

    def cad_config(self) -> CadConfig:
        assert self.value_min is not None and self.value_max is not None
        return CadConfig(
            float(self.value_min),
            float(self.value_max),
            rest_period=self.rest,
            max_contexts=self.max_contexts,
        )

    def growing_config(self) -> GrowingRangeConfig:
        return GrowingRangeConfig(
            learn_points=self.learn_points,
            history=self.history,
            rest_period=self.rest,
            max_contexts=self.max_contexts,
        )

    @property
    def model_version(self) -> str:
        # The range (or how it is learnt) and cap are part of what a stored key
        # means: other settings restart the key's contexts (see from_snapshot).
        if self.known_range:
            return (
                f"{CAD_MODEL}-r{self.value_min:g}:{self.value_max:g}"
                f"-c{self.max_contexts}-p{self.rest}"
            )
        return (
            f"{CAD_MODEL}-learnt-l{self.learn_points}-h{self.history}"
            f"-c{self.max_contexts}-p{self.rest}"
        )

    def new_cad(self) -> CadDetector | GrowingRangeCad:
        if self.known_range:
            return CadDetector(self.cad_config())
        return GrowingRangeCad(self.growing_config())

    def restore_cad(self, state: Mapping[str, Any]) -> CadDetector | GrowingRangeCad:
        if self.known_range:
            return CadDetector.from_snapshot(state, self.cad_config())
        return GrowingRangeCad.from_snapshot(state, self.growing_config())


class CadSeriesDetector(KeyDetector):
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
        self.cad = model.new_cad()
        # CAD's raw score of the last point (before the rest period); not state.
        self.last_error: float | None = None

    @property
    def model_version(self) -> str:
        return self.model.model_version

    def _step(self, ts_ms: int, value: float) -> PointScore:
        score = self.cad.update(value)
        raw = self.cad.last_raw
        self.last_error = None if math.isnan(raw) else raw
        return PointScore(score, score >= self.config.threshold_or(self.model.threshold))

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
            det.cad = model.restore_cad(snap["cad"])
        return det
