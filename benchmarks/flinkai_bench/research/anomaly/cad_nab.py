"""CAD OSE as NAB runs it, and its probation-learnt variant: bench rows, not the operator's.

NAB gives CAD OSE each file's min/max and a rest period of a fifth of the file's
probationary period (:func:`nab_cad_config`), both derived from the whole file.
:class:`ProbationRangeCad` learns the range from the first ``probation`` values
instead, then replays them through the detector. Both need a file length a stream
does not have; the operator's CAD is :mod:`flinkai.anomaly.contextual`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkai.anomaly.cad import CadConfig, CadDetector, check_value
from flinkai.anomaly.errors import DetectorInputError

__all__ = ["ProbationRangeCad", "nab_cad_config", "nab_rest_period"]


def nab_rest_period(probation: int) -> int:
    """NAB's rest period for CAD OSE: a fifth of the probationary period, at least 1."""
    return max(1, int(probation / 5))


def nab_cad_config(
    value_min: float, value_max: float, probation: int, max_contexts: int = 0
) -> CadConfig:
    """NAB's setting: the given range, rest period ``int(probation / 5)`` (at least 1)."""
    return CadConfig(
        float(value_min),
        float(value_max),
        rest_period=nab_rest_period(probation),
        max_contexts=max_contexts,
    )


class ProbationRangeCad:
    """CAD OSE with the range learnt from the first ``probation`` values only.

    Those values score 0 and are kept; at the last of them the range is their
    min/max, and the detector is built and fed them in order (their scores are
    discarded). Every later value goes straight through :meth:`CadDetector.update`.

    Args:
        probation: Values that fix the range (NAB: the file's probationary period).
        rest_period: :attr:`CadConfig.rest_period`.
        max_contexts: :attr:`CadConfig.max_contexts` (0: unbounded).
    """

    def __init__(self, probation: int, rest_period: int, max_contexts: int = 0) -> None:
        if probation < 1:
            raise DetectorInputError(f"probation must be >= 1, got {probation}")
        self.probation = probation
        self.rest_period = rest_period
        self.max_contexts = max_contexts
        self._buffer: list[float] = []
        self.detector: CadDetector | None = None

    def update(self, x: float) -> float:
        """Score and learn ``x`` (0 while the range is being learnt).

        Raises:
            DetectorInputError: ``x`` is not a finite number (the state is unchanged).
        """
        v = check_value(x)
        if self.detector is not None:
            return self.detector.update(v)
        self._buffer.append(v)
        if len(self._buffer) >= self.probation:
            cfg = CadConfig(min(self._buffer), max(self._buffer), rest_period=self.rest_period,
                            max_contexts=self.max_contexts)  # fmt: skip
            self.detector = CadDetector(cfg)
            for b in self._buffer:
                self.detector.update(b)
            self._buffer = []
        return 0.0

    def snapshot(self) -> dict[str, Any]:
        """Plain data: the buffered values, or the range and the detector's state."""
        if self.detector is None:
            return {"buffer": list(self._buffer)}
        cfg = self.detector.config
        return {"range": [cfg.value_min, cfg.value_max], "cad": self.detector.snapshot()}

    @classmethod
    def from_snapshot(
        cls, state: Mapping[str, Any], probation: int, rest_period: int, max_contexts: int = 0
    ) -> ProbationRangeCad:
        """Rebuild from :meth:`snapshot` output.

        Raises:
            DetectorInputError: The snapshot is malformed.
        """
        det = cls(probation, rest_period, max_contexts)
        if "buffer" in state:
            det._buffer = [check_value(v) for v in state["buffer"]]
            return det
        try:
            lo, hi = (float(v) for v in state["range"])
        except (KeyError, TypeError, ValueError) as e:
            raise DetectorInputError(f"malformed CAD snapshot: {e}") from e
        det.detector = CadDetector.from_snapshot(
            state["cad"], CadConfig(lo, hi, rest_period=rest_period, max_contexts=max_contexts)
        )
        return det
