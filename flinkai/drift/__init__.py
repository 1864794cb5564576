"""Drift detectors over embedding streams: pure numpy, driven by event time or a clock.

* :class:`JSDDriftDetector` (:mod:`flinkai.drift.detector`): Jensen-Shannon
  divergence of distance histograms, z-scored against recent periods.
* :mod:`flinkai_bench.research.drift.baselines`: a fixed-window variant and river's ADWIN and
  Page-Hinkley (``bench`` extra) behind one interface, for comparison.
* :mod:`flinkai_bench.research.drift.streams`: topic-shift streams with known change points.
"""

from flinkai.drift.detector import (
    DriftConfig,
    DriftEvent,
    JSDDriftDetector,
    PeriodStats,
    js_divergence,
)

__all__ = ["DriftConfig", "DriftEvent", "JSDDriftDetector", "PeriodStats", "js_divergence"]
