"""CAD OSE with a range that grows with the series: no value range needed up front.

CAD OSE (:mod:`flinkai.anomaly.cad`) discretises each value within a fixed range.
On NAB that range is the whole file's min/max, future values included, and a range
learnt from the first rows alone scores far less (docs/anomaly.md): the first rows'
range is narrow, so every later excursion lands on levels of its own and the
detector keeps raising alarms. This detector keeps the range honest and lets it grow:

1. **Learn.** The first ``learn_points`` values fix the initial range (their
   min/max); they score 0, as NAB's probationary rows are not scored.
2. **Override.** A value more than ``out_of_range`` of the range's span outside
   it raises the score to 1.0 (Numenta's range override, same constant), and the
   range grows to include it (plus ``margin`` of the new span on that side).
3. **Rebuild.** CAD is rebuilt on the new range and replays the last ``history``
   values, so its contexts describe the recent series at the new resolution.
   A value outside the range by less than ``out_of_range`` goes to CAD as it is
   (levels beyond the range have facts of their own).
4. **Rest.** As in CAD OSE: a score is reported only if no raw score of the last
   ``rest_period`` points reached CAD's base threshold (:func:`~flinkai.anomaly.cad.rest_step`).

Each rebuild replays up to ``history`` values, so the step that grows the range
costs that many CAD steps (about 0.1-0.2 ms each); it happens only when the range
grows, a few times per series on NAB (docs/anomaly.md gives the counts).

The state is plain data: the history (``history`` floats), the range, CAD's own
snapshot (bounded by ``max_contexts``) and the rest counter.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flinkai.anomaly.cad import CadConfig, CadDetector, check_value, rest_step
from flinkai.anomaly.errors import DetectorInputError

__all__ = [
    "DEFAULT_HISTORY",
    "DEFAULT_LEARN_POINTS",
    "OUT_OF_RANGE",
    "GrowingRangeCad",
    "GrowingRangeConfig",
]

#: Values that fix the initial range (NAB's smallest probationary period is 150).
DEFAULT_LEARN_POINTS = 50
#: Values replayed into a rebuilt detector: 8 KB of floats beside CAD's <= 48 KB of
#: contexts at 1,000, inside the operator's 64 KB per key (set by the budget).
DEFAULT_HISTORY = 1000
#: A value this share of the range's span outside the range scores 1.0 and grows the
#: range: Numenta's anomaly-likelihood range override (published constant, not tuned).
OUT_OF_RANGE = 0.05
_SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class GrowingRangeConfig:
    """Settings of :class:`GrowingRangeCad`.

    Attributes:
        learn_points: Values that fix the initial range (score 0).
        margin: Share of the new span added beyond a value that grows the range.
        history: Values kept and replayed into a rebuilt detector.
        out_of_range: Share of the span outside the range that overrides and grows.
        rest_period: Points after a high raw score that report 0.
        max_contexts: CAD's context cap (least recently used evicted; 0: unbounded).

    Raises:
        DetectorInputError: A setting out of its range.
    """

    learn_points: int = DEFAULT_LEARN_POINTS
    margin: float = 0.0
    history: int = DEFAULT_HISTORY
    out_of_range: float = OUT_OF_RANGE
    rest_period: int = 30
    max_contexts: int = 1000

    def __post_init__(self) -> None:
        for name in ("learn_points", "history", "rest_period"):
            if int(getattr(self, name)) < 1:
                raise DetectorInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("margin", "out_of_range"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise DetectorInputError(f"{name} must be finite and >= 0, got {value}")
        if self.history < self.learn_points:
            raise DetectorInputError(
                f"history ({self.history}) must hold the learn_points ({self.learn_points})"
            )
        self.cad_config(0.0, 1.0)  # validates the cap

    def cad_config(self, low: float, high: float) -> CadConfig:
        # CAD's own rest period is unused: this detector applies its own over the raw
        # scores, the override included, so a rebuild never resets it.
        return CadConfig(low, high, rest_period=1, max_contexts=self.max_contexts)


class GrowingRangeCad:
    """CAD OSE over one series with a learnt, growing range (see the module doc)."""

    def __init__(self, config: GrowingRangeConfig) -> None:
        self.config = config
        self.history: deque[float] = deque(maxlen=config.history)
        self.low = math.nan
        self.high = math.nan
        self.cad: CadDetector | None = None
        self.since_high = 1
        #: Times the range grew (each rebuilt the detector).
        self.regrowths = 0
        #: The last raw score (before the rest period); NaN while learning.
        self.last_raw = math.nan

    def update(self, x: float) -> float:
        """Score ``x``, then learn it.

        Returns:
            The score in [0, 1]; 0 while learning and inside a rest period.

        Raises:
            DetectorInputError: ``x`` is not a finite number (the state is unchanged).
        """
        v = check_value(x)
        cfg = self.config
        self.history.append(v)
        if self.cad is None:
            raw = math.nan
            if len(self.history) >= cfg.learn_points:
                self.low, self.high = min(self.history), max(self.history)
                self._rebuild()
        elif self._outside(v):
            raw = 1.0
            if v > self.high:
                self.high = v + cfg.margin * (v - self.low)
            else:
                self.low = v - cfg.margin * (self.high - v)
            self.regrowths += 1
            self._rebuild()
        else:
            self.cad.update(v)
            raw = self.cad.last_raw
        self.last_raw = raw
        score, self.since_high = rest_step(
            0.0 if math.isnan(raw) else raw, self.since_high, cfg.rest_period
        )
        return score

    def _outside(self, v: float) -> bool:
        allowance = self.config.out_of_range * (self.high - self.low)
        return v > self.high + allowance or v < self.low - allowance

    def _rebuild(self) -> None:
        self.cad = CadDetector(self.config.cad_config(self.low, self.high))
        for h in self.history:
            self.cad.update(h)

    def snapshot(self) -> dict[str, Any]:
        """Plain data: the history, the range, CAD's state and the counters."""
        return {
            "version": _SNAPSHOT_VERSION,
            "history": list(self.history),
            "range": None if self.cad is None else [self.low, self.high],
            "cad": None if self.cad is None else self.cad.snapshot(),
            "since_high": self.since_high,
            "regrowths": self.regrowths,
        }

    @classmethod
    def from_snapshot(cls, state: Mapping[str, Any], config: GrowingRangeConfig) -> GrowingRangeCad:
        """Rebuild from :meth:`snapshot` output with the current settings.

        Raises:
            DetectorInputError: Another layout version, or a malformed snapshot.
        """
        if state.get("version") != _SNAPSHOT_VERSION:
            raise DetectorInputError(
                f"growing-range CAD snapshot version {state.get('version')!r} unsupported"
            )
        det = cls(config)
        try:
            det.history.extend(map(float, state["history"]))
            det.since_high = int(state["since_high"])
            det.regrowths = int(state["regrowths"])
            if state["range"] is not None:
                det.low, det.high = (float(v) for v in state["range"])
                det.cad = CadDetector.from_snapshot(
                    state["cad"], config.cad_config(det.low, det.high)
                )
        except (KeyError, TypeError, ValueError) as e:
            raise DetectorInputError(f"malformed growing-range CAD snapshot: {e}") from e
        return det
