"""Baseline drift detectors, behind one small interface, for the drift benchmark.

All detectors see the same events, ``(embedding, event_time_s)`` in event-time
order, and report the event time at which they flag a drift:

* :class:`JSDWindowDetector` wraps :class:`~flinkai.drift.detector.JSDDriftDetector`;
  with :func:`fixed_window_config` it is the "what a fixed 10 s window system does"
  baseline, with :func:`plain_config` the method exactly as first specified
  (previous period, raw JSD, no gate).
* :class:`SequentialDetector` wraps :class:`~flinkai.drift.sequential.CusumDriftDetector`,
  which decides at every event.
* :class:`RiverDetector` feeds river's ``ADWIN`` or ``PageHinkley`` the per-event
  cosine distance to a running reference centroid (:class:`RunningCentroidDistance`).

river is optional (the ``bench`` extra) and imported only when a river detector
is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from flinkai.config import DriftConfig
from flinkai.drift.detector import JSDDriftDetector
from flinkai.drift.sequential import CusumConfig, CusumDriftDetector
from flinkai.errors import MissingDependencyError

__all__ = [
    "JSDWindowDetector",
    "RiverDetector",
    "RiverKind",
    "RiverParams",
    "RunningCentroidDistance",
    "SequentialDetector",
    "StreamDetector",
    "fixed_window_config",
    "plain_config",
    "require_river",
]

RiverKind = Literal["adwin", "page_hinkley"]


class StreamDetector(Protocol):
    """What the benchmark drives: events in, detection times out."""

    name: str

    def update(self, embedding: np.ndarray, event_time_s: float) -> float | None:
        """Add one event; return the event time of a drift flagged now, else None."""

    def finish(self, event_time_s: float) -> float | None:
        """Flush at the end of the stream (closes an open period)."""


def fixed_window_config(
    period_s: float = 10.0, min_samples: int = 10, base: DriftConfig | None = None
) -> DriftConfig:
    """The detector's own method on short fixed windows, tested once per window.

    Everything else (pooled reference, significance gate, frozen baseline, mean
    test) is the detector's, so the comparison isolates the windowing.

    Args:
        period_s: Window length.
        min_samples: Windows with fewer events are skipped; 10 keeps most 10 s
            windows at 1 event/s, where a larger value would starve the baseline.
        base: Other parameters (defaults of :class:`DriftConfig` when omitted).
    """
    cfg = base or DriftConfig()
    return replace(cfg, period_s=period_s, checks_per_period=1, min_samples=min_samples)


def plain_config(period_s: float = 30.0) -> DriftConfig:
    """The method as first specified, without any of the detector's refinements.

    Previous period as the only reference, raw JSD z-scored against the last 5
    periods with a 1e-6 std floor, no significance gate, no baseline, no mean
    test, no early checks, Jeffreys smoothing (0.5 per bin) on 40 bins. Kept in the benchmark
    to show what each refinement buys.
    """
    return DriftConfig(
        period_s=period_s,
        bins=40,
        smoothing=0.5,
        std_floor=1e-6,
        reference_periods=1,
        normalize=False,
        min_significance=-math.inf,
        baseline=False,
        shift_test=False,
        checks_per_period=1,
    )


class JSDWindowDetector:
    """:class:`JSDDriftDetector` behind the :class:`StreamDetector` interface.

    Args:
        name: Label in benchmark output.
        cfg: Detector parameters.
    """

    def __init__(self, name: str, cfg: DriftConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.detector = JSDDriftDetector(cfg)

    def update(self, embedding: np.ndarray, event_time_s: float) -> float | None:
        event = self.detector.update(embedding, event_time_s)
        return None if event is None else event.period_end_s

    def finish(self, event_time_s: float) -> float | None:
        # Any time past the open period closes it.
        event = self.detector.advance_to(event_time_s + self.cfg.period_s)
        return None if event is None else event.period_end_s


class SequentialDetector:
    """:class:`CusumDriftDetector` behind the :class:`StreamDetector` interface.

    Args:
        name: Label in benchmark output.
        cfg: Detector parameters.
    """

    def __init__(self, name: str, cfg: CusumConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.detector = CusumDriftDetector(cfg)

    def update(self, embedding: np.ndarray, event_time_s: float) -> float | None:
        event = self.detector.update(embedding, event_time_s)
        return None if event is None else event.period_end_s

    def finish(self, event_time_s: float) -> float | None:
        # Every event was decided on arrival: nothing is left open.
        return None


class RunningCentroidDistance:
    """Per-event cosine distance to the running mean of the events before it.

    The reference is the mean direction of every event since the last
    :meth:`reset` (a cumulative mean, so a change moves it only slowly and the
    distance level stays shifted while a detector accumulates evidence). The
    first ``warmup_events`` events only build the reference.

    Args:
        warmup_events: Events used to form the reference before distances flow.
    """

    def __init__(self, warmup_events: int = 30) -> None:
        if warmup_events < 1:
            raise ValueError("warmup_events must be >= 1")
        self.warmup_events = warmup_events
        self._sum: np.ndarray | None = None
        self._n = 0

    def reset(self) -> None:
        """Start a new reference (after a drift)."""
        self._sum = None
        self._n = 0

    def distance(self, embedding: np.ndarray) -> float | None:
        """The event's distance to the reference, then fold it into the reference.

        Returns:
            The cosine distance in ``[0, 2]``, or ``None`` during warm-up.

        Raises:
            ValueError: If the embedding has zero or non-finite norm.
        """
        x = np.asarray(embedding, dtype=np.float64).ravel()
        nx = float(np.linalg.norm(x))
        if not (nx > 0 and math.isfinite(nx)):
            raise ValueError("embedding has zero or non-finite norm")
        x = x / nx
        d: float | None = None
        if self._sum is not None and self._n >= self.warmup_events:
            nc = float(np.linalg.norm(self._sum))
            d = min(max(1.0 - float(np.dot(x, self._sum)) / nc, 0.0), 2.0) if nc > 0 else 1.0
        self._sum = x.copy() if self._sum is None else self._sum + x
        self._n += 1
        return d


@dataclass(frozen=True)
class RiverParams:
    """A river detector kind and its constructor arguments.

    Attributes:
        kind: ``adwin`` or ``page_hinkley``.
        params: Keyword arguments for the river class; empty means river's defaults.
        warmup_events: Warm-up of the :class:`RunningCentroidDistance` feature.
    """

    kind: RiverKind
    params: Mapping[str, Any] = field(default_factory=dict)
    warmup_events: int = 30


def require_river() -> Any:
    """``river.drift``, or a :class:`MissingDependencyError` naming the ``bench`` extra."""
    try:
        from river import drift
    except ImportError as e:
        raise MissingDependencyError("river", "bench") from e
    return drift


class RiverDetector:
    """A river change detector on the per-event distance stream.

    On a drift both the reference centroid and the river detector start afresh,
    the same re-baselining :class:`JSDDriftDetector` does, so the post-drift
    distance level is not flagged as a second change.

    Args:
        name: Label in benchmark output.
        spec: Which river detector, with which parameters.

    Raises:
        MissingDependencyError: If river is not installed (``flinkai[bench]``).
    """

    def __init__(self, name: str, spec: RiverParams) -> None:
        self.name = name
        self.spec = spec
        drift = require_river()
        classes = {"adwin": drift.ADWIN, "page_hinkley": drift.PageHinkley}
        if spec.kind not in classes:
            raise ValueError(f"unknown river detector {spec.kind!r}")
        self._cls = classes[spec.kind]
        self._feature = RunningCentroidDistance(spec.warmup_events)
        self._detector = self._cls(**dict(spec.params))

    def update(self, embedding: np.ndarray, event_time_s: float) -> float | None:
        d = self._feature.distance(embedding)
        if d is None:
            return None
        self._detector.update(d)
        if self._detector.drift_detected:
            self._feature.reset()
            self._detector = self._cls(**dict(self.spec.params))
            return float(event_time_s)
        return None

    def finish(self, event_time_s: float) -> float | None:
        return None
