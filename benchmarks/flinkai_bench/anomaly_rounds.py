"""A per-series detector over one series, with the operator's state round trip.

Shared by the bench's CAD and ARTime rows: every ``every``-th point the detector is
rebuilt from its pickled snapshot (as the operator rebuilds a key per point) and that
step is timed as an operator step; the others are timed as detector steps.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from flinkai_bench.anomaly_run import DetectorRun

__all__ = ["score_with_round_trips"]


def score_with_round_trips(
    run: DetectorRun,
    key: str,
    values: np.ndarray,
    det: Any,
    restore: Callable[[Mapping[str, Any]], Any],
    every: int,
) -> Any:
    """Score ``values`` into ``run.scores[key]`` (and ``run.native[key]``), noting
    timings and the largest pickled state in ``run``; returns the final detector.

    Args:
        det: A fresh detector with ``update(value) -> float`` and ``snapshot()``.
        restore: Rebuilds a detector from an unpickled snapshot.
    """
    out = np.zeros(len(values))
    for i, v in enumerate(values.tolist()):
        t0 = time.perf_counter()
        if i % every == 0:
            blob = pickle.dumps(det.snapshot())
            det = restore(pickle.loads(blob))
            # a capped store's size moves between its low-water mark and the cap
            run.state_bytes = max(run.state_bytes or 0, len(blob))
        out[i] = det.update(v)
        (run.operator_ms if i % every == 0 else run.step_ms).append(
            (time.perf_counter() - t0) * 1000
        )
    run.state_bytes = max(run.state_bytes or 0, len(pickle.dumps(det.snapshot())))
    run.scores[key] = out
    run.native[key] = out.copy()
    return det
